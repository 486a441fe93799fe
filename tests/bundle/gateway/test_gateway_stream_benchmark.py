"""`benchmarks/gateway_stream.py --quick --json` runs end to end and reports the fixed keys.

No timing is asserted; what is checked is what the run did: the streamed answers carried the
same text as the unstreamed ones, in both engine modes, and no victim request failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_stream_benchmark_quick_json() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gateway_stream.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    for key in ("stream_cpu_ratio_16k", "victim_p99_ratio"):
        assert isinstance(result[key], float) and result[key] > 0, key
    assert [m["engine"] for m in result["modes"]] == ["incremental", "cumulative"]
    for mode in result["modes"]:
        plain, streamed = mode["content_chars"]
        assert plain == streamed > 1000  # the deltas added up to the whole answer
        assert mode["victim_errors"] == 0
