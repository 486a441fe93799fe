"""The benchmarks' --quick modes run (so they cannot rot); no timing is asserted."""

from __future__ import annotations

import json

from tests.support.process import run_benchmark


def test_benchmark_quick_runs_end_to_end() -> None:
    out = run_benchmark("gateway.py", "--quick", "--toolkit", "--requests", "40", timeout=240)
    rows = [line.split() for line in out.splitlines()]
    for conc in ("1", "8"):
        ours = [r for r in rows if r[:2] == ["agentrl", "gateway"] and r[2] == conc]
        direct = [r for r in rows if r[:2] == ["direct", "/generate"] and r[2] == conc]
        assert len(ours) == 1 and len(direct) == 1, out
        assert float(ours[0][5]) > 0  # requests/s were measured
        # The agentcore-rl-toolkit anchor ran the same OpenAI, Anthropic and streamed calls.
        for kind in ("", " (anthropic)", " (stream)"):
            name = ("toolkit gateway" + kind).split()
            assert [r for r in rows if r[: len(name)] == name and r[len(name)] == conc], kind


def test_profile_quick_runs_end_to_end() -> None:
    """`gateway_profile.py` measures every target: the whole gateway and each ablation."""
    out = run_benchmark("gateway_profile.py", "--quick", "--json", "--requests", "40")
    cpu = json.loads(out.splitlines()[-1])
    assert set(cpu) == {
        "cpu_us_gateway",
        "cpu_us_engine_in_process",
        "cpu_us_turn_in_process",
        "cpu_us_bare_aiohttp",
        "cpu_us_bare_protocol",
    }, out
    assert all(v > 0 for v in cpu.values()), out


def test_gc_quick_runs_end_to_end() -> None:
    """`gateway_gc.py` loads a frozen and an unfrozen gateway and times a full collection."""
    out = run_benchmark("gateway_gc.py", "--quick", "--json", "--sessions", "4")
    result = json.loads(out.splitlines()[-1])
    for key in ("cpu_ratio", "p99_ratio", "full_collection_ms_unfrozen"):
        assert result[key] > 0, out
    assert result["objects_frozen"] > 10_000, out  # a gateway's modules, tokenizer, renderer
