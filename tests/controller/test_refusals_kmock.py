"""How the operator takes the API server's refusals of its children, on kmock.

A 4xx that sending the same request again cannot fix is final for that generation: phase
Failed (nothing runs) or the RayJob left as it was (an update), a `ChildRejected` condition
carrying the API server's own message, one Warning event, and no retry until the spec
changes. Throttling, conflicts and the server's own failures are retried until they pass.
"""

from __future__ import annotations

import json

import pytest
from tests.conftest import minimal_body

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions

from .conftest import Api, OperatorRun, wait_for
from .test_operator_kmock import EXP, NS, RAYJOBS, children, created, status_of

CONFIGMAPS = "v1/configmaps"
TOO_LONG = 'ConfigMap "demo-config" is invalid: []: Too long: must have at most 1048576 bytes'


def _sweeps(operator: OperatorRun) -> int:
    assert operator.memo is not None
    return int(operator.memo.controller.sweeps)


def _posts(api: Api, resource: str, mark: int = 0) -> list[object]:
    return [r for r in api.emu.log[mark:] if r.method == "POST" and r.resource == resource
            and r.agent.startswith("agentrl")]  # fmt: skip


@pytest.mark.parametrize(
    ("resource", "name", "code", "reason", "message"),
    [
        pytest.param(CONFIGMAPS, "demo-config", 422, "Invalid", TOO_LONG, id="configmap-422"),
        pytest.param("v1/services", "demo-gateway", 422, "Invalid",
                     'Service "demo-gateway" is invalid: metadata.annotations: Invalid value',
                     id="service-422"),
        pytest.param(RAYJOBS, "demo", 422, "Invalid",
                     'RayJob.ray.io "demo" is invalid: metadata.labels: Invalid value',
                     id="rayjob-422"),
        pytest.param(CONFIGMAPS, "demo-config", 403, "Forbidden",
                     'configmaps "demo-config" is forbidden: exceeded quota: q',
                     id="quota-403"),
        pytest.param(RAYJOBS, "demo", 404, "NotFound", 'namespaces "rl" not found',
                     id="namespace-gone-404"),
        pytest.param(CONFIGMAPS, "demo-config", 413, "RequestEntityTooLarge",
                     "request is too large", id="too-large-413"),
        pytest.param(RAYJOBS, "demo", 400, "BadRequest", "the body of the request was in an "
                     "unknown format", id="bad-request-400"),
    ],
)  # fmt: skip
async def test_a_refused_child_fails_the_generation_once(
    api: Api, operator: OperatorRun, resource: str, name: str, *, code: int, reason: str,
    message: str,
) -> None:  # fmt: skip
    api.emu.refuse("POST", resource, code, reason, message, name=name)
    await api.create(minimal_body())
    st = await wait_for(lambda: status_of(api).get("phase") == "Failed" and status_of(api))
    cond = conditions.get(st, ConditionType.CHILD_REJECTED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "FailedCreate"
    assert message in cond["message"] and f"HTTP {code} {reason}" in cond["message"]
    assert cond["observedGeneration"] == 1
    failed = conditions.get(st, ConditionType.FAILED)
    assert failed is not None and failed["reason"] == "FailedCreate"
    assert api.get(RAYJOBS, NS, "demo") is None
    events = await wait_for(lambda: api.events("demo"), what="the event")
    # Several sweeps later: one event, no new attempt at any child, no writes at all.
    mark, swept = len(api.emu.log), _sweeps(operator)
    await wait_for(lambda: _sweeps(operator) >= swept + 5, what="sweeps")
    assert [(e["type"], e["reason"]) for e in api.events("demo")] == [("Warning", "FailedCreate")]
    assert message in events[0]["message"]
    assert [r for r in api.emu.log[mark:] if r.is_write] == []
    reconciles = operator.metrics.reconcile_total.labels("rejected")._value.get()
    assert reconciles == 1


async def test_a_new_generation_tries_again(api: Api, operator: OperatorRun) -> None:
    refusal = api.emu.refuse("POST", CONFIGMAPS, 422, "Invalid", TOO_LONG, name="demo-config")
    await api.create(minimal_body())
    await wait_for(lambda: status_of(api).get("phase") == "Failed")
    api.emu.refusals.remove(refusal)  # the user fixed what the API server refused
    await api.patch(EXP, NS, "demo", {"spec": {"grpo": {"numRollouts": 12}}})
    st = await wait_for(lambda: status_of(api).get("rayJobName") and status_of(api))
    assert st["phase"] == "Pending" and st["observedGeneration"] == 2
    cond = conditions.get(st, ConditionType.CHILD_REJECTED)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Accepted"
    kinds = sorted(k["kind"] for k in children(api))
    assert kinds == ["ConfigMap", "ConfigMap", "RayJob", "Service", "Service"]


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        pytest.param(503, "ServiceUnavailable", id="503"),
        pytest.param(500, "InternalError", id="500"),
        pytest.param(429, "TooManyRequests", id="429"),
        pytest.param(408, "Timeout", id="408"),
    ],
)
async def test_transient_errors_are_retried(
    api: Api, operator: OperatorRun, code: int, reason: str
) -> None:
    api.emu.refuse("POST", RAYJOBS, code, reason, "try again later", times=2)
    await api.create(minimal_body())
    st = await wait_for(lambda: status_of(api).get("rayJobName") and status_of(api))
    assert st["phase"] == "Pending"
    assert conditions.get(st, ConditionType.CHILD_REJECTED) is None
    assert len(_posts(api, RAYJOBS)) == 3  # two refused, the third created it
    assert api.events("demo") == []
    assert operator.metrics.reconcile_total.labels("error")._value.get() == 2


