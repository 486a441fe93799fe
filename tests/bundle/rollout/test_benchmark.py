"""The rollout benchmarks' quick modes run, so they cannot rot (no timing asserted)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.process import run_benchmark

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "rollout.py"


def test_rollout_benchmark_quick_mode_reports_both_phases_and_the_ratio() -> None:
    out = run_benchmark("rollout.py", "--quick", timeout=300)
    assert re.search(r"^baseline\s+\d+\.\d+\s+\d+\.\d+$", out, re.M)
    assert re.search(r"^rollout\s+\d+\.\d+\s+\d+\.\d+$", out, re.M)
    assert re.search(r"^rollout/baseline CPU: \d+\.\d+x", out, re.M)


def test_rollout_efficiency_benchmark_quick_mode_prints_the_fixed_json_keys() -> None:
    """The issue's check reads `useful_groups_per_time_ratio`, `wasted_episode_seconds_share`
    and `length_bias`; quick mode runs the real generate_rollout path for a few steps."""
    out = run_benchmark("rollout_efficiency.py", "--quick", "--json")
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["useful_groups_per_time_ratio"] > 0
    assert 0.0 <= doc["wasted_episode_seconds_share"] <= 1.0
    assert -1.0 < doc["length_bias"] < 1.0
    # A step cuts at most (O - B) / O of its episodes, so the bound for what was cut lies
    # within the ceiling for what may be cut.
    assert doc["length_bias_ceiling"] <= doc["length_bias_bound"] <= 0.0
    assert doc["policy"]["stragglerPolicy"] == "carryOver" and doc["steps"] == 2
    # Carried-over episodes reused under offPolicyTokens: mask train no token: their time
    # is wasted, as agentrl_discarded_episode_seconds_total{reason="masked"} counts it.
    assert 0.0 < doc["masked_episode_seconds_share"] < doc["wasted_episode_seconds_share"]


def test_rollout_efficiency_benchmark_quick_mode_prints_its_table() -> None:
    out = run_benchmark("rollout_efficiency.py", "--quick")
    assert re.search(r"^  wait-for-all\s+\d+\.\d", out, re.M)
    assert re.search(r"^  agentrl\s+\d+\.\d", out, re.M)
    assert re.search(r"useful groups per unit time: \d+\.\d\dx", out)


def test_signal_benchmark_quick_mode_prints_the_fixed_json_keys() -> None:
    """benchmarks/signal.py --json: the issue's four keys; excluded failures never reach
    an advantage and masked stale tokens never train, while the old zeroReward behaviour, run
    alongside, lets failures in (so the measurement can see them)."""
    out = run_benchmark("signal.py", "--quick", "--json")
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["failed_episodes_in_advantage"] == 0
    assert doc["stale_tokens_trained"] == 0 and doc["stale_tokens_masked"] > 0
    assert 0.0 < doc["advantage_error_p99"] < doc["zero_reward"]["advantage_error_p99"]
    assert doc["zero_reward"]["failed_episodes_in_advantage"] > 0
    assert doc["useful_groups_per_time_ratio"] > 0
    assert doc["by_failure_rate"]["0.0"]["exclude"]["advantage_error_max"] == 0.0


def test_a_benchmark_beside_signal_py_gets_the_standard_librarys_signal() -> None:
    """benchmarks/ is first on sys.path for its scripts, where signal.py would shadow the
    standard library's module; imported as `signal`, it hands the real one over."""
    probe = (
        "import runpy, sys; sys.path.insert(0, sys.argv[1]); import signal, asyncio; "
        "print(signal.__file__, signal.SIGTERM.name, asyncio.get_event_loop_policy() is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(BENCH.parent)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    path, name, loop = out.stdout.split()
    assert not path.startswith(str(BENCH.parent)) and name == "SIGTERM" and loop == "True"
