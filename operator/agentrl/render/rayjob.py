"""The KubeRay RayJob of an experiment (ray.io/v1, K8sJobMode).

A CPU head runs agentrl's gateway and metrics (the hub actor); the Ray custom resource
`agentrl_head` on it is how the hub finds it. One GPU worker group holds every training and
rollout GPU (slime places Megatron actors and SGLang engines itself through Ray placement
groups). slime's driver (the launcher, then slime's train.py) runs on a GPU worker: its
`parse_args` runs Megatron's `validate_args`, which reads the GPU's architecture whenever
tensor or context parallelism is on
(https://github.com/NVIDIA/Megatron-LM/blob/1dcf0dafa884ad52ffb243625717a3471643e087/megatron/training/arguments.py#L926-L927),
so on the GPU-less head it would die after the whole gang is up. Ray runs the driver on the
head unless the job asks for resources; the entrypoint asks for the `agentrl_driver` resource
only GPU workers advertise, and the job's runtime env keeps Ray from hiding the GPUs from it.
The cluster always shuts down when the job ends: KubeRay only allows `suspend` and a TTL with
`shutdownAfterJobFinishes: true`, and idle GPUs cost money.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.api.constants import (
    ANNOTATION_BUNDLE_VERSION,
    CONFIG_PATH,
    DRIVER_RAY_RESOURCE,
    GATEWAY_PORT_NAME,
    HEAD_RAY_RESOURCE,
    LABEL_KUEUE_QUEUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    RAY_NOSET_CUDA_VISIBLE_DEVICES,
    RAY_PORTS,
)
from agentrl.api.models import RLExperiment
from agentrl.render import pods
from agentrl.render.defaults import OperatorDefaults

Obj = dict[str, Any]

# python3 like the launcher's own exec of train.py: images need not have a `python`.
ENTRYPOINT = f"python3 -m agentrl.bundle.launch --config {CONFIG_PATH}"
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
# One unit per GPU worker; the entrypoint asks for one, so the driver lands on exactly one
# GPU worker (any: Megatron's checks only need a device to read).
DRIVER_RAY_RESOURCE_UNITS = 1
# Ray sets CUDA_VISIBLE_DEVICES in each worker process from its GPU share, and the job's
# supervisor asks for no GPU (taking one would starve slime's placement groups, which want
# every GPU). Ray releases before ray-project/ray#62492 set it to "" for a zero-GPU process,
# which hides every GPU from the driver. Ray sets this variable itself for a driver it pins
# to the head, and leaves it out once the job asks for resources, so agentrl sets it in the
# job's runtime env. That env reaches every actor of the job: slime's GPU actors set the
# same variable themselves, and its GPU-less ones (RolloutManager, agentrl's hub) create no
# CUDA context.
# (The name lives in agentrl.api.constants: the launcher's gang preflight sets it too.)
# The submitter pod only submits the job and follows its log; KubeRay fails the RayJob (and
# deletes the cluster) once the submitter Job fails, and its default of 2 retries is spent
# by a node drain or a broken log stream on a days-long run. Pod failures of a Job back off
# exponentially (10 s doubling, capped at 6 min), so 20 retries give up after about 1.8 h
# of a submitter that cannot reach the cluster at all.
SUBMITTER_BACKOFF_LIMIT = 20
# Ray's head relays a job's log tail from the driver node's dashboard agent and closes the
# client's websocket cleanly (code 1000) whenever that relay ends, job finished or not (an
# agent restart, a dropped head-to-worker connection); `ray job logs --follow` then exits 0.
# KubeRay's own submitter command ends with that follow, so its Job completes, and KubeRay
# v1.6.2 fails the RayJob 30 s after a submitter finished under a job that is not terminal
# (JobDeploymentStatusTransitionGracePeriodExceeded), then deletes the cluster. agentrl's
# submitter command follows the log again, after this pause, until Ray says the job ended.
SUBMITTER_REFOLLOW_SECONDS = 10
# Evicting any pod of the gang kills the run (slime does not survive a lost worker, the
# head holds the gateway, the submitter's end fails the RayJob): tell the cluster
# autoscaler and Karpenter not to move them voluntarily.
NO_EVICTION_ANNOTATIONS = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
}


def ray_resources_param(resources: dict[str, int]) -> str:
    """rayStartParams `resources` as KubeRay writes it itself: compact JSON in single quotes.

    KubeRay pastes the value into the `ray start` shell command (bash removes the quotes)
    and also reads it back, trimming the quotes, to add accelerator resources.
    """
    return "'" + resources_json(resources) + "'"


def resources_json(resources: dict[str, int]) -> str:
    return json.dumps(resources, sort_keys=True, separators=(",", ":"))


def driver_runtime_env() -> str:
    """The job's Ray runtime env (KubeRay's runtimeEnvYAML; JSON is YAML)."""
    return json.dumps({"env_vars": {RAY_NOSET_CUDA_VISIBLE_DEVICES: "1"}}, sort_keys=True)


def pod_metadata(exp: RLExperiment, defaults: OperatorDefaults, component: str) -> Obj:
    """A pod template's metadata: the spec's pod labels under agentrl's own (validation keeps
    them apart), and agentrl's annotations under the spec's, which may override them."""
    rt = exp.spec.runtime
    return {
        "labels": {**rt.pod_labels, **pods.labels(exp, defaults, component)},
        "annotations": {**NO_EVICTION_ANNOTATIONS, **rt.pod_annotations},
    }


def placement(
    node_selector: Mapping[str, str],
    tolerations: Sequence[Obj],
    affinity: Obj | None,
    priority_class: str | None,
) -> Obj:
    """A pod group's scheduling fields, only those set."""
    out: Obj = {}
    if node_selector:
        out["nodeSelector"] = dict(node_selector)
    if tolerations:
        out["tolerations"] = list(tolerations)
    if affinity:
        out["affinity"] = affinity
    if priority_class:
        out["priorityClassName"] = priority_class
    return out


