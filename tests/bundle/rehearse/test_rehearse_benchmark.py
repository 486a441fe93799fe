"""benchmarks/rehearse.py --quick runs end to end (so it cannot rot); no timing is asserted."""

from __future__ import annotations

import json

import pytest
from tests.support.process import run_benchmark

pytestmark = pytest.mark.slow


def test_benchmark_quick_runs_end_to_end() -> None:
    out = run_benchmark("rehearse.py", "--quick", "--json")
    result = json.loads(out)
    assert result["episodes"] == 8 and result["rehearse_s"] > 0 and result["validate_s"] > 0
