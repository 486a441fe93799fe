"""The operator enforces its policy: a spec that exceeds it is refused before anything is
created, a tightened policy marks (but never stops) experiments that no longer comply, and the
policy is read once at start-up, where an unreadable one stops the operator."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from tests.conftest import minimal_body

from agentrl.api.constants import ConditionType
from agentrl.api.policy import BASELINE, Policy
from agentrl.controller import conditions
from agentrl.controller.config import ConfigError, OperatorConfig, load

from .conftest import Api, FakeClock, OperatorRun, wait_for
from .test_lifecycle_kmock import MetricsServer, metrics_server
from .test_operator_kmock import EXP, NS, RAYJOBS, children, status_of

__all__ = ["metrics_server"]  # a fixture, used by name

ALLOWS_RUNNER = Policy(serviceAccounts=["runner"])


@pytest.fixture
def op_config(op_config: OperatorConfig) -> OperatorConfig:
    return dataclasses.replace(op_config, policy=ALLOWS_RUNNER)


def docker_socket() -> dict[str, Any]:
    return minimal_body(runtime={
        "volumes": [{"name": "sock", "hostPath": {"path": "/var/run/docker.sock"}}],
        "volumeMounts": [{"name": "sock", "mountPath": "/var/run/docker.sock"}],
    })  # fmt: skip


async def test_a_violation_is_refused_before_anything_is_created(
    api: Api, operator: OperatorRun
) -> None:
    await api.create(docker_socket())
    st = await wait_for(lambda: status_of(api).get("phase") == "Failed" and status_of(api))
    valid = conditions.get(st, ConditionType.VALID)
    assert valid is not None and valid["status"] == "False"
    assert (
        "spec.runtime.volumes[0].hostPath.path: host path /var/run/docker.sock"
        in (valid["message"])
    )
    assert "policy.hostPaths" in valid["message"]
    assert "agentrl chart value policy.hostPaths" in valid["message"]
    assert children(api) == []
    (event,) = await wait_for(lambda: api.events("demo"), what="the event")
    assert (event["type"], event["reason"]) == ("Warning", "InvalidSpec")


async def test_a_tightened_policy_marks_a_running_experiment_without_stopping_it(
    api: Api, operator: OperatorRun, op_config: OperatorConfig, clock: FakeClock
) -> None:
    await api.create(minimal_body(runtime={"serviceAccountName": "runner"}))
    await wait_for(lambda: status_of(api).get("rayJobName"), what="created")
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="running")
    await operator.stop()
    stricter = OperatorRun(dataclasses.replace(op_config, policy=BASELINE), clock)
    await stricter.start()
    try:
        st = await wait_for(
            lambda: not conditions.is_true(status_of(api), ConditionType.VALID) and status_of(api),
            what="Valid=False under the baseline policy",
        )
        # The event follows that status write; let it land before this operator stops.
        await wait_for(lambda: api.reasons("demo").count("InvalidSpec") == 1, what="the event")
    finally:
        await stricter.stop()
    assert st["phase"] == "Running"  # the RayJob decides; nothing was deleted
    assert api.get(RAYJOBS, NS, "demo") is not None
    valid = conditions.get(st, ConditionType.VALID)
    assert valid is not None and "policy.serviceAccounts" in valid["message"]
    assert api.reasons("demo").count("InvalidSpec") == 1
    assert api.get(EXP, NS, "demo") is not None


async def test_a_running_experiment_the_policy_no_longer_allows_still_reports_progress(
    api: Api, operator: OperatorRun, op_config: OperatorConfig, clock: FakeClock,
    metrics_server: tuple[MetricsServer, int],
) -> None:  # fmt: skip
    """It keeps running, so its status keeps telling how far it got: the operator that
    judged it against the tightened policy still reads its metrics (its metrics Service was
    created with its RayJob, from the spec the earlier policy allowed)."""
    server, port = metrics_server
    await api.create(minimal_body(runtime={"serviceAccountName": "runner"}))
    await wait_for(lambda: status_of(api).get("rayJobName"), what="created")
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="running")
    await operator.stop()
    url = f"http://127.0.0.1:{port}/{{namespace}}/{{name}}/metrics"
    stricter = OperatorRun(dataclasses.replace(op_config, policy=BASELINE, metrics_url=url), clock)
    await stricter.start()
    try:
        await wait_for(
            lambda: not conditions.is_true(status_of(api), ConditionType.VALID),
            what="Valid=False under the baseline policy",
        )
        st = await wait_for(lambda: status_of(api).get("progress"), what="progress")
    finally:
        await stricter.stop()
    assert server.hits and server.hits[0] == "/rl/demo/metrics"
    assert st["rollout"] == 4
    assert status_of(api)["phase"] == "Running"


async def test_a_tightened_policy_leaves_ended_experiments_as_they_were(
    api: Api, operator: OperatorRun, op_config: OperatorConfig, clock: FakeClock
) -> None:
    """An ended run's spec is history: the restarted operator does not judge it again, so a
    tightened policy posts no Warning per kept experiment and rewrites no status."""
    await api.create(minimal_body(runtime={"serviceAccountName": "runner"}))
    await wait_for(lambda: status_of(api).get("rayJobName"), what="created")
    done = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
    await api.patch(RAYJOBS, NS, "demo", {"status": done}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Succeeded", what="succeeded")
    await wait_for(lambda: api.reasons("demo") == ["Succeeded"], what="the Succeeded event")
    st = status_of(api)
    await operator.stop()
    stricter = OperatorRun(dataclasses.replace(op_config, policy=BASELINE), clock)
    await stricter.start()
    try:
        assert stricter.memo is not None
        seen = stricter.memo.controller.experiments
        await wait_for(lambda: (NS, "demo") in seen and seen[NS, "demo"].reconciled == 1,
                       what="the experiment reconciled")  # fmt: skip
        swept = stricter.memo.controller.sweeps
        await wait_for(lambda: stricter.memo.controller.sweeps >= swept + 3, what="sweeps")
    finally:
        await stricter.stop()
    assert api.reasons("demo") == ["Succeeded"]
    assert status_of(api) == st


# ---- reading the policy at start-up (pure) ------------------------------------------


def test_no_policy_configured_means_baseline() -> None:
    for env in ({}, {"AGENTRL_POLICY": ""}, {"AGENTRL_POLICY": "  "}):
        assert load(env).policy is BASELINE
    assert OperatorConfig().policy is BASELINE


def test_the_policy_is_read_from_json() -> None:
    raw = '{"serviceAccounts": ["runner"], "hostPaths": [{"pathPrefix": "/mnt/nvme/"}]}'
    policy = load({"AGENTRL_POLICY": raw}).policy
    assert policy.service_accounts == ("runner",)
    assert policy.host_paths[0].path_prefix == "/mnt/nvme"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "AGENTRL_POLICY is not JSON"),
        ('{"capabilities": ["CAP_SYS_PTRACE"]}', "AGENTRL_POLICY: policy.capabilities"),
        ('{"hostPath": []}', "did you mean hostPaths?"),
        ('["a"]', "a policy is a mapping"),
    ],
)
def test_an_unreadable_policy_stops_the_operator(raw: str, message: str) -> None:
    """Never a looser fallback: the operator does not start (exit 2 with this message)."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        load({"AGENTRL_POLICY": raw})
