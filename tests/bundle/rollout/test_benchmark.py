"""`benchmarks/rollout.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "rollout.py"


def test_rollout_benchmark_quick_mode_reports_both_phases_and_the_ratio() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, check=False, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert re.search(r"^baseline\s+\d+\.\d+\s+\d+\.\d+$", out.stdout, re.M)
    assert re.search(r"^rollout\s+\d+\.\d+\s+\d+\.\d+$", out.stdout, re.M)
    assert re.search(r"^rollout/baseline CPU: \d+\.\d+x", out.stdout, re.M)
