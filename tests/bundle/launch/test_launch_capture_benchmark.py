"""`benchmarks/logcapture.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import re

from tests.support.process import run_benchmark


def test_log_capture_benchmark_quick_mode_reports_both_and_the_ratio() -> None:
    out = run_benchmark("logcapture.py", "--quick", timeout=300)
    for name in ("direct", "capture"):
        assert re.search(rf"^{name}\s+\d+\.\d MiB/s", out, re.M), out
    assert re.search(r"^ratio\s+\d+\.\d\d \(capture / direct\)$", out, re.M)
    assert re.search(r"^file_lacks \d+ bytes", out, re.M)
