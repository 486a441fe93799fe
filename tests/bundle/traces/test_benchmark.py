"""`benchmarks/merge.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "merge.py"
ROW = re.compile(r"^\s*(1|8|64)\s+\d+(\s+\d+\.\d+){5}(\s+\d+\.\d+x){4}$", re.M)


def test_merge_benchmark_quick_mode_reports_every_shape() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [m.group(1) for m in ROW.finditer(out.stdout)] == ["1", "8", "64"], out.stdout
    assert re.search(r"^ours, 1 chain: \d+\.\d+M prompt tok/s", out.stdout, re.M)
    assert re.search(r"^per-token cost, worst vs 1 chain: \d+\.\d+x", out.stdout, re.M)
