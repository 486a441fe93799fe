"""The operator end to end on kmock: create, idempotency, invalid specs, conflicts, deletion."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from tests.conftest import minimal_body

from agentrl.api import models
from agentrl.api.constants import DEFAULT_STARTUP_DEADLINE_SECONDS, LABEL_EXPERIMENT, ConditionType
from agentrl.controller import conditions
from agentrl.controller.status import parse_time

from .conftest import Api, FakeClock, OperatorRun, wait_for

EXP = "agentrl.io/v1alpha1/rlexperiments"
RAYJOBS = "ray.io/v1/rayjobs"
NS = "rl"


def status_of(api: Api, name: str = "demo") -> dict[str, Any]:
    obj = api.get(EXP, NS, name) or {}
    return dict(obj.get("status") or {})


def children(api: Api, name: str = "demo") -> list[dict[str, Any]]:
    out = []
    for resource in ("v1/configmaps", "v1/services", RAYJOBS):
        out += [o for o in api.emu.live(resource, NS)
                if (o["metadata"].get("labels") or {}).get(LABEL_EXPERIMENT) == name]  # fmt: skip
    return out


async def created(api: Api, body: dict[str, Any] | None = None) -> dict[str, Any]:
    exp = await api.create(body or minimal_body())
    await wait_for(lambda: status_of(api, exp["metadata"]["name"]).get("rayJobName"),
                   what="status.rayJobName")  # fmt: skip
    return exp


async def test_create_renders_owned_children_and_status(api: Api, operator: OperatorRun) -> None:
    exp = await created(api)
    kids = children(api)
    assert sorted(k["kind"] for k in kids) == ["ConfigMap"] * 2 + ["RayJob"] + ["Service"] * 2
    for kid in kids:
        (ref,) = kid["metadata"]["ownerReferences"]
        assert ref["uid"] == exp["metadata"]["uid"] and ref["controller"] is True
        assert ref["kind"] == "RLExperiment" and ref["blockOwnerDeletion"] is True
    st = status_of(api)
    assert st["phase"] == "Pending" and st["observedGeneration"] == 1
    assert st["rayJobName"] == "demo" and st["gatewayURL"].startswith("http://demo-gateway.rl.svc")
    assert conditions.is_true(st, ConditionType.VALID)
    assert conditions.is_true(st, ConditionType.RAYJOB_CREATED)
    # Spec changes are found by generation, so kopf keeps no bookkeeping on the object at
    # all: no annotations, no status.kopf, no finalizer (deletion needs no handler).
    meta = api.get(EXP, NS, "demo")["metadata"]  # type: ignore[index]
    assert not any("kopf" in k for k in meta.get("annotations") or {})
    assert not meta.get("finalizers")
    assert "kopf" not in st
    assert api.events("demo") == []  # the first Pending is not news


async def test_restart_is_idempotent(api: Api, operator: OperatorRun) -> None:
    await created(api)
    before = {(k["kind"], k["metadata"]["name"]): k["metadata"]["uid"] for k in children(api)}
    st = status_of(api)
    await operator.stop()
    mark = len(api.emu.log)
    await operator.start()
    await wait_for(lambda: any(r.resource == RAYJOBS and r.method == "GET" and r.name
                               for r in api.emu.log[mark:]), what="resume")  # fmt: skip
    await operator.stop()  # let the resumed handler finish; no writes to children expected
    after = {(k["kind"], k["metadata"]["name"]): k["metadata"]["uid"] for k in children(api)}
    assert after == before
    writes = [r for r in api.emu.log[mark:] if r.is_write and r.agent.startswith("agentrl")]
    assert writes == [], writes
    assert status_of(api) == st


async def test_a_newer_release_leaves_a_running_rayjob_alone(
    api: Api, operator: OperatorRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator upgrade whose renderer gives the same spec other lifecycle values (here a
    shorter default startup deadline) writes nothing to a RayJob created for a generation
    already applied: KubeRay v1.6.2 fails an Initializing RayJob at once when a patched
    preRunningDeadlineSeconds has already passed since it started."""
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Initializing"}},
                    "status")  # fmt: skip
    await wait_for(lambda: status_of(api).get("phase") == "Initializing", what="initializing")
    job = api.get(RAYJOBS, NS, "demo") or {}
    assert job["spec"]["preRunningDeadlineSeconds"] == DEFAULT_STARTUP_DEADLINE_SECONDS
    await operator.stop()
    monkeypatch.setattr(models, "DEFAULT_STARTUP_DEADLINE_SECONDS", 600)  # the new release
    mark = len(api.emu.log)
    await operator.start()
    await wait_for(lambda: any(r.resource == RAYJOBS and r.method == "GET" and r.name
                               for r in api.emu.log[mark:]), what="resume")  # fmt: skip
    await operator.stop()
    writes = [r for r in api.emu.log[mark:] if r.is_write and r.resource == RAYJOBS]
    assert writes == [], writes
    job = api.get(RAYJOBS, NS, "demo") or {}
    assert job["spec"]["preRunningDeadlineSeconds"] == DEFAULT_STARTUP_DEADLINE_SECONDS
    # Its own edit of a lifecycle field is still applied (and renders with the new default).
    await operator.start()
    await api.patch(EXP, NS, "demo", {"spec": {"backoffLimit": 2}})
    await wait_for(lambda: ((api.get(RAYJOBS, NS, "demo") or {})["spec"].get("backoffLimit")
                            == 2), what="the edit applied")  # fmt: skip


