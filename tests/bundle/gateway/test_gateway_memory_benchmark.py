"""`benchmarks/gateway_memory.py --quick --json` runs end to end and reports its fixed keys.

No memory figure is asserted (RSS depends on the allocator and the machine); what is
checked is what the run did: every session's turn was recorded, the conversation grew, and
the figures are the ratios the issue's goal is stated in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_memory_benchmark_quick_json() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gateway_memory.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    for key in ("rss_per_session_ratio", "conversation_ratio"):
        assert isinstance(result[key], float), key
    sessions, conversation = result["scenarios"]
    assert sessions["sessions"] == 4 and sessions["chain_tokens"] > 4 * 100_000
    assert conversation["sessions"] == 1 and conversation["chain_tokens"] > 100_000
