"""Stands in for torch_memory_saver: slime looks for the preload library beside it."""
