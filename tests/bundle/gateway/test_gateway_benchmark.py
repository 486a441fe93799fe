"""The benchmark's --quick mode runs (so it cannot rot); no timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_benchmark_quick_runs_end_to_end() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gateway.py"),
            "--quick",
            "--toolkit",
            "--requests",
            "40",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    for conc in ("1", "8"):
        ours = [r for r in rows if r[:2] == ["agentrl", "gateway"] and r[2] == conc]
        direct = [r for r in rows if r[:2] == ["direct", "/generate"] and r[2] == conc]
        assert len(ours) == 1 and len(direct) == 1, proc.stdout
        assert float(ours[0][5]) > 0  # requests/s were measured
        # The agentcore-rl-toolkit anchor ran the same OpenAI, Anthropic and streamed calls.
        for kind in ("", " (anthropic)", " (stream)"):
            name = ("toolkit gateway" + kind).split()
            assert [r for r in rows if r[: len(name)] == name and r[len(name)] == conc], kind