def head_pod_placement(exp: RLExperiment) -> Obj:
    """Where the head and the submitter run: CPU nodes, the head's own priority class."""
    res = exp.spec.resources
    head = res.head
    return placement(head.node_selector, head.tolerations, head.affinity,
                     head.priority_class_name or res.priority_class_name)  # fmt: skip


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
    spec.update(head_pod_placement(exp))
    return {
        "serviceType": "ClusterIP",
        "rayStartParams": {
            "dashboard-host": "0.0.0.0",
            "num-gpus": "0",
            "resources": ray_resources_param({HEAD_RAY_RESOURCE: HEAD_RAY_RESOURCE_UNITS}),
        },
        "template": {"metadata": pod_metadata(exp, defaults, COMPONENT_HEAD), "spec": spec},
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
    spec.update(
        placement(res.node_selector, res.tolerations, res.affinity, res.priority_class_name)
    )
    return {
        "groupName": WORKER_GROUP,
        # A fixed-size gang: slime needs every GPU before it starts, autoscaling only stalls.
        "replicas": res.nodes,
        "minReplicas": res.nodes,
        "maxReplicas": res.nodes,
        "rayStartParams": {
            "resources": ray_resources_param({DRIVER_RAY_RESOURCE: DRIVER_RAY_RESOURCE_UNITS}),
        },
        "template": {"metadata": pod_metadata(exp, defaults, COMPONENT_WORKER), "spec": spec},
    }


# The submitter's follower: prints the driver's output until Ray holds the job as ended
# (Ray's own JobStatus.is_terminal), then exits 0; exits 1 when the dashboard cannot be
# asked. Ray's head sends a job's log from its first line on every tail (the agent reads the
# file from the start), so a follow after an early end prints only what the earlier ones
# have not: the submitter pod's log holds the driver's output once.
_FOLLOW_PY = """\
import asyncio, sys, time
from ray.job_submission import JobSubmissionClient

addr, job, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
seen = 0  # characters of the log printed so far

async def follow(client):
    global seen
    at = 0
    async for text in client.tail_job_logs(job):
        if at + len(text) > seen:
            sys.stdout.write(text[max(0, seen - at):])
            sys.stdout.flush()
            seen = at + len(text)
        at += len(text)

try:
    client = JobSubmissionClient(addr)
except Exception as exc:
    sys.exit(f"agentrl: cannot reach the Ray dashboard at {addr}: {exc}")
while True:
    why = "cleanly"
    try:
        asyncio.run(follow(client))
    except Exception as exc:
        why = f"with {type(exc).__name__}: {exc}"
    try:
        status = client.get_job_status(job)
    except Exception as exc:
        sys.exit(f"agentrl: cannot ask Ray for the status of job {job}: {exc}")
    if status.is_terminal():
        print(f"agentrl: Ray job {job} ended: {status.value}", flush=True)
        sys.exit(0)
    print(f"agentrl: the log stream of Ray job {job} ended {why} while it is {status.value}; "
          f"following it again in {pause:g}s, from where it stopped", file=sys.stderr, flush=True)
    time.sleep(pause)
"""


def submitter_script() -> str:
    """The submitter container's bash script: KubeRay's K8sJobMode command, made to outlive a
    log stream that ends before the job.

    Like KubeRay's own (BuildJobSubmitCommand,
    https://github.com/ray-project/kuberay/blob/v1.6.2/ray-operator/controllers/ray/common/job.go)
    it asks `ray job status` first and submits only a job Ray does not know, with the
    RayJob's submission id, so a retry of the submitter never starts a second slime driver;
    the flags are KubeRay's, from the same values as the RayJob's own fields. KubeRay gives a
    container with a command of its own the dashboard address and the submission id as
    `RAY_DASHBOARD_ADDRESS` and `RAY_JOB_SUBMISSION_ID` (rayjob_controller.go,
    configureSubmitterContainer). Where KubeRay's ends with one `ray job logs --follow`, this
    one follows until Ray reports the job terminal, then exits 0 (KubeRay reads the job's
    outcome from Ray). When the dashboard cannot be asked it exits 1: the Job retries the pod,
    as it did when KubeRay's follow failed.
    """
    submit = (
        'ray job submit --address "$addr" --no-wait'
        f" --runtime-env-json {shlex.quote(driver_runtime_env())}"
        ' --submission-id "$id"'
        " --entrypoint-resources "
        + shlex.quote(resources_json({DRIVER_RAY_RESOURCE: DRIVER_RAY_RESOURCE_UNITS}))
    )
    return "\n".join(
        [
            'addr="$RAY_DASHBOARD_ADDRESS"',
            'case "$addr" in http://*|https://*) ;; *) addr="http://$addr" ;; esac',
            'id="$RAY_JOB_SUBMISSION_ID"',
            'if ! ray job status --address "$addr" "$id" >/dev/null 2>&1; then',
            f"  {submit} -- {ENTRYPOINT} || exit 1",
            "fi",
            f'exec python3 -c {shlex.quote(_FOLLOW_PY)} "$addr" "$id" {SUBMITTER_REFOLLOW_SECONDS}',
        ]
    )


def submitter_template(exp: RLExperiment, defaults: OperatorDefaults, base: pods.PodParts) -> Obj:
    """KubeRay's submitter pod, labelled like every other pod, running `submitter_script`."""
    spec: Obj = {
        **base.pod,
        "restartPolicy": "Never",
        "containers": [
            {
                "name": SUBMITTER_CONTAINER,
                "image": pods.image(exp, defaults),
                "imagePullPolicy": exp.spec.runtime.image_pull_policy,
                "command": ["/bin/bash", "-c"],
                "args": [submitter_script()],
                "resources": {
                    "requests": {"cpu": "500m", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
                "securityContext": base.security,
            }
        ],
    }
    spec.update(head_pod_placement(exp))
    return {"metadata": pod_metadata(exp, defaults, COMPONENT_SUBMITTER), "spec": spec}


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
        "entrypointResources": resources_json({DRIVER_RAY_RESOURCE: DRIVER_RAY_RESOURCE_UNITS}),
        "runtimeEnvYAML": driver_runtime_env(),
        "submissionMode": SUBMISSION_MODE,
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "backoffLimit": spec.backoff_limit,
        "suspend": spec.suspend,
        "rayClusterSpec": cluster,
        "submitterPodTemplate": submitter_template(exp, defaults, base),
        "submitterConfig": {"backoffLimit": SUBMITTER_BACKOFF_LIMIT},
    }
    if spec.active_deadline_seconds is not None:
        job["activeDeadlineSeconds"] = spec.active_deadline_seconds
    job["preRunningDeadlineSeconds"] = spec.startup_deadline
    meta = {**metadata, "labels": dict(metadata["labels"])}
    if spec.scheduling.queue_name:  # Kueue admits the whole gang through `suspend`
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.scheduling.queue_name
    meta["annotations"] = {ANNOTATION_BUNDLE_VERSION: defaults.bundle_version}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": job}
