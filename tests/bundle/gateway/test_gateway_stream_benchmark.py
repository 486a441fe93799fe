"""`benchmarks/gateway_stream.py --quick --json` runs end to end and reports the fixed keys.

No timing is asserted; what is checked is what the run did: the streamed answers carried the
same text as the unstreamed ones, in both engine modes, and no victim request failed.
"""

from __future__ import annotations

import json

from tests.support.process import run_benchmark


def test_stream_benchmark_quick_json() -> None:
    out = run_benchmark("gateway_stream.py", "--quick", "--json")
    result = json.loads(out)
    for key in ("stream_cpu_ratio_16k", "victim_p99_ratio"):
        assert isinstance(result[key], float) and result[key] > 0, key
    assert [m["engine"] for m in result["modes"]] == ["incremental", "cumulative"]
    for mode in result["modes"]:
        plain, streamed = mode["content_chars"]
        assert plain == streamed > 1000  # the deltas added up to the whole answer
        assert mode["victim_errors"] == 0
