"""The Controller's ordering, driven directly with an in-memory API double (no HTTP).

The watch can show the RayJob the reconcile just created before that reconcile has written
the status (its ADDED event races the reconcile's own PATCH). Then one status write must
carry both, whenever the event lands: before the reconcile's status sync or after it.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support.kmock_api import kuberay_crd

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions
from agentrl.controller.config import OperatorConfig
from agentrl.controller.kube import KubeError, NotLeading
from agentrl.controller.metrics import OperatorMetrics
from agentrl.controller.reconcile import Controller
from agentrl.controller.state import Experiment
from agentrl.controller.sweep import sweep

NOW = "2026-01-01T00:00:00Z"
UID = "uid-1"


class FakeKube:
    """Records writes; `during` runs a callback inside one chosen call, like a watch event
    that arrives while the request is in flight."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, dict[str, Any] | None]] = []
        self.during: dict[str, Any] = {}
        self.objects: dict[str, Any] = {}  # kind -> the one object GET returns (else none)
        self.get_fails: dict[str, BaseException] = {}  # kind -> what its GET raises
        self.lists: dict[str, list[Any]] = {}  # kind -> what its LIST returns (else nothing)
        self.listed: list[tuple[str, dict[str, str] | None]] = []  # (kind, labels) asked

    async def _hook(self, what: str) -> None:
        callback = self.during.pop(what, None)
        if callback is not None:
            await callback()

    async def create(self, obj: dict[str, Any], *, want_body: bool = True) -> tuple[Any, Any]:
        self.writes.append(("POST", obj["kind"], None))
        await self._hook(f"create {obj['kind']}")
        return ({"status": {}} if want_body else {}), None

    async def get(self, api: str, kind: str, *_: Any) -> Any:
        if kind in self.get_fails:
            raise self.get_fails[kind]
        return kuberay_crd() if kind == "CustomResourceDefinition" else self.objects.get(kind)

    async def list_of(self, api: str, kind: str, ns: str,
                      labels: dict[str, str] | None = None) -> list[Any]:  # fmt: skip
        self.listed.append((kind, labels))
        if kind in self.get_fails:
            raise self.get_fails[kind]
        return self.lists.get(kind, [])

    async def events_of(self, ns: str, kind: str, name: str) -> list[Any]:
        return []

    async def patch(self, api: str, kind: str, ns: str, name: str, patch: dict[str, Any],
                    *, subresource: str | None = None) -> bool:  # fmt: skip
        self.writes.append(("PATCH", f"{kind}/{subresource or ''}", patch))
        await self._hook(f"patch {kind}")
        return True

    async def post_event(self, event: dict[str, Any]) -> None:
        self.writes.append(("POST", "Event", event))

    async def namespace_terminating(self, event: dict[str, Any]) -> bool:
        if self.probe_fails is not None:
            raise self.probe_fails
        return self.terminating  # a dry run: nothing written

    terminating = False  # the namespace is being deleted
    probe_fails: BaseException | None = None  # what asking that raises


def experiment() -> dict[str, Any]:
    body = minimal_body()
    body["metadata"].update(uid=UID, generation=1, creationTimestamp=NOW)
    return body


def controller_on(kube: FakeKube, clock: list[str] | None = None) -> Controller:
    """A controller on `kube` whose time is `clock[0]` (a one-item list the test moves), else
    always NOW."""
    config = OperatorConfig(image="runtime@sha256:" + "1" * 64)  # a test value, never pulled
    now = (lambda: clock[0]) if clock is not None else (lambda: NOW)
    return Controller(kube, config, {"agentrl/__init__.py": ""},  # type: ignore[arg-type]
                      OperatorMetrics(), clock=now)  # fmt: skip


def rayjob_event(status: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": "demo", "namespace": "rl", "labels": {"agentrl.io/experiment": "demo"},
            "ownerReferences": [{"kind": "RLExperiment", "name": "demo", "uid": UID}]}  # fmt: skip
    return {"metadata": meta, "status": status}


async def running_on(
    kube: FakeKube, clock: list[str] | None = None
) -> tuple[Controller, Experiment]:
    """A controller whose experiment `demo` was created, reconciled, and is Running."""
    controller = controller_on(kube, clock)
    await controller.on_experiment(experiment())
    await controller._attempt(("rl", "demo"))
    await controller.on_rayjob(rayjob_event(RUNNING))
    return controller, controller.experiments[("rl", "demo")]


