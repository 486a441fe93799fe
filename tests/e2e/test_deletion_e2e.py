"""Deleting experiments on a real kube-apiserver with kube-controller-manager's garbage
collector and namespace controller running: nothing the experiment made is left behind, and
no deletion waits on the operator.

The operator keeps no finalizer, so deletion depends on the owner references alone: the
garbage collector removes the RayJob, ConfigMaps and Services, and the RayCluster KubeRay made
(owned by the RayJob). A stand-in for KubeRay does what KubeRay v1.6.2 does around deletion
(`ray-operator/controllers/ray/rayjob_controller.go`): it puts `ray.io/rayjob-finalizer` on
each new RayJob, creates the RayCluster with a controller reference to it, and removes the
finalizer once the RayJob is being deleted. The RayJob's status is patched as KubeRay writes
it. This module starts its own control plane: the garbage collector must not act on other
modules' objects.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support.kube import KubeHarness, controller_manager, running_harness, wait_established

from agentrl.api.constants import LABEL_EXPERIMENT

from .operator_process import OperatorProcess, install_chart_rbac
from .test_operator_e2e import children, condition, events, status, wait

pytestmark = pytest.mark.e2e
KUBERAY_FINALIZER = "ray.io/rayjob-finalizer"  # utils.RayJobStopJobFinalizer, v1.6.2
# Only what this test needs of KubeRay's RayCluster (the harness installs its full CRD when
# the KubeRay schemas are at hand; a fresh clone vendors only the RayJob's).
RAYCLUSTER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "rayclusters.ray.io"},
    "spec": {"group": "ray.io", "scope": "Namespaced",
             "names": {"kind": "RayCluster", "plural": "rayclusters", "singular": "raycluster"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                 "openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}]},
}  # fmt: skip


class KubeRayStandIn:
    """The part of KubeRay that deletion depends on, polling instead of watching."""

    def __init__(self, kube: KubeHarness) -> None:
        self.kube, self.stop = kube, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                jobs = self.kube.kubectl_json("get", "rayjobs.ray.io", "-A")["items"]
            except AssertionError:  # a namespace going away mid-list: next round
                continue
            for job in jobs:
                meta = job["metadata"]
                if meta.get("deletionTimestamp") and KUBERAY_FINALIZER in (
                    meta.get("finalizers") or ()
                ):  # the deletion branch: "Remove the finalizer no matter StopJob() succeeds"
                    self._patch(meta, {"metadata": {"finalizers": None}})

    def _patch(self, meta: dict[str, Any], patch: dict[str, Any]) -> None:
        self.kube.kubectl("patch", "rayjobs.ray.io", meta["name"], "-n", meta["namespace"],
                          "--type=merge", "-p", json.dumps(patch), check=False)  # fmt: skip

    def starts(self, ns: str, name: str, deployment: str) -> str:
        """What KubeRay does for a new RayJob, up to `deployment`; the RayCluster's name."""
        job = wait(lambda: _get(self.kube, "rayjobs.ray.io", ns, name), what="the RayJob")
        meta = job["metadata"]
        self._patch(meta, {"metadata": {"finalizers": [KUBERAY_FINALIZER]}})
        cluster = f"{name}-raycluster-x7k2q"
        self.kube.apply({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": cluster, "namespace": ns,
                         "labels": {"ray.io/originated-from-crd": "RayJob"},
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob",
                                              "name": name, "uid": meta["uid"],
                                              "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", "image": "ray"}]}}}},
        })  # fmt: skip
        rj_status = {"jobDeploymentStatus": deployment, "rayClusterName": cluster}
        if deployment == "Complete":
            rj_status["jobStatus"] = "SUCCEEDED"
        self.kube.kubectl("patch", "rayjobs.ray.io", name, "-n", ns, "--subresource=status",
                          "--type=merge", "-p", json.dumps({"status": rj_status}))  # fmt: skip
        return cluster


