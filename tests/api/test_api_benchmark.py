"""`benchmarks/validate.py --quick` runs, so the benchmark cannot rot (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_validate_benchmark_quick() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "validate.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {
        "parse_us", "pydantic_us", "full_vs_pydantic", "bounds_ms", "json_loads_ms",
        "bounds_vs_json", "hostile_ms",
    }  # fmt: skip
    assert all(value > 0 for value in result.values())