@pytest.mark.parametrize("moment", ["create RayJob", "patch RLExperiment"])
async def test_a_rayjob_event_during_the_reconcile_costs_no_second_write(moment: str) -> None:
    kube = FakeKube()
    config = OperatorConfig(image="runtime@sha256:" + "1" * 64)  # a test value, never pulled
    controller = Controller(kube, config, {"agentrl/__init__.py": ""},  # type: ignore[arg-type]
                            OperatorMetrics(), clock=lambda: NOW)  # fmt: skip
    initializing = rayjob_event({"jobDeploymentStatus": "Initializing"})
    kube.during[moment] = lambda: controller.on_rayjob(initializing)
    await controller.on_experiment(experiment())
    await controller._attempt(("rl", "demo"))
    status_writes = [p for method, what, p in kube.writes if what == "RLExperiment/status"]
    # Before the reconcile's sync: folded into it. After it: one more, with just the news.
    assert len(status_writes) == (1 if moment == "create RayJob" else 2)
    final = controller.experiments[("rl", "demo")].status
    assert final["phase"] == "Initializing" and final["rayJobName"] == "demo"
    assert final["rayJob"] == {"jobDeploymentStatus": "Initializing"}
    kinds = [what for method, what, _ in kube.writes if method == "POST"]
    assert sorted(kinds[:4]) == ["ConfigMap", "ConfigMap", "Service", "Service"]
    assert kinds[4] == "RayJob"


async def test_an_experiment_being_deleted_gets_no_new_children() -> None:
    """Deleting with finalizers (foreground propagation, or another controller's finalizer)
    sets deletionTimestamp and moves the generation, which the operator reconciles. Once
    the garbage collector and KubeRay had removed the RayJob, that reconcile created the
    ConfigMaps, Services and RayJob again: a new Ray cluster for an experiment on its way
    out. Now an experiment being deleted gets no writes but its status."""
    kube = FakeKube()
    config = OperatorConfig(image="runtime@sha256:" + "1" * 64)  # a test value, never pulled
    controller = Controller(kube, config, {"agentrl/__init__.py": ""},  # type: ignore[arg-type]
                            OperatorMetrics(), clock=lambda: NOW)  # fmt: skip
    body = experiment()
    body["metadata"].update(generation=2, deletionTimestamp=NOW,
                            finalizers=["foregroundDeletion"])  # fmt: skip
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    body["status"] = {"phase": "Running", "rayJobName": "demo", "observedGeneration": 1,
                      "rayJob": running}  # fmt: skip
    await controller.on_experiment(body)
    await controller._attempt(("rl", "demo"))
    children = [(method, what) for method, what, _ in kube.writes
                if what not in ("RLExperiment/status", "Event")]  # fmt: skip
    assert children == []
    assert controller.experiments[("rl", "demo")].reconciled == 2  # not retried either


RUNNING = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}


def child_writes(kube: FakeKube) -> list[tuple[str, str]]:
    return [(method, what) for method, what, _ in kube.writes
            if what not in ("RLExperiment/status", "Event")]  # fmt: skip


def events(kube: FakeKube) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for _, what, e in kube.writes if what == "Event" and e]