async def test_a_newer_release_judges_the_startup_deadline_the_rayjob_carries(
    api: Api, operator: OperatorRun, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """The RayJob keeps the startup deadline it was given (the restart writes nothing to
    it), so the status judges that one, not a newer release's shorter default: KubeRay
    fails the run by the RayJob's, and a Stalled condition before then would be untrue."""
    exp = await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Initializing"}},
                    "status")  # fmt: skip
    await wait_for(lambda: status_of(api).get("phase") == "Initializing", what="initializing")
    await operator.stop()
    monkeypatch.setattr(models, "DEFAULT_STARTUP_DEADLINE_SECONDS", 600)  # the new release
    await operator.start()
    assert operator.memo is not None
    controller = operator.memo.controller
    await wait_for(lambda: controller.experiments.get((NS, "demo")) is not None
                   and controller.experiments[NS, "demo"].reconciled == 1,
                   what="resumed")  # fmt: skip
    clock.set(parse_time(exp["metadata"]["creationTimestamp"]) + timedelta(seconds=601))
    swept = controller.sweeps
    await wait_for(lambda: controller.sweeps > swept + 3, what="sweeps")
    assert not conditions.is_true(status_of(api), ConditionType.STALLED)
    # Past the deadline the RayJob carries (the default it was created with), it is judged.
    clock.set(parse_time(exp["metadata"]["creationTimestamp"])
              + timedelta(seconds=DEFAULT_STARTUP_DEADLINE_SECONDS + 1))  # fmt: skip
    st = await wait_for(lambda: conditions.is_true(s := status_of(api), ConditionType.STALLED)
                        and s, what="stalled")  # fmt: skip
    assert f"startupDeadlineSeconds={DEFAULT_STARTUP_DEADLINE_SECONDS}" in str(st)


def _rebuild() -> None:
    for model in (models.GrpoSpec, models.RLExperimentSpec, models.RLExperiment):
        model.model_rebuild(force=True)


@pytest.fixture
def newer_grpo_default() -> Iterator[Callable[[int], None]]:
    """A newer release that changed `grpo.samplesPerPrompt`'s default (restored after)."""
    field = models.GrpoSpec.model_fields["samples_per_prompt"]
    old = field.default

    def change(value: int) -> None:
        field.default = value
        _rebuild()

    yield change
    field.default = old
    _rebuild()


