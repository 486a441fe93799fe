"""The KubeRay RayJob of an experiment (ray.io/v1, K8sJobMode).

A CPU head runs slime's driver, agentrl's gateway and metrics; the Ray custom resource
`agentrl_head` on it is how agentrl's hub actors find it. One GPU worker group holds every
training and rollout GPU (slime places Megatron actors and SGLang engines itself through Ray
placement groups). The cluster always shuts down when the job ends: KubeRay only allows
`suspend` and a TTL with `shutdownAfterJobFinishes: true`, and idle GPUs cost money.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.api.constants import (
    ANNOTATION_BUNDLE_VERSION,
    CONFIG_PATH,
    GATEWAY_PORT_NAME,
    HEAD_RAY_RESOURCE,
    LABEL_KUEUE_QUEUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    RAY_DASHBOARD_PORT,
)
from agentrl.api.models import RLExperiment
from agentrl.render import pods
from agentrl.render.defaults import OperatorDefaults

Obj = dict[str, Any]

ENTRYPOINT = f"python -m agentrl.bundle.launch --config {CONFIG_PATH}"
SUBMISSION_MODE = "K8sJobMode"
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
SUBMITTER_CONTAINER = "ray-job-submitter"
WORKER_GROUP = "gpu"
COMPONENT_HEAD = "head"
COMPONENT_WORKER = "worker"
COMPONENT_SUBMITTER = "submitter"
# Capacity of the head's marker resource: one unit; agentrl's head-only actors (the hub:
# gateway + metrics) each ask for a small fraction of it, so any number fit.
HEAD_RAY_RESOURCE_UNITS = 1
RAY_PORTS = (("gcs-server", 6379), ("dashboard", RAY_DASHBOARD_PORT), ("client", 10001),
             ("metrics", 8080))  # fmt: skip


def ray_resources_param(resources: dict[str, int]) -> str:
    """KubeRay's rayStartParams `resources` format: a JSON object inside double quotes."""
    return '"' + json.dumps(resources, sort_keys=True).replace('"', '\\"') + '"'


def head_group(exp: RLExperiment, defaults: OperatorDefaults, base: pods.PodParts) -> Obj:
    head = exp.spec.resources.head
    compute = {"cpu": head.cpu, "memory": head.memory}
    container: Obj = {
        "name": HEAD_CONTAINER,
        "image": pods.image(exp, defaults),
        "imagePullPolicy": exp.spec.runtime.image_pull_policy,
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all, so on a GPU node a container that
        # requests no GPU still sees that node's GPUs (Ray would then count and use them).
        "env": [*base.env, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "ports": [{"name": n, "containerPort": p} for n, p in RAY_PORTS]
        + [
            {"name": GATEWAY_PORT_NAME, "containerPort": exp.spec.gateway.port},
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT},
        ],
        "resources": {"requests": dict(compute), "limits": dict(compute)},
        "volumeMounts": base.mounts,
        "securityContext": base.security,
    }
    spec: Obj = {**base.pod, "containers": [container], "volumes": base.volumes(head.shm_size)}
    if head.node_selector:
        spec["nodeSelector"] = dict(head.node_selector)
    if head.tolerations:
        spec["tolerations"] = list(head.tolerations)
    return {
        "serviceType": "ClusterIP",
        "rayStartParams": {
            "dashboard-host": "0.0.0.0",
            "num-gpus": "0",
            "resources": ray_resources_param({HEAD_RAY_RESOURCE: HEAD_RAY_RESOURCE_UNITS}),
        },
        "template": {
            "metadata": {"labels": pods.labels(exp, defaults, COMPONENT_HEAD)},
            "spec": spec,
        },
    }


def worker_group(exp: RLExperiment, defaults: OperatorDefaults, base: pods.PodParts) -> Obj:
    res = exp.spec.resources
    limits: Obj = {"cpu": res.cpu, "memory": res.memory, res.gpu_resource_name: res.gpus_per_node}
    limits.update(res.extra_resources)
    container: Obj = {
        "name": WORKER_CONTAINER,
        "image": pods.image(exp, defaults),
        "imagePullPolicy": exp.spec.runtime.image_pull_policy,
        "env": base.env,
        "resources": {"requests": dict(limits), "limits": limits},
        "volumeMounts": base.mounts,
        "securityContext": base.worker_security,
    }
    spec: Obj = {**base.pod, "containers": [container], "volumes": base.volumes(res.shm_size)}
    if res.node_selector:
        spec["nodeSelector"] = dict(res.node_selector)
    if res.tolerations:
        spec["tolerations"] = list(res.tolerations)
    if res.affinity:
        spec["affinity"] = res.affinity
    return {
        "groupName": WORKER_GROUP,
        # A fixed-size gang: slime needs every GPU before it starts, autoscaling only stalls.
        "replicas": res.nodes,
        "minReplicas": res.nodes,
        "maxReplicas": res.nodes,
        "rayStartParams": {},
        "template": {
            "metadata": {"labels": pods.labels(exp, defaults, COMPONENT_WORKER)},
            "spec": spec,
        },
    }


def submitter_template(exp: RLExperiment, defaults: OperatorDefaults, base: pods.PodParts) -> Obj:
    """KubeRay's submitter pod (runs `ray job submit`), labelled like every other pod."""
    head = exp.spec.resources.head
    spec: Obj = {
        **base.pod,
        "restartPolicy": "Never",
        "containers": [
            {
                "name": SUBMITTER_CONTAINER,
                "image": pods.image(exp, defaults),
                "imagePullPolicy": exp.spec.runtime.image_pull_policy,
                "resources": {
                    "requests": {"cpu": "500m", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
                "securityContext": base.security,
            }
        ],
    }
    if head.node_selector:
        spec["nodeSelector"] = dict(head.node_selector)
    if head.tolerations:
        spec["tolerations"] = list(head.tolerations)
    return {"metadata": {"labels": pods.labels(exp, defaults, COMPONENT_SUBMITTER)}, "spec": spec}


def render_rayjob(
    exp: RLExperiment,
    defaults: OperatorDefaults,
    metadata: Obj,
    bundle_cm: str,
) -> Obj:
    """The RayJob; `metadata` is the children's common metadata (name, labels, owner)."""
    spec = exp.spec
    base = pods.PodParts.build(exp, defaults, bundle_cm)
    cluster: Obj = {
        "headGroupSpec": head_group(exp, defaults, base),
        "workerGroupSpecs": [worker_group(exp, defaults, base)],
    }
    if defaults.ray_version:
        cluster["rayVersion"] = defaults.ray_version
    job: Obj = {
        "entrypoint": ENTRYPOINT,
        "submissionMode": SUBMISSION_MODE,
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "backoffLimit": spec.backoff_limit,
        "suspend": spec.suspend,
        "rayClusterSpec": cluster,
        "submitterPodTemplate": submitter_template(exp, defaults, base),
    }
    if spec.active_deadline_seconds is not None:
        job["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if spec.startup_deadline_seconds is not None:
        job["preRunningDeadlineSeconds"] = spec.startup_deadline_seconds
    meta = {**metadata, "labels": dict(metadata["labels"])}
    if spec.scheduling.queue_name:  # Kueue admits the whole gang through `suspend`
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.scheduling.queue_name
    meta["annotations"] = {ANNOTATION_BUNDLE_VERSION: defaults.bundle_version}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": job}