@pytest.mark.parametrize(
    ("finalizers", "why"),
    [
        pytest.param(
            ["ray.io/rayjob-finalizer"],
            "check that the KubeRay operator is running",
            id="kuberay-down",
        ),
        pytest.param(
            ["example.com/audit"],
            "the controllers that own these finalizers",
            id="another-controller",
        ),
    ],
)
async def test_a_rayjob_deletion_its_finalizers_hold_is_stalled(
    finalizers: list[str], why: str
) -> None:
    """`kubectl delete rayjob` (or a foreground deletion of the experiment) while KubeRay is
    down: KubeRay's ray.io/rayjob-finalizer, removed only by KubeRay (v1.6.2 and v1.7.0,
    Reconcile's deletion branch), keeps the RayJob, so its RayCluster (owned by it) keeps
    its GPUs, while the experiment said Running. Once it has waited for
    stuck_creating_after, the experiment is Stalled (RayJobDeletionHeld), naming what holds
    it; once the RayJob goes, the run is Failed (RayJobDeleted) as before."""
    kube = FakeKube()
    clock = ["2026-01-01T00:00:00Z"]
    controller, exp = await running_on(kube, clock)
    held = rayjob_event(RUNNING)
    held["metadata"].update(deletionTimestamp="2026-01-01T00:00:10Z", finalizers=finalizers)
    await controller.on_rayjob(held)
    clock[0] = "2026-01-01T00:05:09Z"  # 299 s later: KubeRay may be restarting
    await sweep(controller)
    assert not conditions.is_true(exp.status, ConditionType.STALLED)
    kube.writes.clear()
    clock[0] = "2026-01-01T00:05:10Z"
    await sweep(controller)
    await sweep(controller)
    cond = conditions.get(exp.status, ConditionType.STALLED)
    assert cond is not None and cond["status"] == "True"
    assert cond["reason"] == "RayJobDeletionHeld"
    assert cond["lastTransitionTime"] == "2026-01-01T00:05:10Z"
    assert cond["message"].startswith(
        f"RayJob demo is being deleted, and its finalizers ({finalizers[0]}) still hold it: "
    )
    assert why in cond["message"]
    assert cond["message"].endswith("Until it is gone its Ray cluster stays, on its GPUs")
    assert events(kube) == [("Warning", "Stalled")]
    assert exp.status["phase"] == "Running"
    # The finalizer goes, and the RayJob with it: deleted outside the operator.
    kube.objects["RLExperiment"] = experiment()
    await controller.on_rayjob(held, deleted=True)
    assert exp.status["phase"] == "Failed"
    assert not conditions.is_true(exp.status, ConditionType.STALLED)


def stalled_by(reason: str, message: str) -> dict[str, Any]:
    """The Stalled condition an earlier operator wrote for the head pod stuck by `reason`."""
    return {"type": "Stalled", "status": "True", "reason": reason,
            "message": f"pod demo-head-abc: {reason}: {message}",
            "lastTransitionTime": "2025-12-31T23:00:00Z", "observedGeneration": 1}  # fmt: skip


def inherited(stalled: dict[str, Any]) -> dict[str, Any]:
    """Experiment `demo` as a starting operator first sees it: Initializing and `stalled`."""
    body = experiment()
    body["status"] = {"phase": "Initializing", "rayJobName": "demo", "observedGeneration": 1,
                      "rayJob": {"jobDeploymentStatus": "Initializing"},
                      "conditions": [stalled]}  # fmt: skip
    return body


async def test_an_inherited_crash_loop_whose_pod_went_meanwhile_is_forgotten() -> None:
    """A new operator keeps the crash loop its inherited status names until the pod's next
    event says how it goes on; a pod deleted while no operator watched sends none, so the
    first sweep lists the experiment's pods (once) and forgets it, rather than keep the run
    Stalled by a pod that is gone. A list that fails decides nothing."""
    kube = FakeKube()
    clock = ["2026-01-01T00:00:00Z"]
    controller = controller_on(kube, clock)
    looping = stalled_by("CrashLoopBackOff", "container ray-head: exited with code 137 "
                         "(OOMKilled); the kubelet restarts it with back-off")  # fmt: skip
    await controller.on_experiment(inherited(looping))
    exp = controller.experiments[("rl", "demo")]
    assert exp.stuck == {"demo-head-abc": ("CrashLoopBackOff", looping["message"].split(
        "CrashLoopBackOff: ", 1)[1])}  # fmt: skip
    kube.get_fails["Pod"] = KubeError(503, "GET", "/api/v1/namespaces/rl/pods", "unavailable")
    await sweep(controller)
    assert conditions.get(exp.status, ConditionType.STALLED) == looping
    del kube.get_fails["Pod"]
    # The head was replaced while no operator watched: its successor is no evidence either way.
    kube.lists["Pod"] = [{"metadata": {"name": "demo-head-xyz", "namespace": "rl"}}]
    await sweep(controller)
    assert kube.listed[-1] == ("Pod", {"agentrl.io/experiment": "demo"})
    assert not conditions.is_true(exp.status, ConditionType.STALLED)
    assert exp.stuck == {} and exp.inherited_pods == set()
    asked = len(kube.listed)
    await sweep(controller)
    assert len(kube.listed) == asked  # once told, never asked again