async def test_a_newer_release_with_other_defaults_refuses_no_unchanged_spec(
    api: Api, operator: OperatorRun, newer_grpo_default: Callable[[int], None]
) -> None:
    """The spec hashes leave defaults out, so a spec that wrote a field at the old default
    hashes differently under a release with a new default. The restarted operator must not
    call that an edit of an immutable field (a Warning, and a status telling the user to
    revert an edit nobody made)."""
    grpo = {**minimal_body()["spec"]["grpo"], "samplesPerPrompt": 8}  # the default today
    await created(api, minimal_body(grpo=grpo))
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="running")
    await wait_for(lambda: api.reasons("demo") == ["Running"], what="the Running event")
    st = status_of(api)
    await operator.stop()
    newer_grpo_default(4)
    mark = len(api.emu.log)
    await operator.start()
    await wait_for(lambda: any(r.resource == RAYJOBS and r.method == "GET" and r.name
                               for r in api.emu.log[mark:]), what="resume")  # fmt: skip
    await operator.stop()
    assert not conditions.is_true(status_of(api), ConditionType.IMMUTABLE_FIELD_CHANGED)
    assert api.reasons("demo") == ["Running"]
    assert status_of(api) == st


async def test_invalid_spec_fails_once_without_retry_storm(api: Api, operator: OperatorRun) -> None:
    body = minimal_body(grpo={"numRollouts": 10, "rolloutBatchSize": 3, "samplesPerPrompt": 8,
                              "globalBatchSize": 5})  # fmt: skip
    await api.create(body)
    st = await wait_for(lambda: status_of(api).get("phase") == "Failed" and status_of(api))
    valid = conditions.get(st, ConditionType.VALID)
    assert valid is not None and valid["status"] == "False"
    assert "spec.grpo.globalBatchSize" in valid["message"]
    # The event follows the status write (status is the record); count writes from after it.
    await wait_for(lambda: len(api.events("demo")) == 1, what="the InvalidSpec event")
    mark, swept = len(api.emu.log), _sweeps(operator)
    # Several sweeps later: still one event, no further writes, no children.
    await wait_for(lambda: _sweeps(operator) >= swept + 5, what="sweeps")
    events = api.events("demo")
    assert [e["reason"] for e in events] == ["InvalidSpec"]
    assert events[0]["type"] == "Warning" and "globalBatchSize" in events[0]["message"]
    assert children(api) == []
    assert [r for r in api.emu.log[mark:] if r.is_write] == []
    # Fixing the spec revalidates and creates the experiment.
    await api.patch(EXP, NS, "demo", {"spec": {"grpo": {"globalBatchSize": 4}}})
    await wait_for(lambda: status_of(api).get("rayJobName"), what="created after fix")
    st = status_of(api)
    assert st["phase"] == "Pending" and st["observedGeneration"] == 2
    assert conditions.is_true(st, ConditionType.VALID)


def _sweeps(operator: OperatorRun) -> int:
    assert operator.memo is not None
    return int(operator.memo.controller.sweeps)


async def test_name_conflict(api: Api, operator: OperatorRun) -> None:
    theirs = {"name": "demo-config", "namespace": NS}
    await api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": theirs, "data": {}})
    await api.create(minimal_body())
    st = await wait_for(lambda: status_of(api).get("phase") == "Failed" and status_of(api))
    cond = conditions.get(st, ConditionType.NAME_CONFLICT)
    assert cond is not None and cond["status"] == "True" and "demo-config" in cond["message"]
    # The event is posted right after the status it follows: wait for it, then check it is one.
    await wait_for(lambda: api.events("demo"), what="the event")
    assert api.reasons("demo") == ["NameConflict"]
    assert api.get(RAYJOBS, NS, "demo") is None
    assert api.get("v1/configmaps", NS, "demo-config")["data"] == {}  # type: ignore[index]


async def test_delete_leaves_nothing_behind(api: Api, operator: OperatorRun) -> None:
    await created(api)
    assert children(api)
    await api.delete(EXP, NS, "demo")
    await wait_for(lambda: api.get(EXP, NS, "demo") is None, what="experiment gone")
    await wait_for(lambda: children(api) == [], what="children collected")
