"""Which pods are stuck, and why: a table over the pod states the kubelet and scheduler write."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.controller import observe


def pod(
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if containers is not None:
        status["containerStatuses"] = containers
    if init is not None:
        status["initContainerStatuses"] = init
    if conditions is not None:
        status["conditions"] = conditions
    return {"metadata": {"name": "p"}, "status": status}


def waiting(reason: str, message: str = "", name: str = "ray-head") -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"name": name, "state": {"waiting": state}}


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pod(), None, id="no-status-yet"),
        pytest.param({}, None, id="empty"),
        pytest.param(pod([{"name": "ray-head", "state": {"running": {}}}]), None, id="running"),
        pytest.param(pod([waiting("ContainerCreating")]), None, id="creating-is-not-stuck"),
        pytest.param(pod([waiting("PodInitializing")]), None, id="initializing-is-not-stuck"),
        pytest.param(
            pod([waiting("ImagePullBackOff", "Back-off pulling image x")]),
            ("ImagePullBackOff", "container ray-head: Back-off pulling image x"),
            id="image-pull-backoff",
        ),
        pytest.param(
            pod([waiting("ErrImagePull")]), ("ErrImagePull", "container ray-head"), id="no-message"
        ),
        pytest.param(
            pod([waiting("CrashLoopBackOff", name="ray-worker")]),
            ("CrashLoopBackOff", "container ray-worker"),
            id="crash-loop",
        ),
        pytest.param(
            pod(init=[waiting("InvalidImageName", "bad", name="init")]),
            ("InvalidImageName", "container init: bad"),
            id="init-container",
        ),
        pytest.param(
            pod([waiting("CreateContainerConfigError", "secret x not found")]),
            ("CreateContainerConfigError", "container ray-head: secret x not found"),
            id="missing-secret",
        ),
        pytest.param(
            pod(conditions=[UNSCHEDULABLE]),
            ("Unschedulable", UNSCHEDULABLE["message"]),
            id="unschedulable",
        ),
        pytest.param(pod(conditions=[{**UNSCHEDULABLE, "status": "True"}]), None, id="scheduled"),
        pytest.param(
            pod(conditions=[{**UNSCHEDULABLE, "reason": "SchedulingGated"}]),
            None,
            id="gated-is-waiting-not-stuck",
        ),
        # Scheduling comes first: a pod that cannot be placed has no containers to report.
        pytest.param(
            pod([waiting("ErrImagePull")], conditions=[UNSCHEDULABLE]),
            ("Unschedulable", UNSCHEDULABLE["message"]),
            id="unschedulable-first",
        ),
    ],
)
def test_pod_stuck(obj: dict[str, Any], expected: tuple[str, str] | None) -> None:
    assert observe.pod_stuck(obj) == expected


def test_long_messages_are_cut() -> None:
    found = observe.pod_stuck(pod([waiting("ErrImagePull", "x" * 1000)]))
    assert found is not None
    assert len(found[1]) == observe.MESSAGE_MAX and found[1].endswith("...")


# Every reason the kubelet gives a container it cannot pull, create or keep running
# (pkg/kubelet/images/types.go, container/sync_result.go, kuberuntime/kuberuntime_container.go
# at v1.20.2; SignatureValidationFailed from k8s.io/cri-api/pkg/errors since 1.28).
KUBELET_STUCK_REASONS = [
    "ImagePullBackOff", "ImageInspectError", "ErrImagePull", "ErrImageNeverPull",
    "RegistryUnavailable", "InvalidImageName", "SignatureValidationFailed",
    "CrashLoopBackOff", "RunContainerError",
    "CreateContainerConfigError", "CreateContainerError", "PreCreateHookError",
    "PreStartHookError", "PostStartHookError",
]  # fmt: skip


@pytest.mark.parametrize("reason", KUBELET_STUCK_REASONS)
def test_every_kubelet_failure_reason_is_stuck(reason: str) -> None:
    found = observe.pod_stuck(pod([waiting(reason, "why")]))
    assert found is not None and found[0] == reason


def test_a_crash_loop_says_how_the_container_ended_not_the_back_off() -> None:
    status = waiting("CrashLoopBackOff", "back-off 2m40s restarting failed container=ray-head")
    status["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    assert observe.pod_stuck(pod([status])) == (
        "CrashLoopBackOff",
        "container ray-head: exited with code 137 (OOMKilled); the kubelet restarts it with "
        "back-off",
    )


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        ("ErrImagePull", "ImagePullBackOff", True),
        ("ImagePullBackOff", "ErrImagePull", True),
        ("InvalidImageName", "ImagePullBackOff", True),
        ("CrashLoopBackOff", "RunContainerError", True),
        ("Unschedulable", "Unschedulable", True),
        ("ErrImagePull", "CrashLoopBackOff", False),
        ("Unschedulable", "ErrImagePull", False),
        ("FailedMount", "CreateContainerConfigError", False),
    ],
)
def test_same_trouble(old: str, new: str, same: bool) -> None:
    assert observe.same_trouble(old, new) is same


SCHEDULED = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("obj", "since"),
    [
        pytest.param(pod([waiting("ContainerCreating")], conditions=[SCHEDULED]),
                     "2026-01-01T00:00:00Z", id="creating"),
        pytest.param(pod([waiting("PodInitializing")], [waiting("PodInitializing", name="init")],
                         conditions=[SCHEDULED]), "2026-01-01T00:00:00Z", id="initializing"),
        pytest.param(pod([waiting("ContainerCreating")]), None, id="not-scheduled"),
        pytest.param(pod([waiting("PodInitializing")], [{"name": "init", "state": {"running": {}}}],
                         conditions=[SCHEDULED]), None, id="init-container-running"),
        pytest.param(pod([waiting("ContainerCreating"), {"name": "b", "state": {"running": {}}}],
                         conditions=[SCHEDULED]), None, id="one-running"),
        pytest.param(pod(conditions=[SCHEDULED]), None, id="no-container-status-yet"),
    ],
)  # fmt: skip
def test_creating_since(obj: dict[str, Any], since: str | None) -> None:
    assert observe.creating_since(obj) == since


T1, T2 = "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def restarted(restarts: int, state: dict[str, Any], name: str = "ray-head") -> dict[str, Any]:
    return {"name": name, "restartCount": restarts, "state": state}


@pytest.mark.parametrize(
    ("obj", "since"),
    [
        pytest.param(pod([restarted(3, {"running": {"startedAt": T1}})]), T1, id="running-again"),
        pytest.param(
            pod([restarted(3, {"terminated": {"exitCode": 137, "finishedAt": T2}})]),
            T2,
            id="ended-again",
        ),
        pytest.param(
            pod([restarted(0, {"running": {"startedAt": T1}})]), None, id="never-restarted"
        ),
        pytest.param(
            pod([restarted(3, {"waiting": {"reason": "CrashLoopBackOff"}})]), None, id="in-back-off"
        ),
        pytest.param(
            pod(
                [
                    restarted(0, {"running": {"startedAt": T1}}, "a"),
                    restarted(2, {"running": {"startedAt": T2}}, "b"),
                ]
            ),
            T2,
            id="the-restarted-one",
        ),
        pytest.param(pod([restarted(1, {"running": {}})]), "", id="no-time"),
        pytest.param(
            pod(
                [restarted(0, {"running": {"startedAt": T2}})],
                [restarted(2, {"terminated": {"exitCode": 0, "finishedAt": T1}}, "init")],
            ),
            None,
            id="init-container-done",
        ),
        pytest.param(
            pod([], [restarted(2, {"terminated": {"exitCode": 1, "finishedAt": T1}}, "init")]),
            T1,
            id="init-container-failed-again",
        ),
    ],
)
def test_restarted_at(obj: dict[str, Any], since: str | None) -> None:
    assert observe.restarted_at(obj) == since


def event(kind: str, reason: str, message: str, at: str) -> dict[str, Any]:
    return {"type": kind, "reason": reason, "message": message, "lastTimestamp": at}


def test_creating_trouble_is_the_newest_event_that_explains_it() -> None:
    events = [
        event("Normal", "Scheduled", "assigned", "2026-01-01T00:00:00Z"),
        event("Warning", "FailedMount", 'configmap "a" not found', "2026-01-01T00:01:00Z"),
        event("Warning", "FailedCreatePodSandBox", "no IP addresses", "2026-01-01T00:03:00Z"),
        event("Normal", "Pulling", 'Pulling image "x"', "2026-01-01T00:04:00Z"),
        event("Warning", "FailedMount", "timed out", "2026-01-01T00:02:00Z"),
    ]
    assert observe.creating_trouble(events) == ("FailedCreatePodSandBox", "no IP addresses")
    assert observe.creating_trouble(events[:2]) == ("FailedMount", 'configmap "a" not found')
    # Pulling a large image, or a Warning that says nothing about volumes: not stuck.
    pulling = [events[0], events[3], event("Warning", "BackOff", "x", "2026-01-01T00:05:00Z")]
    assert observe.creating_trouble(pulling) is None


@pytest.mark.parametrize(
    ("rayjob", "expected"),
    [
        ({"rayClusterStatus": {"conditions": [{
            "type": "ReplicaFailure", "status": "True", "reason": "FailedCreateHeadPod",
            "message": 'FailedCreateHeadPod\npods "d-head-x" is forbidden: violates PodSecurity',
        }]}}, ("FailedCreateHeadPod", 'pods "d-head-x" is forbidden: violates PodSecurity')),
        ({"rayClusterStatus": {"conditions": [{"type": "ReplicaFailure", "status": "False"}]}},
         None),
        ({"rayClusterStatus": {"conditions": [{"type": "HeadPodReady", "status": "True"}]}}, None),
        ({"jobDeploymentStatus": "Initializing"}, None),
        (None, None),
    ],
)  # fmt: skip
def test_cluster_trouble(rayjob: dict[str, Any] | None, expected: tuple[str, str] | None) -> None:
    assert observe.cluster_trouble(rayjob) == expected


@pytest.mark.parametrize(
    ("obj", "since"),
    [
        pytest.param(
            pod(conditions=[{**UNSCHEDULABLE, "lastTransitionTime": "2026-01-01T00:05:00Z"}]),
            "2026-01-01T00:05:00Z",
            id="the-conditions-own-time",
        ),
        pytest.param(
            {
                "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"conditions": [UNSCHEDULABLE]},
            },
            "2026-01-01T00:00:00Z",
            id="else-the-pods-creation",
        ),
        pytest.param(pod(conditions=[UNSCHEDULABLE]), "", id="unknown"),
        pytest.param(pod(conditions=[{**UNSCHEDULABLE, "status": "True"}]), None, id="scheduled"),
        pytest.param(
            pod(conditions=[{**UNSCHEDULABLE, "reason": "SchedulingGated"}]), None, id="gated"
        ),
        pytest.param(pod([waiting("ErrImagePull")]), None, id="no-condition"),
    ],
)
def test_unschedulable_since(obj: dict[str, Any], since: str | None) -> None:
    """How long a pod has waited for a node is read from the pod (the scheduler keeps the
    condition's lastTransitionTime while it keeps failing), never from when it was seen."""
    assert observe.unschedulable_since(obj) == since