async def test_an_inherited_stuck_pod_still_there_is_left_to_its_events() -> None:
    """The list shows the inherited pod: it is there, and its watch event decides (the list
    may be older than the event that comes next); nothing is asked again."""
    kube = FakeKube()
    controller = controller_on(kube)
    pulling = stalled_by("ErrImagePull", "container ray-head: not found")
    await controller.on_experiment(inherited(pulling))
    exp = controller.experiments[("rl", "demo")]
    kube.lists["Pod"] = [{"metadata": {"name": "demo-head-abc", "namespace": "rl"}}]
    await sweep(controller)
    assert conditions.get(exp.status, ConditionType.STALLED) == pulling
    assert exp.inherited_pods == set() and len(kube.listed) == 1
    await sweep(controller)
    assert len(kube.listed) == 1


async def test_a_held_rayjob_that_goes_is_no_longer_reported_held() -> None:
    """A foreground deletion of the experiment while KubeRay is down: the RayJob's deletion
    waits on KubeRay's finalizer (Stalled, RayJobDeletionHeld). Once KubeRay is back and the
    RayJob goes, nothing holds it: the experiment, still there while the garbage collector
    removes its other children, no longer says its RayJob is held."""
    kube = FakeKube()
    clock = ["2026-01-01T00:00:00Z"]
    controller, exp = await running_on(kube, clock)
    deleting = experiment()
    deleting["metadata"].update(deletionTimestamp="2026-01-01T00:00:10Z",
                                finalizers=["foregroundDeletion"])  # fmt: skip
    deleting["status"] = exp.status
    await controller.on_experiment(deleting)
    held = rayjob_event(RUNNING)
    held["metadata"].update(deletionTimestamp="2026-01-01T00:00:10Z",
                            finalizers=["ray.io/rayjob-finalizer"])  # fmt: skip
    await controller.on_rayjob(held)
    clock[0] = "2026-01-01T00:05:10Z"
    await sweep(controller)
    assert (conditions.get(exp.status, ConditionType.STALLED) or {}).get("reason") == (
        "RayJobDeletionHeld")  # fmt: skip
    await controller.on_rayjob(held, deleted=True)
    await sweep(controller)
    assert not conditions.is_true(exp.status, ConditionType.STALLED)
    assert exp.rayjob_deleting is None


async def test_a_rayjob_deleted_by_hand_fails_the_running_experiment() -> None:
    """`kubectl delete rayjob demo` while it runs: the pods go with it, so the experiment is
    Failed (RayJobDeleted) with one Warning event, not Running for ever without pods."""
    kube = FakeKube()
    controller, exp = await running_on(kube)
    assert exp.status["phase"] == "Running"
    kube.objects["RLExperiment"] = experiment()  # still there, not being deleted
    kube.writes.clear()
    await controller.on_rayjob(rayjob_event(RUNNING), deleted=True)
    st = exp.status
    assert st["phase"] == "Failed"
    assert conditions.get(st, ConditionType.FAILED)["reason"] == "RayJobDeleted"  # type: ignore[index]
    assert events(kube) == [("Warning", "RayJobDeleted")]
    assert child_writes(kube) == []
    # A new generation (a spec edit) creates nothing: the run is over.
    body = experiment()
    body["metadata"]["generation"] = 2
    body["status"] = st
    await controller.on_experiment(body)
    await controller._attempt(("rl", "demo"))
    assert child_writes(kube) == []
    assert len(events(kube)) == 1
    after = exp.status
    assert after["observedGeneration"] == 2
    assert conditions.get(after, ConditionType.RAYJOB_CREATED) == conditions.get(
        st, ConditionType.RAYJOB_CREATED)  # still deleted, its words kept  # fmt: skip
    assert conditions.get(after, ConditionType.FAILED)["message"] == (  # type: ignore[index]
        conditions.get(st, ConditionType.FAILED)["message"])  # type: ignore[index]  # fmt: skip


