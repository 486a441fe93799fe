"""A run whose training episodes all fail, on kmock: `kubectl describe rlx` says so.

The agent service down or broken: every episode fails, slime trains on nothing and the run
holds its GPUs. The operator reads it from the head's /metrics (the same read as
status.progress) into the EpisodesFailing condition, with one Warning event when it turns
True and one Normal event when the episodes recover, however many reads, operator restarts
and head restarts come in between, and no status write while nothing changed.
"""

from __future__ import annotations

from typing import Any

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions

from .conftest import Api, OperatorRun, wait_for
from .test_lifecycle_kmock import MetricsServer, metrics_server, op_config
from .test_operator_kmock import NS, RAYJOBS, created, status_of
from .test_stuck_kmock import condition_series, status_writes, sweeps

__all__ = ["metrics_server", "op_config"]  # fixtures, used by name

EF = ConditionType.EPISODES_FAILING

TEMPLATE = """\
# TYPE agentrl_rollout_step gauge
agentrl_rollout_step 7
# TYPE agentrl_episodes_total counter
agentrl_episodes_total{{split="train",outcome="succeeded"}} {ok}
agentrl_episodes_total{{split="train",outcome="failed"}} {failed}
agentrl_episodes_total{{split="eval",outcome="failed"}} 500
# TYPE agentrl_failed_sessions_total counter
agentrl_failed_sessions_total{{split="train",reason="agent_error"}} {agent_error}
agentrl_failed_sessions_total{{split="train",reason="timeout"}} {timeout}
agentrl_failed_sessions_total{{split="train",reason="throttled"}} 0
agentrl_failed_sessions_total{{split="eval",reason="timeout"}} 500
"""


def served(ok: int, agent_error: int, timeout: int) -> str:
    return TEMPLATE.format(ok=ok, failed=agent_error + timeout, agent_error=agent_error,
                           timeout=timeout)  # fmt: skip


def failing(api: Api) -> dict[str, Any] | None:
    cond = conditions.get(status_of(api), EF)
    return cond if cond and cond["status"] == "True" else None


def recovered(api: Api) -> dict[str, Any] | None:
    cond = conditions.get(status_of(api), EF)
    return cond if cond and cond["status"] == "False" else None


async def test_episodes_that_all_fail_are_one_condition_and_one_event(
    api: Api, operator: OperatorRun, metrics_server: tuple[MetricsServer, int]
) -> None:
    server, _ = metrics_server
    # Days of healthy training before this operator's first read: 100 failures long ago.
    server.text = served(ok=5000, agent_error=100, timeout=0)
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(lambda: status_of(api).get("progress"), what="progress")
    await sweeps(operator, 2)
    assert conditions.get(status_of(api), EF) is None  # healthy: no condition at all
    # The agent service breaks: 38 of the next 40 training episodes fail.
    server.text = served(ok=5002, agent_error=130, timeout=8)
    cond = await wait_for(lambda: failing(api), what="EpisodesFailing")
    assert cond["reason"] == "AgentError"
    assert cond["message"].startswith(
        "38 of the last 40 training episodes failed (EpisodesFailing is True from 50%): "
        "agent_error 30, timeout 8."
    )
    assert "`agentrl logs demo`" in cond["message"]
    st = status_of(api)
    assert st["phase"] == "Running"
    assert st["progress"]["failedSessionRatio"] == 0.95
    await wait_for(lambda: "EpisodesFailing" in api.reasons("demo"), what="the Warning event")
    (event,) = [e for e in api.events("demo") if e["reason"] == "EpisodesFailing"]
    assert (event["type"], event["message"]) == ("Warning", cond["message"])
    assert condition_series(operator) == {("EpisodesFailing", "AgentError"): 1.0}

    # It goes on failing, read after read: every episode fails (the ratio stays 1.0), the
    # counts grow, and nothing is written or posted.
    server.text = served(ok=5002, agent_error=230, timeout=8)
    await wait_for(lambda: status_of(api)["progress"]["failedSessionRatio"] == 1.0)
    mark = len(api.emu.log)
    for n in range(3):
        server.text = served(ok=5002, agent_error=300 + 40 * n, timeout=8)
        await sweeps(operator, 2)
    assert status_writes(api, mark) == 0
    assert failing(api) == cond

    # An operator restart: the condition read back stands; the first read only starts the
    # count (its totals reach back to the head's start), and no event repeats.
    await operator.stop()
    await operator.start()
    server.text = served(ok=5002, agent_error=500, timeout=8)
    await sweeps(operator, 3)
    assert failing(api) == cond
    assert api.reasons("demo").count("EpisodesFailing") == 1

    # The head restarts (counters back to 0) with the agent service fixed: the new head's
    # own counts are read as new, and the run recovers.
    server.text = served(ok=60, agent_error=1, timeout=0)
    back = await wait_for(lambda: recovered(api), what="EpisodesFailing False")
    assert back["reason"] == "EpisodesRecovered"
    await wait_for(lambda: "EpisodesRecovered" in api.reasons("demo"), what="the Normal event")
    (normal,) = [e for e in api.events("demo") if e["reason"] == "EpisodesRecovered"]
    assert normal["type"] == "Normal"
    await wait_for(lambda: condition_series(operator) == {}, what="no problem exported")
    mark = len(api.emu.log)
    server.text = served(ok=200, agent_error=1, timeout=0)
    await sweeps(operator, 3)
    assert status_writes(api, mark) == 1  # the new ratio; the condition is unchanged
    assert api.reasons("demo").count("EpisodesFailing") == 1
    assert api.reasons("demo").count("EpisodesRecovered") == 1
