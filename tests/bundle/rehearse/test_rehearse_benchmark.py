"""benchmarks/rehearse.py --quick runs end to end (so it cannot rot); no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .rig import ROOT

pytestmark = pytest.mark.slow


def test_benchmark_quick_runs_end_to_end() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "rehearse.py"), "--quick", "--json"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["episodes"] == 8 and result["rehearse_s"] > 0 and result["validate_s"] > 0