@pytest.mark.parametrize("error", [
    KubeError(403, "GET", "/apis/agentrl.io/v1alpha1/namespaces/rl/rlexperiments/demo",
              '{"reason": "Forbidden", "message": "forbidden"}'),
    KubeError(503, "GET", "/apis/agentrl.io/v1alpha1/namespaces/rl/rlexperiments/demo", ""),
    ConnectionResetError("reset"),
], ids=["forbidden", "unavailable", "connection"])  # fmt: skip
async def test_a_rayjob_deletion_not_told_apart_fails_nothing_until_it_is(
    error: BaseException,
) -> None:
    """The experiment cannot be read when its RayJob disappears: whose deletion it was is
    not known, so nothing is failed on a guess (it may be the experiment's own). The sweep
    asks again: once the read works, a deletion by hand fails the run; an experiment deleted
    meanwhile (its watch shows deletionTimestamp) does not."""
    for then in ("still there", "being deleted"):
        kube = FakeKube()
        controller, exp = await running_on(kube)
        kube.get_fails["RLExperiment"] = error
        kube.writes.clear()
        await controller.on_rayjob(rayjob_event(RUNNING), deleted=True)
        await sweep(controller)
        assert exp.status["phase"] == "Running"
        assert kube.writes == []
        del kube.get_fails["RLExperiment"]
        kube.objects["RLExperiment"] = experiment()
        if then == "being deleted":
            body = experiment()
            body["metadata"].update(deletionTimestamp=NOW, finalizers=["foregroundDeletion"])
            body["status"] = exp.status
            await controller.on_experiment(body)
        await sweep(controller)
        if then == "being deleted":
            assert exp.status["phase"] == "Running"
            assert child_writes(kube) == [] and events(kube) == []
        else:
            reason = conditions.get(exp.status, ConditionType.FAILED)["reason"]  # type: ignore[index]
            assert (exp.status["phase"], reason) == ("Failed", "RayJobDeleted")
            assert events(kube) == [("Warning", "RayJobDeleted")]
        assert exp.rayjob_gone is None  # decided: not asked again


@pytest.mark.parametrize("experiment_state", ["gone", "being deleted", "a new object"])
async def test_a_rayjob_deleted_with_its_experiment_fails_nothing(experiment_state: str) -> None:
    """The garbage collector deletes the RayJob when its experiment is deleted. The watches
    are separate streams, so the RayJob's deletion may arrive before the experiment's own
    event: that is no failure of the run."""
    kube = FakeKube()
    controller, _ = await running_on(kube)
    current = experiment()
    if experiment_state == "being deleted":
        current["metadata"].update(deletionTimestamp=NOW, finalizers=["foregroundDeletion"])
        kube.objects["RLExperiment"] = current
    elif experiment_state == "a new object":
        current["metadata"]["uid"] = "uid-2"
        kube.objects["RLExperiment"] = current
    kube.writes.clear()
    await controller.on_rayjob(rayjob_event(RUNNING), deleted=True)
    assert controller.experiments[("rl", "demo")].status["phase"] == "Running"
    assert kube.writes == []


async def test_a_rayjob_deleted_with_its_namespace_fails_nothing() -> None:
    """The namespace controller deletes a namespace's content one resource type at a time,
    in no set order: the RayJob may go while its experiment is still there, with no
    deletionTimestamp. The namespace is being deleted, so the experiment goes next: no
    failure, no event (tests/e2e/test_deletion_e2e.py drives it on a real API server)."""
    kube = FakeKube()
    controller, _ = await running_on(kube)
    kube.objects["RLExperiment"] = experiment()  # still there, not being deleted
    kube.terminating = True
    kube.writes.clear()
    await controller.on_rayjob(rayjob_event(RUNNING), deleted=True)
    exp = controller.experiments[("rl", "demo")]
    assert exp.status["phase"] == "Running"
    assert kube.writes == []
    assert exp.rayjob_gone is None  # decided


@pytest.mark.parametrize("error", [
    KubeError(503, "POST", "/api/v1/namespaces/rl/events", ""),
    ConnectionResetError("reset"),
    NotLeading("POST /api/v1/namespaces/rl/events not sent"),
], ids=["unavailable", "connection", "not-leading"])  # fmt: skip
async def test_a_namespace_probe_that_fails_decides_nothing_until_it_works(
    error: BaseException,
) -> None:
    """Whether the namespace is being deleted could not be asked: nothing is failed on a
    guess, and the sweep asks again; once it answers (a live namespace), the run fails."""
    kube = FakeKube()
    controller, exp = await running_on(kube)
    kube.objects["RLExperiment"] = experiment()
    kube.probe_fails = error
    kube.writes.clear()
    await controller.on_rayjob(rayjob_event(RUNNING), deleted=True)
    await sweep(controller)
    assert exp.status["phase"] == "Running" and kube.writes == []
    assert exp.rayjob_gone is not None
    kube.probe_fails = None
    await sweep(controller)
    reason = conditions.get(exp.status, ConditionType.FAILED)["reason"]  # type: ignore[index]
    assert (exp.status["phase"], reason) == ("Failed", "RayJobDeleted")


