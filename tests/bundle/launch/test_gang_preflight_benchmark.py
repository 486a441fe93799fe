"""`benchmarks/preflight.py --quick` runs, so the benchmark cannot rot (no timing asserted);
its slime estimate counts the example's model as the size it is."""

from __future__ import annotations

import re

import pytest
from tests.support import slime_upstream
from tests.support.process import run_benchmark

pytestmark = pytest.mark.slow  # a three-node Ray cluster


def test_preflight_benchmark_quick_mode_reports_both_and_the_ratio() -> None:
    slime_upstream.require_upstream()
    out = run_benchmark("preflight.py", "--quick")
    assert re.search(r"^gang preflight, 2 workers \(gloo, 1 MiB a rank\): \d+\.\d s wall$",
                     out, re.M), out  # fmt: skip
    # Qwen3-32B: 32.8 billion parameters, 2 bytes each.
    assert "(65.5 GB of bf16 weights)" in out
    assert re.search(r"^ratio preflight / slime startup: \d+\.\d{3}$", out, re.M)
