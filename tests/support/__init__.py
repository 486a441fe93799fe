"""Test doubles shared by tests and benchmarks (they speak the real protocols)."""