async def test_a_namespace_probe_refused_otherwise_does_not_hold_the_verdict() -> None:
    """A refusal that says nothing about the namespace (RBAC, say) is not retried for ever:
    the namespace is taken as live and a RayJob deleted by hand fails the run."""
    kube = FakeKube()
    controller, _ = await running_on(kube)
    kube.objects["RLExperiment"] = experiment()
    kube.probe_fails = KubeError(403, "POST", "/api/v1/namespaces/rl/events",
                                 '{"reason": "Forbidden", "message": "forbidden"}')  # fmt: skip
    await controller.on_rayjob(rayjob_event(RUNNING), deleted=True)
    assert controller.experiments[("rl", "demo")].status["phase"] == "Failed"


async def test_after_a_restart_a_rayjob_missing_with_its_namespace_fails_nothing() -> None:
    kube = FakeKube()
    kube.terminating = True
    controller = controller_on(kube)
    body = experiment()
    body["status"] = {"phase": "Running", "rayJobName": "demo", "observedGeneration": 1,
                      "rayJob": RUNNING}  # fmt: skip
    await controller.on_experiment(body)
    await controller._attempt(("rl", "demo"))
    assert child_writes(kube) == [] and events(kube) == []
    assert controller.experiments[("rl", "demo")].status["phase"] == "Running"


async def test_after_a_restart_a_missing_rayjob_fails_the_experiment_and_is_not_created() -> None:
    """The RayJob deleted while no operator watched: the next operator finds the status
    naming a RayJob that does not exist. It reports the run Failed (RayJobDeleted), the
    same as the watch would have, and creates nothing (a new GPU cluster nobody asked for)."""
    kube = FakeKube()
    controller = controller_on(kube)
    body = experiment()
    body["status"] = {"phase": "Running", "rayJobName": "demo", "observedGeneration": 1,
                      "rayJob": RUNNING}  # fmt: skip
    await controller.on_experiment(body)
    await controller._attempt(("rl", "demo"))
    assert child_writes(kube) == []
    st = controller.experiments[("rl", "demo")].status
    assert st["phase"] == "Failed"
    assert conditions.get(st, ConditionType.FAILED)["reason"] == "RayJobDeleted"  # type: ignore[index]
    assert events(kube) == [("Warning", "RayJobDeleted")]
    assert controller.experiments[("rl", "demo")].reconciled == 1  # done, not retried


async def test_a_fresh_experiment_still_gets_its_rayjob() -> None:
    """No RayJob named in the status (new, or the operator stopped before creating it): the
    children are created, as before."""
    kube = FakeKube()
    controller = controller_on(kube)
    body = experiment()
    body["status"] = {"phase": "Pending", "observedGeneration": 1}
    await controller.on_experiment(body)
    await controller._attempt(("rl", "demo"))
    assert sorted(what for _, what in child_writes(kube)) == [
        "ConfigMap", "ConfigMap", "RayJob", "Service", "Service"]  # fmt: skip
    assert controller.experiments[("rl", "demo")].status["phase"] == "Pending"


# ---- EpisodesFailing across attempts ------------------------------------------------------

RETRYING = {"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED"}


async def test_a_judgement_of_one_attempt_is_not_the_next_attempts() -> None:
    """The attempt's episodes fail; KubeRay retries it and the next head is Running before
    the next sweep. The condition went False with the first attempt, and the next attempt
    is judged on its own episodes: the old judgement (or a count from the old head's totals)
    turned it True again, with a second Warning about episodes no head was running."""
    from agentrl.controller.progress import Episodes

    kube = FakeKube()
    controller, exp = await running_on(kube)
    exp.episodes_from, exp.episodes = {"episodes": 40.0}, Episodes(40, 40, (("agent_error", 40),))
    await controller.sync(exp)
    assert conditions.is_true(exp.status, ConditionType.EPISODES_FAILING)
    await controller.on_rayjob(rayjob_event(RETRYING))
    assert exp.status["phase"] == "Initializing"
    assert not conditions.is_true(exp.status, ConditionType.EPISODES_FAILING)
    await controller.on_rayjob(rayjob_event(RUNNING))  # no sweep in between
    assert exp.status["phase"] == "Running"
    assert not conditions.is_true(exp.status, ConditionType.EPISODES_FAILING)
    assert (exp.episodes_from, exp.episodes) == (None, None)
    assert events(kube).count(("Warning", "EpisodesFailing")) == 1
