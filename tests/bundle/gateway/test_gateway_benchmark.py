"""The benchmark's --quick mode runs (so it cannot rot); no timing is asserted."""

from __future__ import annotations

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