def _get(kube: KubeHarness, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    where = ("-n", ns) if ns else ()
    got = kube.kubectl("get", kind, name, *where, "-o", "json", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[KubeHarness, OperatorProcess, KubeRayStandIn]]:
    with running_harness() as kube, controller_manager(kube, ["garbagecollector", "namespace"]):
        if _get(kube, "crd", "", "rayclusters.ray.io") is None:
            kube.kubectl("create", "-f", "-", input=json.dumps(RAYCLUSTER_CRD))
            wait_established(kube, "rayclusters.ray.io")
        operator = OperatorProcess(install_chart_rbac(kube), tmp_path_factory.mktemp("deletion"))
        kuberay = KubeRayStandIn(kube)
        kuberay.thread.start()
        operator.start()
        try:
            yield kube, operator, kuberay
        finally:
            kuberay.stop.set()
            operator.stop()
            print(operator.logs()[-3000:])


def _running(kube: KubeHarness, kuberay: KubeRayStandIn, ns: str, name: str,
             deployment: str) -> str:  # fmt: skip
    kube.ensure_namespace(ns)
    body = minimal_body()
    body["metadata"] = {"name": name, "namespace": ns}
    kube.apply(body)
    cluster = kuberay.starts(ns, name, deployment)
    phase = {"Initializing": "Initializing", "Running": "Running", "Complete": "Succeeded"}
    wait(lambda: status(kube, ns, name).get("phase") == phase[deployment], what=deployment)
    return cluster


def _left(kube: KubeHarness, ns: str, name: str, cluster: str) -> list[str]:
    kids = [f"{k['kind']}/{k['metadata']['name']}" for k in children(kube, ns, name)]
    return kids + ([f"RayCluster/{cluster}"] if _get(kube, "rayclusters.ray.io", ns, cluster)
                   else [])  # fmt: skip


@pytest.mark.parametrize("cascade", ["background", "foreground"])
@pytest.mark.parametrize("deployment", ["Initializing", "Running", "Complete"])
def test_deleting_an_experiment_leaves_nothing(
    cluster: tuple[KubeHarness, OperatorProcess, KubeRayStandIn], deployment: str, cascade: str
) -> None:
    kube, _, kuberay = cluster
    ns, name = "del-" + deployment.lower(), f"exp-{cascade}"
    ray_cluster = _running(kube, kuberay, ns, name, deployment)
    # Two ConfigMaps, two Services, the RayJob and its RayCluster.
    assert len(_left(kube, ns, name, ray_cluster)) == 6
    kube.kubectl("delete", "rlx", name, "-n", ns, f"--cascade={cascade}", "--wait=true",
                 "--timeout=90s")  # fmt: skip
    wait(lambda: not _left(kube, ns, name, ray_cluster), what="every child collected")
    assert _get(kube, "rlx", ns, name) is None


def test_deleting_the_namespace_leaves_nothing(
    cluster: tuple[KubeHarness, OperatorProcess, KubeRayStandIn],
) -> None:
    kube, _, kuberay = cluster
    ns = "del-namespace"
    _running(kube, kuberay, ns, "exp", "Running")
    kube.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s")
    assert _get(kube, "namespace", "", ns) is None


def test_deleting_while_the_operator_is_down(
    cluster: tuple[KubeHarness, OperatorProcess, KubeRayStandIn],
) -> None:
    """Nothing waits on the operator (no finalizer): a `kubectl delete` with no operator
    running (uninstalled, or down) returns and the children are collected. An experiment
    of the same name applied meanwhile gets its own children once the operator is back,
    and none of its predecessor's."""
    kube, operator, kuberay = cluster
    ns, name = "del-down", "exp"
    ray_cluster = _running(kube, kuberay, ns, name, "Running")
    operator.stop()
    try:
        kube.kubectl("delete", "rlx", name, "-n", ns, "--wait=true", "--timeout=90s")
        wait(lambda: not _left(kube, ns, name, ray_cluster), what="every child collected")
        body = minimal_body()
        body["metadata"] = {"name": name, "namespace": ns}
        kube.apply(body)
    finally:
        operator.start()
    uid = wait(lambda: _get(kube, "rlx", ns, name), what="the new experiment")["metadata"]["uid"]
    wait(lambda: status(kube, ns, name).get("rayJobName"), what="its RayJob")
    kids = children(kube, ns, name)
    assert sorted(k["kind"] for k in kids) == ["ConfigMap"] * 2 + ["RayJob"] + ["Service"] * 2
    assert all(k["metadata"]["ownerReferences"][0]["uid"] == uid for k in kids)
    labelled = kube.kubectl_json("get", "rayclusters.ray.io", "-n", ns)["items"]
    assert labelled == []  # the predecessor's cluster went with its RayJob
    assert all(LABEL_EXPERIMENT in k["metadata"]["labels"] for k in kids)


@pytest.mark.parametrize("operator_down", [True, False], ids=["operator-down", "operator-up"])
def test_a_rayjob_deleted_by_hand_fails_the_run(
    cluster: tuple[KubeHarness, OperatorProcess, KubeRayStandIn], operator_down: bool
) -> None:
    """`kubectl delete rayjob`: KubeRay's finalizer goes, the garbage collector takes the Ray
    cluster with it. The operator that watched it, or the next one, finding the status naming
    a RayJob that is gone, reports the run Failed (RayJobDeleted) with one Warning event
    saying what to do, and creates no RayJob again (a new GPU cluster nobody asked for)."""
    kube, operator, kuberay = cluster
    ns, name = "del-rayjob-" + ("down" if operator_down else "up"), "exp"
    ray_cluster = _running(kube, kuberay, ns, name, "Running")
    if operator_down:
        operator.stop()
    try:
        kube.kubectl("delete", "rayjobs.ray.io", name, "-n", ns, "--wait=true",
                     "--timeout=90s")  # fmt: skip
        wait(lambda: _get(kube, "rayclusters.ray.io", ns, ray_cluster) is None,
             what="the Ray cluster collected with its RayJob")  # fmt: skip
    finally:
        if operator_down:
            operator.start()
    st = wait(lambda: (s := status(kube, ns, name)).get("phase") == "Failed" and s,
              what="phase Failed")  # fmt: skip
    failed = condition(st, "Failed")
    assert failed["reason"] == "RayJobDeleted"
    assert f"RayJob {name} was deleted outside the operator while the experiment was " \
        "Running" in failed["message"]  # fmt: skip
    assert "delete this RLExperiment (`kubectl delete rlx`) and apply it again" in (
        failed["message"])  # fmt: skip
    created = condition(st, "RayJobCreated")
    assert (created["status"], created["reason"]) == ("False", "RayJobDeleted")
    warned = wait(lambda: [e for e in events(kube, ns, name) if e["reason"] == "RayJobDeleted"],
                  what="the RayJobDeleted event")  # fmt: skip
    assert [(e["type"], e["message"]) for e in warned] == [("Warning", failed["message"])]
    # Down: the verdict was written by the reconcile that would have created the RayJob.
    assert sorted(k["kind"] for k in children(kube, ns, name)) == ["ConfigMap"] * 2 + [
        "Service"] * 2  # fmt: skip


def test_a_child_created_after_its_experiment_was_deleted_is_collected(
    cluster: tuple[KubeHarness, OperatorProcess, KubeRayStandIn],
) -> None:
    """A reconcile that read the experiment just before it was deleted may still create a
    child (the RayJob comes last): its owner reference names a uid that no longer exists,
    and the garbage collector deletes it as it would a child of a live-then-deleted owner."""
    kube, _, _ = cluster
    ns = "del-late"
    kube.ensure_namespace(ns)
    ghost = {"apiVersion": "agentrl.io/v1alpha1", "kind": "RLExperiment", "name": "gone",
             "uid": "00000000-0000-0000-0000-000000000001", "controller": True,
             "blockOwnerDeletion": True}  # fmt: skip
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "gone-config", "namespace": ns, "labels": {LABEL_EXPERIMENT: "gone"},
        "ownerReferences": [ghost]}})  # fmt: skip
    wait(lambda: _get(kube, "configmap", ns, "gone-config") is None, what="collected")


