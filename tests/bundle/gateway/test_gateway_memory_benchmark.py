"""`benchmarks/gateway_memory.py --quick --json` runs end to end and reports its fixed keys.

No memory figure is asserted (RSS depends on the allocator and the machine); what is
checked is what the run did: every session's turn was recorded, the conversation grew, and
the figures are the ratios the issue's goal is stated in.
"""

from __future__ import annotations

import json

from tests.support.process import run_benchmark


def test_memory_benchmark_quick_json() -> None:
    out = run_benchmark("gateway_memory.py", "--quick", "--json")
    result = json.loads(out)
    for key in ("rss_per_session_ratio", "conversation_ratio"):
        assert isinstance(result[key], float), key
    sessions, conversation = result["scenarios"]
    assert sessions["sessions"] == 4 and sessions["chain_tokens"] > 4 * 100_000
    assert conversation["sessions"] == 1 and conversation["chain_tokens"] > 100_000
