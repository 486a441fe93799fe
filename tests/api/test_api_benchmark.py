"""`benchmarks/validate.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import json

from tests.support.process import run_benchmark


def test_validate_benchmark_quick() -> None:
    out = run_benchmark("validate.py", "--quick", "--json")
    result = json.loads(out)
    assert set(result) == {
        "parse_us", "pydantic_us", "full_vs_pydantic", "bounds_ms", "json_loads_ms",
        "bounds_vs_json", "hostile_ms",
    }  # fmt: skip
    assert all(value > 0 for value in result.values())