async def test_a_refused_update_leaves_the_rayjob_running(api: Api, operator: OperatorRun) -> None:
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Running")
    refusal = api.emu.refuse("PATCH", RAYJOBS, 422, "Invalid",
                             'RayJob.ray.io "demo" is invalid: spec.activeDeadlineSeconds: '
                             "Invalid value", name="demo")  # fmt: skip
    before = api.get(RAYJOBS, NS, "demo")
    await api.patch(EXP, NS, "demo", {"spec": {"activeDeadlineSeconds": 3600}})
    st = await wait_for(
        lambda: conditions.is_true(s := status_of(api), ConditionType.CHILD_REJECTED) and s
    )
    cond = conditions.get(st, ConditionType.CHILD_REJECTED)
    assert cond is not None and cond["reason"] == "FailedUpdate" and cond["observedGeneration"] == 2
    assert "spec.activeDeadlineSeconds" in cond["message"]
    assert "keeps its previous values" in cond["message"]
    assert st["phase"] == "Running"  # the run goes on as it was
    assert api.get(RAYJOBS, NS, "demo")["spec"] == before["spec"]  # type: ignore[index]
    journey = ["Running", "FailedUpdate"]
    await wait_for(lambda: api.reasons("demo") == journey, what="events")
    # Not retried: the refusal is still there, and nothing asks again.
    mark, swept = len(api.emu.log), _sweeps(operator)
    await wait_for(lambda: _sweeps(operator) >= swept + 3, what="sweeps")
    assert [r for r in api.emu.log[mark:] if r.is_write] == []
    # The next edit is applied, and the condition clears.
    api.emu.refusals.remove(refusal)
    await api.patch(EXP, NS, "demo", {"spec": {"activeDeadlineSeconds": 7200}})
    await wait_for(lambda: api.get(RAYJOBS, NS, "demo")["spec"].get(  # type: ignore[index]
        "activeDeadlineSeconds") == 7200, what="patched")  # fmt: skip
    st = await wait_for(
        lambda: not conditions.is_true(s := status_of(api), ConditionType.CHILD_REJECTED) and s
    )
    assert st["phase"] == "Running"


async def test_a_new_generation_after_a_refused_rayjob_brings_its_config(
    api: Api, operator: OperatorRun
) -> None:
    """The ConfigMaps and Services went in before the RayJob was refused (a policy webhook,
    say); the user fixes the spec. The RayJob created for the new generation must not mount
    the first generation's runtime config: its pods would train with the old spec."""
    denied = 'admission webhook "policy" denied the request'
    refusal = api.emu.refuse("POST", RAYJOBS, 403, "Forbidden", denied, name="demo")
    await api.create(minimal_body())
    await wait_for(lambda: status_of(api).get("phase") == "Failed")
    assert api.get(CONFIGMAPS, NS, "demo-config") is not None  # created before the refusal
    api.emu.refusals.remove(refusal)
    service = {"type": "LoadBalancer", "annotations": {"lb.example/internal": "true"}}
    await api.patch(EXP, NS, "demo", {"spec": {"grpo": {"numRollouts": 12},
                                               "gateway": {"service": service}}})  # fmt: skip
    await wait_for(lambda: status_of(api).get("rayJobName"), what="the RayJob")
    assert _config(api)["spec"]["grpo"]["numRollouts"] == 12
    assert _config(api)["spec"]["gateway"]["service"]["type"] == "LoadBalancer"
    made = api.get("v1/services", NS, "demo-gateway")
    assert made is not None and made["spec"]["type"] == "LoadBalancer"
    assert made["metadata"]["annotations"] == {"lb.example/internal": "true"}
    assert len(_posts(api, RAYJOBS)) == 2  # the refused one, then this one


async def test_a_rayjob_made_before_a_restart_keeps_the_config_it_mounts(
    api: Api, operator: OperatorRun
) -> None:
    """The operator stopped after creating the RayJob and before writing the status, and the
    spec changed meanwhile: the next operator adopts the RayJob (the change is refused as
    an immutable one) and leaves the ConfigMap its pods mount as it was."""
    await created(api)
    await operator.stop()
    await api.patch(EXP, NS, "demo", {"status": {"rayJobName": None}}, "status")
    await api.patch(EXP, NS, "demo", {"spec": {"grpo": {"numRollouts": 12}}})
    await operator.start()
    st = await wait_for(lambda: (s := status_of(api)).get("observedGeneration") == 2 and s)
    assert st["rayJobName"] == "demo"
    assert conditions.is_true(st, ConditionType.IMMUTABLE_FIELD_CHANGED)
    assert _config(api)["spec"]["grpo"]["numRollouts"] == 10
    assert len(_posts(api, RAYJOBS)) == 1  # found, not created again


def _config(api: Api) -> dict[str, object]:
    cm = api.get(CONFIGMAPS, NS, "demo-config")
    assert cm is not None
    return dict(json.loads(cm["data"]["config.json"]))
