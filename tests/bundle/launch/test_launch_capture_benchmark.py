"""`benchmarks/logcapture.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "logcapture.py"


def test_log_capture_benchmark_quick_mode_reports_both_and_the_ratio() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr  # non-zero when the job log lost a byte
    for name in ("direct", "capture"):
        assert re.search(rf"^{name}\s+\d+\.\d MiB/s", out.stdout, re.M), out.stdout
    assert re.search(r"^ratio\s+\d+\.\d\d \(capture / direct\)$", out.stdout, re.M)
    assert re.search(r"^file_lacks \d+ bytes", out.stdout, re.M)
