"""`benchmarks/reconcile.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "reconcile.py"
NUMBER = r"\d+\.\d+"


def test_reconcile_benchmark_quick_mode_reports_both_operators() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert re.search(rf"^create -> child p50 \(s\)\s+{NUMBER}\s+{NUMBER}$", text, re.M), text
    assert re.search(rf"^operator writes per CR\s+{NUMBER}\s+{NUMBER}$", text, re.M), text
    assert re.search(r"^writes in steady state\s+\d+\s+\d+$", text, re.M), text
    assert re.search(rf"^p50 ratio agentrl / bare kopf: {NUMBER}x", text, re.M), text
