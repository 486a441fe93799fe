"""Stuck experiments on kmock: what makes one Stalled, and what it costs while it stays stuck.

A stuck run can stay stuck for days when nobody acts. Whatever the kubelet rewrites meanwhile
(an image pull flipping between ErrImagePull and ImagePullBackOff, a crash loop's growing
back-off) and however many sweeps pass, the experiment costs one status write and one Warning
event, and exports one `agentrl_experiment_condition` series naming it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.conftest import minimal_body

from agentrl.api.constants import (
    DEFAULT_STARTUP_DEADLINE_SECONDS,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    ConditionType,
)
from agentrl.controller import conditions
from agentrl.controller.config import OperatorConfig
from agentrl.controller.observe import CRASH_SETTLED_SECONDS
from agentrl.controller.status import format_time, parse_time
from agentrl.render.rayjob import COMPONENT_SUBMITTER

from .conftest import Api, FakeClock, OperatorRun, wait_for
from .test_lifecycle_kmock import stuck_pod
from .test_operator_kmock import EXP, NS, RAYJOBS, created, status_of

STALLED = ConditionType.STALLED
PODS = "v1/pods"


def status_writes(api: Api, mark: int) -> int:
    return sum(
        1 for r in api.emu.log[mark:]
        if r.is_write and r.resource.endswith("/rlexperiments") and r.subresource == "status"
    )  # fmt: skip


def stalled(api: Api) -> dict[str, Any] | None:
    st = status_of(api)
    return st if conditions.is_true(st, STALLED) else None


def condition_series(operator: OperatorRun) -> dict[tuple[str, str], float]:
    """agentrl_experiment_condition of rl/demo: (condition, reason) -> value."""
    out = {}
    for family in operator.metrics.registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "agentrl_experiment_condition" and labels["experiment"] == "demo":
                assert labels["experiment_namespace"] == NS
                out[(labels["condition"], labels["reason"])] = sample.value
    return out


async def sweeps(operator: OperatorRun, n: int) -> None:
    """Wait until `n` whole sweeps ran after this call (one may be under way already)."""
    assert operator.memo is not None
    controller = operator.memo.controller
    target = controller.sweeps + n + 1
    await wait_for(lambda: controller.sweeps >= target, what=f"{n} sweeps")


async def initializing(api: Api, rayjob: dict[str, Any] | None = None) -> datetime:
    exp = await created(api, minimal_body())  # no startupDeadlineSeconds: the default applies
    status = rayjob or {"jobDeploymentStatus": "Initializing"}
    await api.patch(RAYJOBS, NS, "demo", {"status": status}, "status")
    await wait_for(lambda: status_of(api).get("rayJob"), what="the RayJob's status mirrored")
    return parse_time(exp["metadata"]["creationTimestamp"])


async def test_past_the_default_deadline_one_write_and_one_event_however_long(
    api: Api, operator: OperatorRun, clock: FakeClock
) -> None:
    start = await initializing(api)
    await sweeps(operator, 2)
    assert stalled(api) is None
    mark, events = len(api.emu.log), len(api.events("demo"))
    # The emulator stamped creationTimestamp from the real clock: move relative to it.
    clock.set(start + timedelta(seconds=DEFAULT_STARTUP_DEADLINE_SECONDS + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "StartupDeadlineExceeded"
    assert f"startupDeadlineSeconds={DEFAULT_STARTUP_DEADLINE_SECONDS}" in cond["message"]
    # When it became stuck is the moment the deadline passed, not when a sweep noticed.
    deadline = start + timedelta(seconds=DEFAULT_STARTUP_DEADLINE_SECONDS)
    assert cond["lastTransitionTime"] == format_time(deadline)
    await wait_for(lambda: api.reasons("demo")[events:] == ["Stalled"], what="the Stalled event")
    for minutes in range(1, 11):  # ten more sweeps, each later than the one before
        clock.set(deadline + timedelta(minutes=minutes))
        await sweeps(operator, 1)
    assert status_writes(api, mark) == 1
    assert api.reasons("demo")[events:] == ["Stalled"]
    assert stalled(api) == st
    assert condition_series(operator) == {("Stalled", "StartupDeadlineExceeded"): 1.0}
    # The series goes with the experiment.
    await api.delete(EXP, NS, "demo")
    await wait_for(lambda: not condition_series(operator), what="the series removed")


async def test_an_image_pull_that_keeps_flipping_reasons_is_one_trouble(
    api: Api, operator: OperatorRun
) -> None:
    await initializing(api)
    mark, events = len(api.emu.log), len(api.events("demo"))
    await api.create(
        stuck_pod(
            "demo-head-abc",
            {"reason": "ErrImagePull", "message": "rpc error: code = NotFound desc = not found"},
        )
    )
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "ErrImagePull"
    assert cond["message"] == (
        "pod demo-head-abc: ErrImagePull: container ray-head: rpc error: code = NotFound desc = "
        "not found"
    )
    # What the kubelet writes at every retry: back-off, a new pull, back-off...
    for attempt in range(6):
        waiting = (
            {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "x" ({attempt})'}
            if attempt % 2 == 0
            else {"reason": "ErrImagePull", "message": f"rpc error: attempt {attempt}"}
        )
        status = {"containerStatuses": [{"name": "ray-head", "state": {"waiting": waiting}}]}
        await api.patch(PODS, NS, "demo-head-abc", {"status": status})
    # Then the image arrives; the pod's events are handled in order, so once Stalled clears
    # every flip before it has been seen.
    running = {"containerStatuses": [{"name": "ray-head", "state": {"running": {}}}]}
    await api.patch(PODS, NS, "demo-head-abc", {"status": running})
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")
    assert status_writes(api, mark) == 2  # stuck, then clear
    assert api.reasons("demo")[events:] == ["Stalled"]


async def test_a_crash_looping_head_is_stalled_with_its_exit_code(
    api: Api, operator: OperatorRun
) -> None:
    await initializing(api)
    mark, events = len(api.emu.log), len(api.events("demo"))
    pod = stuck_pod("demo-head-abc", None)
    for restarts, backoff in enumerate(("10s", "20s", "40s", "1m20s", "2m40s", "5m0s"), 1):
        waiting = {
            "reason": "CrashLoopBackOff",
            "message": f"back-off {backoff} restarting failed container=ray-head",
        }
        pod["status"] = {"phase": "Running", "containerStatuses": [{
            "name": "ray-head", "restartCount": restarts, "state": {"waiting": waiting},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }]}  # fmt: skip
        if restarts == 1:
            await api.create(pod)
            await wait_for(lambda: stalled(api), what="Stalled")  # the pod watch has seen it
        else:
            await api.patch(PODS, NS, "demo-head-abc", {"status": pod["status"]})
    running = {"containerStatuses": [{"name": "ray-head", "state": {"running": {}}}]}
    await api.patch(PODS, NS, "demo-head-abc", {"status": running})
    await wait_for(lambda: stalled(api) is None and status_writes(api, mark) >= 2,
                   what="Stalled, then cleared")  # fmt: skip
    assert status_writes(api, mark) == 2
    (event,) = api.events("demo")[events:]
    assert event["reason"] == "Stalled"
    assert event["message"] == (
        "pod demo-head-abc: CrashLoopBackOff: container ray-head: exited with code 1 (Error); "
        "the kubelet restarts it with back-off"
    )


async def test_a_crash_loop_between_back_offs_stays_one_trouble(
    api: Api, operator: OperatorRun, clock: FakeClock
) -> None:
    """What the kubelet shows at each restart of a crash loop: the container running, then
    terminated, then waiting in CrashLoopBackOff again. Running again is not recovery until
    it has run for CRASH_SETTLED_SECONDS: a head that loads for a minute, then runs out of
    memory, is one trouble (one write, one event, one unbroken condition), not one per
    restart."""
    await initializing(api)
    mark, events = len(api.emu.log), len(api.events("demo"))
    pod = stuck_pod("demo-head-abc", None)
    oom = {"exitCode": 137, "reason": "OOMKilled"}

    def head(restarts: int, state: dict[str, Any], last: dict[str, Any] | None) -> None:
        cs = {"name": "ray-head", "restartCount": restarts, "state": state}
        if last is not None:
            cs["lastState"] = {"terminated": last}
        pod["status"] = {"phase": "Running", "containerStatuses": [cs]}

    at = clock.now
    head(1, {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}, oom)
    await api.create(pod)
    st = await wait_for(lambda: stalled(api), what="Stalled")
    first = conditions.get(st, STALLED)
    assert first is not None and first["reason"] == "CrashLoopBackOff"
    for restarts in range(2, 6):
        at += timedelta(seconds=20)
        clock.set(at)
        head(restarts - 1, {"running": {"startedAt": format_time(at)}}, oom)
        await api.patch(PODS, NS, "demo-head-abc", {"status": pod["status"]})
        await sweeps(operator, 1)
        at += timedelta(seconds=60)  # it loads, then runs out of memory
        clock.set(at)
        ended = {**oom, "finishedAt": format_time(at)}
        head(restarts - 1, {"terminated": ended}, oom)
        await api.patch(PODS, NS, "demo-head-abc", {"status": pod["status"]})
        head(restarts, {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}, ended)
        await api.patch(PODS, NS, "demo-head-abc", {"status": pod["status"]})
        await sweeps(operator, 1)
    assert stalled(api) is not None
    assert conditions.get(status_of(api), STALLED) == first
    assert status_writes(api, mark) == 1
    assert api.reasons("demo")[events:] == ["Stalled"]
    # The fix is in: it starts again and keeps running. The watch shows nothing more, and the
    # sweep clears the trouble once it has run for CRASH_SETTLED_SECONDS.
    started = at + timedelta(seconds=30)
    clock.set(started)
    head(5, {"running": {"startedAt": format_time(started)}}, oom)
    await api.patch(PODS, NS, "demo-head-abc", {"status": pod["status"]})
    clock.set(started + timedelta(seconds=CRASH_SETTLED_SECONDS - 1))
    await sweeps(operator, 2)
    assert stalled(api) is not None
    clock.set(started + timedelta(seconds=CRASH_SETTLED_SECONDS))
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")
    assert status_writes(api, mark) == 2
    assert api.reasons("demo")[events:] == ["Stalled"]


def crash_looping_head() -> dict[str, Any]:
    """The head pod between two back-offs of its crash loop (3 restarts, last one OOMKilled)."""
    looping = {"name": "ray-head", "restartCount": 3,
               "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
               "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}  # fmt: skip
    pod = stuck_pod("demo-head-abc", None)
    pod["status"] = {"phase": "Running", "containerStatuses": [looping]}
    return pod


async def test_an_operator_that_starts_between_two_back_offs_keeps_the_crash_loop(
    api: Api, operator: OperatorRun, clock: FakeClock
) -> None:
    """A new operator (a restart, a new leader) that first sees the crash-looping head while
    it runs again between two back-offs: the status it inherits names the crash loop, which
    goes on. Nothing is written, no event posted; the sweep clears it once the container has
    run for CRASH_SETTLED_SECONDS."""
    await initializing(api)
    pod = crash_looping_head()
    await api.create(pod)
    st = await wait_for(lambda: stalled(api), what="Stalled")
    await operator.stop()
    started = clock.now
    looping = pod["status"]["containerStatuses"][0]
    again = {**looping, "state": {"running": {"startedAt": format_time(started)}}}
    await api.patch(PODS, NS, "demo-head-abc", {"status": {"containerStatuses": [again]}})
    mark, events = len(api.emu.log), len(api.events("demo"))
    await operator.start()
    await sweeps(operator, 3)
    assert status_writes(api, mark) == 0
    assert len(api.events("demo")) == events
    assert stalled(api) == st
    clock.set(started + timedelta(seconds=CRASH_SETTLED_SECONDS))
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")


def creating_pod(name: str, scheduled_at: datetime) -> dict[str, Any]:
    """A scheduled pod whose containers the kubelet has not started: ContainerCreating."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {LABEL_EXPERIMENT: "demo"}},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True",
                            "lastTransitionTime": format_time(scheduled_at)}],
            "containerStatuses": [
                {"name": "ray-worker", "state": {"waiting": {"reason": "ContainerCreating"}}}
            ],
        },
    }  # fmt: skip


