"""Pure readings of what the experiment's pods show: which are stuck, and why.

A RayJob sits in Initializing for ever when an image cannot be pulled or no node has the GPUs
(https://github.com/ray-project/kuberay/issues/1990, /issues/2387); the pods say why, so we
read their scheduling condition and their containers' waiting reasons. Training progress is
read elsewhere (progress.py).

The waiting reasons are the kubelet's own strings:
- image pulls: `pkg/kubelet/images/types.go`
  (https://github.com/kubernetes/kubernetes/blob/v1.20.2/pkg/kubelet/images/types.go), plus
  `SignatureValidationFailed`, which container runtimes may return since Kubernetes 1.28
  (`k8s.io/cri-api/pkg/errors`,
  https://github.com/kubernetes/kubernetes/blob/v1.28.0/staging/src/k8s.io/cri-api/pkg/errors/errors.go);
- containers: `pkg/kubelet/container/sync_result.go` (`CrashLoopBackOff`, `RunContainerError`)
  and `pkg/kubelet/kuberuntime/kuberuntime_container.go` (`CreateContainerConfigError`,
  `CreateContainerError`, `PreStartHookError`, `PostStartHookError`; `PreCreateHookError`
  since 1.21), both at v1.20.2.

A pod whose volumes cannot be mounted shows nothing of it in its status: its containers wait
in `ContainerCreating` (or `PodInitializing`, with init containers) exactly as they do while
a large image downloads. Only its events tell the two apart (`FailedMount` and its kin,
`pkg/kubelet/events/event.go` at v1.20.2), so a pod still creating past a bound is checked
against its events (`creating_trouble`), and only then.

A pod the scheduler finds no node for (`PodScheduled=False`, reason `Unschedulable`) is not
stuck at once either: with a cluster autoscaler (cluster-autoscaler, Karpenter, GKE node
auto-provisioning) every new GPU gang starts that way and schedules once the node it asked
for has come up, minutes later. The scheduler sets the condition when it first fails to place
the pod and keeps its `lastTransitionTime` while it keeps failing (`updatePod` in
pkg/scheduler/schedule_one.go, `UpdatePodCondition` in pkg/api/v1/pod/util.go, v1.28.0), so
`unschedulable_since` reads how long the pod has waited from the pod itself, the same for
every operator process that reads it; the controller counts it stuck past a bound.

Pods KubeRay cannot create at all (the API server refused them) leave no pod to read;
KubeRay's `ReplicaFailure` condition, mirrored into the RayJob's status, says why
(`cluster_trouble`).

A crash loop is not one waiting state: at each restart the kubelet shows the container
running, then terminated, then waiting in `CrashLoopBackOff` again (its status reports an
exited container as it is until the next sync records the back-off:
`convertToAPIContainerStatuses` in pkg/kubelet/kubelet_pods.go, v1.20.2). So a pod found
crash-looping stays stuck while a container of it that has restarted runs for less than
`CRASH_SETTLED_SECONDS`, or has ended again (`restarted_at`); the sweep clears it after.

One trouble, one set of words: the kubelet flips an image pull between `ErrImagePull` and
`ImagePullBackOff` at every retry and rewrites a crash loop's back-off delay into its
message, and the scheduler rewrites its node counts. A pod's trouble is therefore recorded
once, when first seen, and kept while the same trouble lasts (`same_trouble`); only a
different trouble, or recovery, changes it. That is what keeps a stuck experiment at one
status write and one event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Container waiting reasons that do not clear by waiting (or only after a user fixes something).
IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "ImageInspectError", "ErrImageNeverPull",
     "RegistryUnavailable", "InvalidImageName", "SignatureValidationFailed"}
)  # fmt: skip
CRASH_REASONS = frozenset({"CrashLoopBackOff", "RunContainerError"})
CREATE_REASONS = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "PreCreateHookError",
     "PreStartHookError", "PostStartHookError"}
)  # fmt: skip
STUCK_WAITING_REASONS = IMAGE_PULL_REASONS | CRASH_REASONS | CREATE_REASONS
# What the kubelet reports while it prepares a pod (sandbox, volumes, image, init containers).
CREATING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
# Warning events that explain a pod held in ContainerCreating: a volume that cannot be
# attached, mounted or mapped (a missing ConfigMap or Secret, a CSI driver failing) or a
# sandbox the runtime cannot create (CNI out of addresses).
EVENT_REASONS = frozenset(
    {"FailedMount", "FailedAttachVolume", "FailedMapVolume", "FailedCreatePodSandBox"}
)
UNSCHEDULABLE = "Unschedulable"
# KubeRay's RayCluster condition for pods it could not create or delete (a quota, an admission
# policy): `RayClusterReplicaFailure` in ray-operator/apis/ray/v1/raycluster_types.go.
REPLICA_FAILURE = "ReplicaFailure"
MESSAGE_MAX = 300  # keep status and events short; the pod has the full text

Trouble = tuple[str, str]  # (reason, message)


def pod_stuck(pod: Mapping[str, Any]) -> Trouble | None:
    """(reason, message) if the pod's status says it cannot progress without help, else None."""
    status = pod.get("status") or {}
    if (cond := _unschedulable(status)) is not None:
        return UNSCHEDULABLE, _short(cond.get("message", ""))
    for cs in _container_statuses(status):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in STUCK_WAITING_REASONS:
            where = f"container {cs.get('name', '?')}"
            text = _crash_text(cs) if reason in CRASH_REASONS else waiting.get("message", "")
            return reason, _short(f"{where}: {text}" if text else where)
    return None


