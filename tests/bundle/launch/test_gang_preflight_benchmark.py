"""`benchmarks/preflight.py --quick` runs, so the benchmark cannot rot (no timing asserted);
its slime estimate counts the example's model as the size it is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import slime_upstream

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "benchmarks" / "preflight.py"
pytestmark = pytest.mark.slow  # a three-node Ray cluster


def test_preflight_benchmark_quick_mode_reports_both_and_the_ratio() -> None:
    slime_upstream.require_upstream()
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, check=False, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert re.search(r"^gang preflight, 2 workers \(gloo, 1 MiB a rank\): \d+\.\d s wall$",
                     out.stdout, re.M), out.stdout  # fmt: skip
    # Qwen3-32B: 32.8 billion parameters, 2 bytes each.
    assert "(65.5 GB of bf16 weights)" in out.stdout
    assert re.search(r"^ratio preflight / slime startup: \d+\.\d{3}$", out.stdout, re.M)
