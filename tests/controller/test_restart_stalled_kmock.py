"""A Stalled experiment across an operator restart (or a new leader), on kmock.

A new operator lists experiments, RayJobs and pods at once, in no set order, and reconciles
every experiment once; some troubles it finds again only at a sweep (a pod's events, the
submitter Job's events). Until it has seen for itself what the inherited status says, that
status stands: no status write, no second Warning event, no moved lastTransitionTime, no gap
in agentrl_experiment_condition (AgentRLExperimentStalled's `for:` timer would start again).
Once it sees the trouble is over (a pod gone while no operator watched included), Stalled
clears.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions
from agentrl.controller.config import OperatorConfig
from agentrl.controller.reconcile import Controller
from agentrl.controller.status import format_time

from .conftest import Api, FakeClock, OperatorRun, wait_for
from .test_lifecycle_kmock import stuck_pod
from .test_operator_kmock import NS, RAYJOBS, status_of
from .test_stuck_kmock import (
    PODS,
    _replica_failure,
    condition_series,
    crash_looping_head,
    creating_pod,
    initializing,
    pod_event,
    stalled,
    status_writes,
    sweeps,
)

STALLED = ConditionType.STALLED
Gate = Callable[[], Awaitable[None]]


async def restarted_quietly(api: Api, operator: OperatorRun, st: dict[str, Any]) -> None:
    """The operator has restarted with `st` as the status: after its reconcile and a few
    sweeps, nothing was written, no event posted, and the condition series never left."""
    mark, events = len(api.emu.log), len(api.events("demo"))
    series = condition_series(operator)
    await operator.start()
    assert operator.memo is not None
    exps = operator.memo.controller.experiments
    await wait_for(lambda: (NS, "demo") in exps and exps[(NS, "demo")].reconciled == 1,
                   what="the restarted operator's reconcile")  # fmt: skip
    await sweeps(operator, 3)
    assert status_writes(api, mark) == 0
    assert len(api.events("demo")) == events
    assert stalled(api) == st
    assert condition_series(operator) == series


async def restarted_before_the_replay(
    api: Api,
    operator: OperatorRun,
    st: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    handler: str,
) -> None:
    """`restarted_quietly`, with the watch's replay to `handler` held until after the
    reconcile; once it comes, and after a few sweeps, still nothing was written or posted."""
    replay = held_until(monkeypatch, handler)
    mark, events = len(api.emu.log), len(api.events("demo"))
    await restarted_quietly(api, operator, st)
    await replay()
    await sweeps(operator, 3)
    assert status_writes(api, mark) == 0 and len(api.events("demo")) == events


def held_until(monkeypatch: pytest.MonkeyPatch, handler: str) -> Gate:
    """Hold the Controller's `handler` (on_pod, on_rayjob) until the returned gate is
    opened: the watch's replay comes after the restarted operator's reconcile."""
    gate, real = asyncio.Event(), getattr(Controller, handler)

    async def held(self: Controller, *args: Any, **kwargs: Any) -> None:
        await gate.wait()
        await real(self, *args, **kwargs)

    monkeypatch.setattr(Controller, handler, held)

    async def opened() -> None:
        gate.set()

    return opened


async def test_a_reconcile_before_the_pods_replay_keeps_a_stuck_pod_stalled(
    api: Api, operator: OperatorRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    await initializing(api)
    pull = {"reason": "ErrImagePull", "message": "rpc error: code = NotFound desc = not found"}
    await api.create(stuck_pod("demo-head-abc", pull))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    await operator.stop()
    # The kubelet's next retry, while no operator watched: the same trouble, other words.
    backoff = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    await api.patch(PODS, NS, "demo-head-abc", {"status": stuck_pod("x", backoff)["status"]})
    await restarted_before_the_replay(api, operator, st, monkeypatch, "on_pod")
    assert stalled(api) == st
    # Its image is fixed: the pod's event is the evidence, and Stalled clears.
    running = {"containerStatuses": [{"name": "ray-head", "state": {"running": {}}}]}
    await api.patch(PODS, NS, "demo-head-abc", {"status": running})
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")


async def test_a_failed_mount_found_at_a_sweep_stays_stalled_across_a_restart(
    api: Api, operator: OperatorRun, clock: FakeClock, op_config: OperatorConfig
) -> None:
    """The restarted operator reads a creating pod's events only at a sweep; its reconcile
    comes first."""
    await initializing(api)
    scheduled = clock.now
    mount = 'MountVolume.SetUp failed for volume "extra" : configmap "my-code" not found'
    await api.create(creating_pod("demo-worker-a", scheduled))
    await api.create(pod_event("demo-worker-a", "Warning", "FailedMount", mount, 1))
    clock.set(scheduled + timedelta(seconds=op_config.stuck_creating_after + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    await operator.stop()
    await restarted_quietly(api, operator, st)


async def test_pods_kuberay_cannot_create_keep_their_first_words_across_a_restart(
    api: Api, operator: OperatorRun
) -> None:
    """KubeRay retried with another pod name while no operator watched: the same trouble."""
    await initializing(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": _replica_failure("demo-gpu-worker-aaaaa")},
                    "status")  # fmt: skip
    st = await wait_for(lambda: stalled(api), what="Stalled")
    await operator.stop()
    again = _replica_failure("demo-gpu-worker-ccccc")
    await api.patch(RAYJOBS, NS, "demo", {"status": again}, "status")
    await restarted_quietly(api, operator, st)


async def test_a_submitter_job_refused_stays_stalled_across_a_restart(
    api: Api, operator: OperatorRun, clock: FakeClock, op_config: OperatorConfig
) -> None:
    """The restarted operator reads the submitter Job's events only at a sweep (its reconcile
    comes first), and the Job controller has named another pod since."""
    await initializing(api, {"jobDeploymentStatus": "Running"})
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")

    async def refused(pod: str, n: int) -> None:
        await api.create({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"demo.{n}", "namespace": NS},
            "involvedObject": {"kind": "Job", "name": "demo", "namespace": NS},
            "type": "Warning", "reason": "FailedCreate",
            "message": f'Error creating: pods "{pod}" is forbidden: exceeded quota: compute',
            "lastTimestamp": f"2026-01-01T00:00:0{n}Z", "source": {"component": "job-controller"},
        })  # fmt: skip

    await refused("demo-aaaaa", 1)
    clock.set(clock.now + timedelta(seconds=op_config.stuck_creating_after + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    assert conditions.get(st, STALLED)["reason"] == "SubmitterNotStarted"  # type: ignore[index]
    await operator.stop()
    await refused("demo-bbbbb", 2)
    await restarted_quietly(api, operator, st)


async def test_a_held_rayjob_deletion_stays_stalled_across_a_restart(
    api: Api, operator: OperatorRun, clock: FakeClock, op_config: OperatorConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """KubeRay is down and its finalizer holds the RayJob `kubectl delete` asked to go; the
    restarted operator reconciles before the RayJob's watch replays it."""
    await initializing(api, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")
    marks = {"deletionTimestamp": format_time(clock.now),
             "finalizers": ["ray.io/rayjob-finalizer"]}  # fmt: skip
    await api.patch(RAYJOBS, NS, "demo", {"metadata": marks})
    clock.set(clock.now + timedelta(seconds=op_config.stuck_creating_after + 1))
    st = await wait_for(lambda: stalled(api), what="Stalled")
    assert conditions.get(st, STALLED)["reason"] == "RayJobDeletionHeld"  # type: ignore[index]
    await operator.stop()
    await restarted_before_the_replay(api, operator, st, monkeypatch, "on_rayjob")


async def test_an_inherited_crash_loop_whose_pod_went_meanwhile_clears_at_once(
    api: Api, operator: OperatorRun
) -> None:
    """The crash-looping head was deleted while no operator watched (a `kubectl delete pod`,
    a node drained): no event will say so. The restarted operator's first sweep lists the
    experiment's pods and clears Stalled, instead of naming the gone pod for
    CRASH_SETTLED_SECONDS (10 minutes; the clock does not move here)."""
    await initializing(api)
    await api.create(crash_looping_head())
    await wait_for(lambda: stalled(api), what="Stalled")
    await operator.stop()
    await api.delete(PODS, NS, "demo-head-abc")
    await operator.start()
    await wait_for(lambda: stalled(api) is None, what="Stalled cleared")
    assert condition_series(operator) == {}
