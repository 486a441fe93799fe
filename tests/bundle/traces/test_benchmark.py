"""`benchmarks/merge.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import re

from tests.support.process import run_benchmark

ROW = re.compile(r"^\s*(1|8|64)\s+\d+(\s+\d+\.\d+){5}(\s+\d+\.\d+x){4}$", re.M)


def test_merge_benchmark_quick_mode_reports_every_shape() -> None:
    out = run_benchmark("merge.py", "--quick", timeout=120)
    assert [m.group(1) for m in ROW.finditer(out)] == ["1", "8", "64"], out
    assert re.search(r"^ours, 1 chain: \d+\.\d+M prompt tok/s", out, re.M)
    assert re.search(r"^per-token cost, worst vs 1 chain: \d+\.\d+x", out, re.M)
