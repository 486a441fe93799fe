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

from agentrl.controller.config import OperatorConfig
from agentrl.controller.metrics import OperatorMetrics
from agentrl.controller.reconcile import Controller

NOW = "2026-01-01T00:00:00Z"
UID = "uid-1"


class FakeKube:
    """Records writes; `during` runs a callback inside one chosen call, like a watch event
    that arrives while the request is in flight."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, dict[str, Any] | None]] = []
        self.during: dict[str, Any] = {}

    async def _hook(self, what: str) -> None:
        callback = self.during.pop(what, None)
        if callback is not None:
            await callback()

    async def create(self, obj: dict[str, Any], *, want_body: bool = True) -> tuple[Any, Any]:
        self.writes.append(("POST", obj["kind"], None))
        await self._hook(f"create {obj['kind']}")
        return ({"status": {}} if want_body else {}), None

    async def get(self, api: str, kind: str, *_: Any) -> Any:
        return kuberay_crd() if kind == "CustomResourceDefinition" else None

    async def patch(self, api: str, kind: str, ns: str, name: str, patch: dict[str, Any],
                    *, subresource: str | None = None) -> bool:  # fmt: skip
        self.writes.append(("PATCH", f"{kind}/{subresource or ''}", patch))
        await self._hook(f"patch {kind}")
        return True

    async def post_event(self, event: dict[str, Any]) -> None:
        self.writes.append(("POST", "Event", event))


def experiment() -> dict[str, Any]:
    body = minimal_body()
    body["metadata"].update(uid=UID, generation=1, creationTimestamp=NOW)
    return body


def rayjob_event(status: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": "demo", "namespace": "rl", "labels": {"agentrl.io/experiment": "demo"},
            "ownerReferences": [{"kind": "RLExperiment", "name": "demo", "uid": UID}]}  # fmt: skip
    return {"metadata": meta, "status": status}


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