def unschedulable_since(pod: Mapping[str, Any]) -> str | None:
    """When the scheduler found no node for the pod, while it still finds none: its
    PodScheduled condition's lastTransitionTime (else the pod's creationTimestamp: a pod is
    never unscheduled once bound); "" when neither is known; None when it is not
    Unschedulable."""
    cond = _unschedulable(pod.get("status") or {})
    if cond is None:
        return None
    since = cond.get("lastTransitionTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    return str(since or "")


def _unschedulable(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's PodScheduled condition while the scheduler finds no node for it."""
    cond: Mapping[str, Any]
    for cond in status.get("conditions") or ():
        if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                and cond.get("reason") == UNSCHEDULABLE):  # fmt: skip
            return cond
    return None


def _container_statuses(status: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for key in ("initContainerStatuses", "containerStatuses"):
        yield from status.get(key) or ()


def _crash_text(cs: Mapping[str, Any]) -> str:
    """How the container last ended; the kubelet's own message only carries the back-off
    delay, which changes at every restart."""
    ended = (cs.get("lastState") or {}).get("terminated") or {}
    if "exitCode" not in ended:
        return ""
    how = f" ({ended['reason']})" if ended.get("reason") else ""
    return f"exited with code {ended['exitCode']}{how}; the kubelet restarts it with back-off"


def cluster_trouble(rayjob: Mapping[str, Any] | None) -> Trouble | None:
    """(reason, message) when KubeRay cannot create (or delete) the Ray cluster's pods.

    Then there is no pod to read: the API server refused it (a ResourceQuota on GPUs, a
    policy webhook, Pod Security). KubeRay v1.6 records that on the RayCluster as a
    `ReplicaFailure` condition (reason `FailedCreateHeadPod`, `FailedCreateWorkerPod`, ...;
    its message the reason, a newline, and the API server's refusal) and mirrors the
    RayCluster's status into the RayJob's `rayClusterStatus` while it initializes. It retries
    with a new pod name each time, so only the reason identifies the trouble."""
    cluster = (rayjob or {}).get("rayClusterStatus") or {}
    for cond in cluster.get("conditions") or ():
        if cond.get("type") == REPLICA_FAILURE and cond.get("status") == "True":
            reason = str(cond.get("reason") or REPLICA_FAILURE)
            message = str(cond.get("message") or "")
            message = message.removeprefix(reason).lstrip("\n ").replace("\n", "; ")
            return reason, _short(message)
    return None


# How long a restarted container must run before its crash loop counts as over: the
# kubelet's own measure, which forgets a container's back-off once it has not crashed for
# twice the longest back-off, 2 x 300 s (MaxContainerBackOff in pkg/kubelet/kubelet.go,
# hasExpired in client-go's util/flowcontrol/backoff.go, Kubernetes v1.20.2). A shorter bound
# would clear and set Stalled again at every restart of a container that runs a while before
# it crashes (a head that loads, then runs out of memory).
CRASH_SETTLED_SECONDS = 600


def restarted_at(pod: Mapping[str, Any]) -> str | None:
    """When the latest restarted container (restartCount of 1 or more) of the pod started
    running, or ended again: the part of a crash loop between two back-offs. None when no
    restarted container is running or ended (waiting, or none restarted); "" when one is
    but the kubelet gave no time."""
    found: list[str] = []
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or ():
            if int(cs.get("restartCount") or 0) < 1:
                continue
            state = cs.get("state") or {}
            ended = state.get("terminated")
            if "running" in state:
                found.append(str((state["running"] or {}).get("startedAt") or ""))
            elif ended is not None and not (key == "initContainerStatuses"
                                            and (ended or {}).get("exitCode") == 0):  # fmt: skip
                # An init container that exited 0 is done, not looping.
                found.append(str((ended or {}).get("finishedAt") or ""))
    return max(found) if found else None


def same_trouble(old: str, new: str) -> bool:
    """Whether two reasons are the same trouble seen twice (keep the first words)."""
    if old == new:
        return True
    return any(old in group and new in group for group in (IMAGE_PULL_REASONS, CRASH_REASONS))


def creating_since(pod: Mapping[str, Any]) -> str | None:
    """When a scheduled pod began creating, while every container still waits in
    ContainerCreating or PodInitializing; None otherwise."""
    status = pod.get("status") or {}
    statuses = list(_container_statuses(status))
    if not statuses:
        return None
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in CREATING_REASONS:
            return None
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            since = cond.get("lastTransitionTime") or status.get("startTime")
            return str(since) if since else None
    return None


def creating_trouble(events: Iterable[Mapping[str, Any]]) -> Trouble | None:
    """The newest Warning event that explains a pod held in ContainerCreating, if any."""
    found = [e for e in events if e.get("type") == "Warning" and e.get("reason") in EVENT_REASONS]
    if not found:
        return None
    newest = max(found, key=_event_time)
    return str(newest["reason"]), _short(str(newest.get("message") or ""))


# The Job controller's event when it cannot create a Job's pod (a ResourceQuota, an admission
# webhook, Pod Security refused it); it retries, and the Job never fails on its own.
JOB_FAILED_CREATE = "FailedCreate"


def job_trouble(events: Iterable[Mapping[str, Any]]) -> Trouble | None:
    """The newest Warning event saying the Job controller cannot create the Job's pod."""
    found = [e for e in events
             if e.get("type") == "Warning" and e.get("reason") == JOB_FAILED_CREATE]  # fmt: skip
    if not found:
        return None
    newest = max(found, key=_event_time)
    return JOB_FAILED_CREATE, _short(str(newest.get("message") or ""))


def _event_time(event: Mapping[str, Any]) -> str:
    # RFC 3339 strings in UTC sort as times; events.k8s.io writes eventTime, core lastTimestamp.
    return str(
        event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""
    )


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."
