"""Pods as KubeRay and the Job controller create them from a RayJob agentrl rendered.

`agentrl logs` finds pods by their labels, so tests need pods labelled exactly as a cluster
would label them: the pod template's labels (agentrl's, from render) plus what each
controller adds, read from their source:

- KubeRay v1.6/v1.7 head and worker pods (`ray-operator/controllers/ray/common/pod.go`,
  `labelPod`): `ray.io/node-type`, `ray.io/group`, `ray.io/cluster`, `ray.io/is-ray-node`,
  `ray.io/identifier`, `app.kubernetes.io/name`, `app.kubernetes.io/created-by`; head pods
  are named `<cluster>-head-<suffix>`;
- the submitter Job (`rayjob_controller.go`, `getSubmitterTemplate`/`createNewK8sJob`): the
  Job is named after the RayJob and its template gets `ray.io/originated-from-cr-name`,
  `ray.io/originated-from-crd`, `app.kubernetes.io/created-by`;
- Kubernetes' Job controller labels each pod `batch.kubernetes.io/job-name`, `job-name`,
  `batch.kubernetes.io/controller-uid` and `controller-uid`, and names it `<job>-<suffix>`.

The test control plane has no kubelet, so `automountServiceAccountToken` is off (no token
controller either) and a pod's `status.phase` is set by the test.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]


def _pod(name: str, template: Obj, *, labels: Obj, phase: str, created: str) -> Obj:
    spec = copy.deepcopy(template["spec"])
    spec["automountServiceAccountToken"] = False
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {**template["metadata"]["labels"], **labels},
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def _in(pod: Obj, rayjob: Obj) -> Obj:
    pod["metadata"]["namespace"] = rayjob["metadata"]["namespace"]
    return pod


def head_pod(
    rayjob: Obj, cluster: str, suffix: str = "x7k2q", phase: str = "Running", created: str = ""
) -> Obj:
    template = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    labels = {
        "ray.io/node-type": "head",
        "ray.io/group": "headgroup",
        "ray.io/cluster": cluster,
        "ray.io/is-ray-node": "yes",
        "ray.io/identifier": f"{cluster}-head",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    pod = _pod(f"{cluster}-head-{suffix}", template, labels=labels, phase=phase, created=created)
    return _in(pod, rayjob)


def worker_pod(
    rayjob: Obj, cluster: str, suffix: str = "w1a2b", phase: str = "Running", created: str = ""
) -> Obj:
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    labels = {
        "ray.io/node-type": "worker",
        "ray.io/group": group["groupName"],
        "ray.io/cluster": cluster,
        "ray.io/is-ray-node": "yes",
        "ray.io/identifier": f"{cluster}-worker",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    name = f"{cluster}-{group['groupName']}-worker-{suffix}"
    pod = _pod(name, group["template"], labels=labels, phase=phase, created=created)
    return _in(pod, rayjob)


def submitter_pod(
    rayjob: Obj,
    suffix: str = "s9d8f",
    phase: str = "Succeeded",
    created: str = "",
    job_uid: str = "0b9a6c1e-job-uid",
) -> Obj:
    job = rayjob["metadata"]["name"]
    labels = {
        "ray.io/originated-from-cr-name": job,
        "ray.io/originated-from-crd": "RayJob",
        "app.kubernetes.io/created-by": "kuberay-operator",
        "batch.kubernetes.io/job-name": job,
        "job-name": job,
        "batch.kubernetes.io/controller-uid": job_uid,
        "controller-uid": job_uid,
    }
    template = rayjob["spec"]["submitterPodTemplate"]
    pod = _pod(f"{job}-{suffix}", template, labels=labels, phase=phase, created=created)
    _in(pod, rayjob)
    # KubeRay fills the command in (`ray job submit --no-wait ...; ray job logs --follow`).
    pod["spec"]["containers"][0]["command"] = ["/bin/bash", "-ce", "--"]
    pod["spec"]["containers"][0]["args"] = ["ray job logs --follow"]
    return pod
