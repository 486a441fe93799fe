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