def pod_event(pod: str, kind: str, reason: str, message: str, n: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{pod}.{n}", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": NS},
        "type": kind, "reason": reason, "message": message,
        "lastTimestamp": f"2026-01-01T00:00:0{n}Z", "source": {"component": "kubelet"},
    }  # fmt: skip


async def test_containercreating_past_the_bound_with_a_failed_mount(
    api: Api, operator: OperatorRun, clock: FakeClock, op_config: OperatorConfig
) -> None:
    await initializing(api)
    scheduled = clock.now
    mount = 'MountVolume.SetUp failed for volume "extra" : configmap "my-code" not found'
    await api.create(creating_pod("demo-worker-a", scheduled))
    await api.create(pod_event("demo-worker-a", "Warning", "FailedMount", mount, 1))
    # A second pod, also creating that long, but only pulling a large image: not stuck.
    await api.create(creating_pod("demo-worker-b", scheduled))
    await api.create(pod_event("demo-worker-b", "Normal", "Pulling", 'Pulling image "x"', 2))
    await sweeps(operator, 2)
    assert stalled(api) is None  # within the bound: a mount may still succeed
    clock.set(scheduled + timedelta(seconds=op_config.stuck_creating_after + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "FailedMount"
    assert cond["message"] == f"pod demo-worker-a: FailedMount: {mount}"
    mark = len(api.emu.log)
    await sweeps(operator, 3)
    assert status_writes(api, mark) == 0
    assert condition_series(operator) == {("Stalled", "FailedMount"): 1.0}
    # The ConfigMap appears, the volume mounts, the container starts: no longer stuck.
    running = {"containerStatuses": [{"name": "ray-worker", "state": {"running": {}}}]}
    await api.patch(PODS, NS, "demo-worker-a", {"status": running})
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")
    await sweeps(operator, 2)
    assert stalled(api) is None  # b is still creating, with no event that explains it


def unschedulable_pod(name: str, since: datetime, message: str) -> dict[str, Any]:
    """A pod the scheduler has found no node for since `since`."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {LABEL_EXPERIMENT: "demo"}},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": message, "lastTransitionTime": format_time(since)}],
        },
    }  # fmt: skip


async def test_a_gang_waiting_for_an_autoscaled_node_is_stalled_only_past_the_bound(
    api: Api, operator: OperatorRun, clock: FakeClock, op_config: OperatorConfig
) -> None:
    """With cluster-autoscaler or Karpenter every GPU gang starts Unschedulable and schedules
    once its node is up: not Stalled. A pod no node came for is, once it has waited
    AGENTRL_STUCK_UNSCHEDULABLE_SECONDS from its own condition's lastTransitionTime, with the
    scheduler's words, at one status write and one event however long it waits."""
    await initializing(api)
    waiting_since = clock.now
    first = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    await api.create(unschedulable_pod("demo-worker-a", waiting_since, first))
    await api.create(unschedulable_pod("demo-worker-b", waiting_since, first))
    mark, events = len(api.emu.log), len(api.events("demo"))
    await sweeps(operator, 2)
    assert stalled(api) is None  # a node may be coming up for them
    # b gets its node within the bound: it was never stuck.
    clock.set(waiting_since + timedelta(seconds=op_config.stuck_unschedulable_after / 2))
    scheduled = {"conditions": [{"type": "PodScheduled", "status": "True",
                                 "lastTransitionTime": format_time(clock.now)}]}  # fmt: skip
    await api.patch(PODS, NS, "demo-worker-b", {"status": scheduled})
    # The scheduler rewrites a's message (node counts) as nodes come and go; its clock stays.
    now = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    still = unschedulable_pod("demo-worker-a", waiting_since, now)
    await api.patch(PODS, NS, "demo-worker-a", {"status": still["status"]})
    assert operator.memo is not None
    waits = operator.memo.controller.experiments[(NS, "demo")].unschedulable
    await wait_for(lambda: waits == {"demo-worker-a": (format_time(waiting_since), now)},
                   what="a waiting for its node, with the scheduler's latest words")  # fmt: skip
    await sweeps(operator, 2)
    assert stalled(api) is None
    assert status_writes(api, mark) == 0 and len(api.events("demo")) == events
    # No node came for a: the next sweep after the bound says so, with no pod event.
    clock.set(waiting_since + timedelta(seconds=op_config.stuck_unschedulable_after + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "Unschedulable"
    assert cond["message"] == f"pod demo-worker-a: Unschedulable: {now}"
    await wait_for(lambda: api.reasons("demo")[events:] == ["Stalled"], what="the Stalled event")
    mark = len(api.emu.log)
    for minutes in range(1, 4):  # more sweeps, and the scheduler's words moving again
        clock.set(clock.now + timedelta(minutes=minutes))
        still = unschedulable_pod("demo-worker-a", waiting_since, f"0/{minutes} nodes")
        await api.patch(PODS, NS, "demo-worker-a", {"status": still["status"]})
        await sweeps(operator, 1)
    assert status_writes(api, mark) == 0
    assert api.reasons("demo")[events:] == ["Stalled"]
    assert condition_series(operator) == {("Stalled", "Unschedulable"): 1.0}
    # A node finally comes: no longer stuck.
    await api.patch(PODS, NS, "demo-worker-a", {"status": scheduled})
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")


async def test_a_rayjob_no_kuberay_acts_on_names_kuberay_at_the_deadline(
    api: Api, operator: OperatorRun, clock: FakeClock
) -> None:
    """No KubeRay operator reconciles the RayJob (not running, or not watching this
    namespace): it never gets a status and no pod exists, so the message points at KubeRay,
    not at pods' events."""
    exp = await created(api, minimal_body())
    await sweeps(operator, 2)
    assert stalled(api) is None and status_of(api).get("phase") == "Pending"
    start = parse_time(exp["metadata"]["creationTimestamp"])
    clock.set(start + timedelta(seconds=DEFAULT_STARTUP_DEADLINE_SECONDS + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "StartupDeadlineExceeded"
    assert "KubeRay has not acted on RayJob demo (it has no status)" in cond["message"]


async def test_a_submitter_that_never_starts_leaves_a_running_rayjob_stalled(
    api: Api, operator: OperatorRun, clock: FakeClock
) -> None:
    # KubeRay reports Running once it has created the submitter Job; the Job cannot start
    # a pod (quota), so Ray never gets the job and jobStatus stays empty.
    start = await initializing(api, {"jobDeploymentStatus": "Running"})
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")
    await sweeps(operator, 2)
    assert stalled(api) is None
    clock.set(start + timedelta(seconds=DEFAULT_STARTUP_DEADLINE_SECONDS + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "SubmitterNotStarted"
    assert "kubectl describe job demo" in cond["message"]
    # No spec.activeDeadlineSeconds: KubeRay never ends it, and the GPUs stay held.
    assert "holds its GPUs with no spec.activeDeadlineSeconds, until you act" in cond["message"]
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobStatus": "RUNNING"}}, "status")
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")


async def test_a_submitter_job_that_cannot_create_its_pod_is_stalled_before_the_deadline(
    api: Api, operator: OperatorRun, clock: FakeClock, op_config: OperatorConfig
) -> None:
    """KubeRay (v1.6.2) reports Running once it has created its submitter Job, named after
    the RayJob; a ResourceQuota refuses the Job's pod, the Job controller says so in a
    FailedCreate event and retries, and nothing fails. The experiment was Stalled only at the
    startup deadline (an hour by default), idle GPUs held meanwhile: now once KubeRay has
    been Running for AGENTRL_STUCK_CREATING_SECONDS, with the Job controller's words."""
    await initializing(api, {"jobDeploymentStatus": "Running"})
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")
    quota = ('Error creating: pods "demo-x7k2q" is forbidden: exceeded quota: compute, '
             "requested: cpu=500m, used: cpu=8, limited: cpu=8")  # fmt: skip
    await api.create({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "demo.1", "namespace": NS},
        "involvedObject": {"kind": "Job", "name": "demo", "namespace": NS},
        "type": "Warning", "reason": "FailedCreate", "message": quota,
        "lastTimestamp": "2026-01-01T00:00:01Z", "source": {"component": "job-controller"},
    })  # fmt: skip
    await sweeps(operator, 2)
    assert stalled(api) is None  # within the bound: the Job controller may still succeed
    clock.set(clock.now + timedelta(seconds=op_config.stuck_creating_after + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "SubmitterNotStarted"
    want = "submitter Job demo cannot create its pod, so Ray never gets the job: FailedCreate"
    assert f"{want}: {quota}" in cond["message"]
    assert "its Ray cluster holds its GPUs" in cond["message"]
    mark = len(api.emu.log)
    await sweeps(operator, 3)
    assert status_writes(api, mark) == 0  # one trouble, one write
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobStatus": "RUNNING"}}, "status")
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")


async def test_a_submitter_pod_that_cannot_be_scheduled_says_the_gpus_stay_held(
    api: Api, operator: OperatorRun
) -> None:
    """KubeRay's submitter pod (head placement, no node for it) waits Pending: Ray never gets
    the job and KubeRay keeps the RayJob Running on its GPUs. The pod is known as the
    submitter by its component label, and the Stalled message says what that costs."""
    await initializing(api, {"jobDeploymentStatus": "Running"})
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")
    pod = stuck_pod("demo-x7k2q", None, unschedulable=True)
    pod["metadata"]["labels"][LABEL_COMPONENT] = COMPONENT_SUBMITTER
    await api.create(pod)
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "Unschedulable"
    assert cond["message"].startswith("pod demo-x7k2q: Unschedulable: 0/4 nodes are available")
    assert "It is KubeRay's submitter pod, so Ray never gets the job" in cond["message"]
    assert "its Ray cluster holds its GPUs" in cond["message"]


def _replica_failure(pod: str) -> dict[str, Any]:
    """A RayJob's status while KubeRay v1.6 cannot create a worker pod: the RayCluster's
    `ReplicaFailure` condition (raycluster_controller.go, calculateStatus), mirrored into
    the RayJob's `rayClusterStatus` while it initializes (rayjob_controller.go)."""
    message = (f'FailedCreateWorkerPod\npods "{pod}" is forbidden: exceeded quota: gpus, '
               "requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=0, "
               "limited: requests.nvidia.com/gpu=4")  # fmt: skip
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateWorkerPod",
               "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    return {"jobDeploymentStatus": "Initializing", "rayClusterName": "demo-raycluster-x7k2q",
            "rayClusterStatus": {"state": "", "conditions": [failure]}}  # fmt: skip


async def test_pods_kuberay_cannot_create_are_stalled_at_once(
    api: Api, operator: OperatorRun
) -> None:
    """A GPU quota (or an admission policy) refuses the RayCluster's pods: there is no pod to
    read, only KubeRay's ReplicaFailure condition, retried with a new pod name each time.
    Stalled at once with its reason, one write and one event while it lasts."""
    await initializing(api)
    mark, events = len(api.emu.log), len(api.events("demo"))
    await api.patch(RAYJOBS, NS, "demo", {"status": _replica_failure("demo-gpu-worker-aaaaa")},
                    "status")  # fmt: skip
    st = await wait_for(lambda: stalled(api), what="Stalled")
    cond = conditions.get(st, STALLED)
    assert cond is not None and cond["reason"] == "FailedCreateWorkerPod"
    assert cond["message"].startswith("RayCluster demo-raycluster-x7k2q: FailedCreateWorkerPod: ")
    assert 'pods "demo-gpu-worker-aaaaa" is forbidden: exceeded quota: gpus' in cond["message"]
    for retry in ("bbbbb", "ccccc"):  # KubeRay tries again: another pod name, same trouble
        again = _replica_failure(f"demo-gpu-worker-{retry}")
        await api.patch(RAYJOBS, NS, "demo", {"status": again}, "status")
    await api.patch(RAYJOBS, NS, "demo", {"status": {"rayClusterStatus": {"conditions": []}}},
                    "status")  # fmt: skip
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")
    assert status_writes(api, mark) == 2  # stuck, then clear
    assert api.reasons("demo")[events:] == ["Stalled"]
