"""KubeRay's submitter Job refused its pod, on a real kube-apiserver with the real Job and
ResourceQuota controllers: the experiment is Stalled with the Job controller's own words.

KubeRay v1.6.2 reports a RayJob Running once it has created the submitter Job (named after
the RayJob, its pod from `spec.submitterPodTemplate`) and never fails it while that Job
creates no pod (rayjob_controller.go). A stand-in does that part: it patches the RayJob's
status as KubeRay writes it and creates the Job from the RayJob's own template. A
ResourceQuota of no pods then makes the Job controller fail to create the pod, as a quota
on a shared namespace does. This module starts its own control plane.
"""

from __future__ import annotations

import json

import pytest
from tests.conftest import minimal_body
from tests.support.kube import controller_manager, running_harness

from .operator_process import OperatorProcess, install_chart_rbac
from .test_operator_e2e import condition, status, wait

pytestmark = pytest.mark.e2e


def test_a_submitter_pod_a_quota_refuses_stalls_the_experiment(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with running_harness() as kube, controller_manager(kube, ["job", "resourcequota"]):
        operator = OperatorProcess(install_chart_rbac(kube), tmp_path_factory.mktemp("submit"),
                                   AGENTRL_STUCK_CREATING_SECONDS="0")  # fmt: skip
        operator.start()
        try:
            ns, name = "submit-quota", "exp"
            kube.ensure_namespace(ns)
            # No ServiceAccount controller here: the pod's account, as a real cluster has it.
            kube.kubectl("create", "serviceaccount", "default", "-n", ns)
            kube.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                        "metadata": {"name": "no-pods", "namespace": ns},
                        "spec": {"hard": {"pods": "0"}}})  # fmt: skip
            # As on a cluster where the quota was there first: once its controller has
            # counted it, the API server's quota admission (which reads quotas through a
            # cache) enforces it; a pod created before that slips through.
            wait(lambda: kube.kubectl_json("get", "resourcequota", "no-pods", "-n", ns)
                 .get("status", {}).get("used"), what="the quota counted")  # fmt: skip
            body = minimal_body()
            body["metadata"] = {"name": name, "namespace": ns}
            kube.apply(body)
            job = wait(lambda: kube.kubectl_json("get", "rayjobs.ray.io", "-n", ns)["items"],
                       what="the RayJob")[0]  # fmt: skip
            assert job["metadata"]["name"] == name
            # What KubeRay does once the cluster is ready (K8sJobMode): the submitter Job,
            # then Running, with no jobStatus until Ray has the job.
            template = job["spec"]["submitterPodTemplate"]
            template["spec"]["containers"][0]["command"] = ["ray", "job", "submit"]
            kube.apply({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": name, "namespace": ns},
                        "spec": {"backoffLimit": 20, "template": template}})  # fmt: skip
            kube.kubectl("patch", "rayjobs.ray.io", name, "-n", ns, "--subresource=status",
                         "--type=merge", "-p", json.dumps({"status": {
                             "jobDeploymentStatus": "Running",
                             "rayClusterName": f"{name}-raycluster-x7k2q"}}))  # fmt: skip
            st = wait(lambda: condition(s := status(kube, ns, name), "Stalled")
                      .get("status") == "True" and s, what="Stalled")  # fmt: skip
            stalled = condition(st, "Stalled")
            assert st["phase"] == "Running"
            assert stalled["reason"] == "SubmitterNotStarted"
            message = stalled["message"]
            assert "submitter Job exp cannot create its pod" in message
            assert 'FailedCreate: Error creating: pods "exp-' in message, message
            assert "is forbidden: exceeded quota: no-pods" in message, message
        finally:
            operator.stop()
            print(operator.logs()[-3000:])
