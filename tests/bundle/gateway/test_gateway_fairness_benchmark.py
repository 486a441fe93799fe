"""`benchmarks/gateway_fairness.py --quick --json` runs end to end and reports the fixed keys.

No timing is asserted; what is checked is what the run did: the 10 MB request was refused
with 413, the one at the limit was served, no victim request failed, and in the slowloris
phase the gateway closed everything the attacker held open and its descriptors came back.
"""

from __future__ import annotations

import json

from tests.support.process import run_benchmark


def test_fairness_benchmark_quick_json() -> None:
    out = run_benchmark("gateway_fairness.py", "--quick", "--json")
    result = json.loads(out)
    assert isinstance(result["p99_ratio"], float) and result["p99_ratio"] > 0
    assert isinstance(result["rss_growth_mb"], float) and result["rss_growth_mb"] >= 0
    refused, served = result["scenarios"]
    assert refused["hog_status"] == [413] and served["hog_status"] == [200]
    assert result["victim_errors"] == 0  # nobody else was pushed into 429 or worse
    slow = result["slowloris"]
    assert slow["attacker"]["held_at_stop"] > 0  # it did hold connections when it stopped
    assert result["slowloris_still_open"] == 0  # and the gateway closed every one
    assert (
        slow["fds_peak"] > slow["fds_before"] + 50 and slow["fds_after"] <= slow["fds_before"] + 8
    )