def test_a_namespace_being_deleted_fails_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Deleting a namespace, the namespace controller deletes its content one resource type at
    a time, in no set order (it ranges over a map of the discovered resources): when it
    reaches RayJobs before RLExperiments, the RayJob is gone while its experiment is still
    there, with no deletionTimestamp. That is no failure of the run: the experiment goes
    next. This control plane runs no namespace controller, so the namespace stays
    Terminating and the RayJob is deleted as that controller would, first."""
    with running_harness() as kube, controller_manager(kube, ["garbagecollector"]):
        if _get(kube, "crd", "", "rayclusters.ray.io") is None:
            kube.kubectl("create", "-f", "-", input=json.dumps(RAYCLUSTER_CRD))
            wait_established(kube, "rayclusters.ray.io")
        operator = OperatorProcess(install_chart_rbac(kube), tmp_path_factory.mktemp("ns-gone"))
        kuberay = KubeRayStandIn(kube)
        kuberay.thread.start()
        operator.start()
        try:
            ns = "del-terminating"
            _running(kube, kuberay, ns, "exp", "Running")
            kube.kubectl("delete", "namespace", ns, "--wait=false")
            kube.kubectl("delete", "rayjobs.ray.io", "exp", "-n", ns, "--wait=false")
            wait(lambda: _get(kube, "rayjobs.ray.io", ns, "exp") is None, what="RayJob gone")
            decided = "deleted with its namespace"
            wait(lambda: status(kube, ns, "exp").get("phase") == "Failed"
                 or decided in operator.logs(), what="the operator's verdict")  # fmt: skip
            assert status(kube, ns, "exp").get("phase") == "Running"
        finally:
            kuberay.stop.set()
            operator.stop()
            print(operator.logs()[-3000:])
