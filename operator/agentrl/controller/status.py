"""The experiment's status as a pure function of what the operator observed.

KubeRay's RayJob has no conditions and a `jobStatus` that is often stale
(https://github.com/ray-project/kuberay/issues/2314), so the phase follows
`jobDeploymentStatus` only. Terminal phases reached
through the RayJob are sticky: a late or flapping RayJob update never resurrects a finished
experiment. Everything here maps (old status, observations, now) -> new status on plain
wire-form dicts; `kube` writes the difference in one place, and only when there is one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentrl.api.constants import EPISODES_FAILING_RATIO, FAILURE_REASONS, Phase
from agentrl.api.constants import ConditionType as C
from agentrl.controller import conditions, observe
from agentrl.controller.conditions import EPISODES_RECOVERED, Status
from agentrl.controller.preflight import Reading

if TYPE_CHECKING:  # progress reads its time format from here
    from agentrl.controller.progress import Episodes

# jobDeploymentStatus -> phase. Retrying means KubeRay is building a new cluster for the next
# attempt, so the experiment is initializing again (not training); Waiting only occurs in
# InteractiveMode, which agentrl does not use, but it is honestly "not yet running".
DEPLOYMENT_PHASES: Mapping[str, Phase] = {
    "": Phase.PENDING,
    "New": Phase.PENDING,
    "Initializing": Phase.INITIALIZING,
    "Waiting": Phase.INITIALIZING,
    "Retrying": Phase.INITIALIZING,
    "Running": Phase.RUNNING,
    "Suspending": Phase.SUSPENDED,
    "Suspended": Phase.SUSPENDED,
    "Complete": Phase.SUCCEEDED,  # refined by jobStatus below: the one place it may speak
    "Failed": Phase.FAILED,
    "ValidationFailed": Phase.FAILED,
}
# The reason of a Failed phase whose Ray job was stopped (`Complete` with jobStatus STOPPED),
# whichever way KubeRay noticed: its own reason, when it gives one (the transition grace
# period), goes into the message, which says what stopped means for the run.
JOB_STOPPED = "JobStopped"
# KubeRay's reasons for a Failed RayJob that it does not retry, whatever spec.backoffLimit
# (checkBackoffLimitAndUpdateStatusIfNeeded: DeadlineExceeded at v1.6.2, and
# JobStatusCheckTimeoutExceeded too from v1.7.0), with what each means for the run. KubeRay's
# own message names neither, and the second only says that "job status checks" failed.
NOT_RETRIED: Mapping[str, str] = {
    "DeadlineExceeded": "the attempt ran past spec.activeDeadlineSeconds",
    "JobStatusCheckTimeoutExceeded": (
        "KubeRay (v1.7 and later) could not read the Ray job's status from the Ray dashboard "
        "on the head pod for its RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS (default 300): the head "
        "pod crashed, restarted or lost its node, or its dashboard stopped answering"
    ),
}
# Why a child could not be created or updated: the API server refused the request (the
# Kubernetes controllers' own event reasons for the same thing).
FAILED_CREATE, FAILED_UPDATE = "FailedCreate", "FailedUpdate"
# Reasons of a Failed phase that a corrected spec can clear (nothing ran yet), and the
# condition that explains each.
SPEC_FAILURES: Mapping[str, str] = {
    "InvalidSpec": C.VALID,
    "NameConflict": C.NAME_CONFLICT,
    C.CHECKPOINT_CONFLICT: C.CHECKPOINT_CONFLICT,
    FAILED_CREATE: C.CHILD_REJECTED,
    C.KUBERAY_INCOMPATIBLE: C.KUBERAY_INCOMPATIBLE,
}
SPEC_FAILURE_REASONS = tuple(SPEC_FAILURES)


@dataclass(frozen=True)
class Rejection:
    """The API server refused a child for this generation (a 4xx that retrying cannot fix)."""

    reason: str  # FAILED_CREATE (nothing runs) or FAILED_UPDATE (the RayJob runs on as it was)
    message: str  # which object, the HTTP status, and the API server's own message


@dataclass(frozen=True)
class SpecOutcome:
    """What reconciling the spec found (create/update/resume handlers)."""

    generation: int | None
    problems: Sequence[str] = ()  # validation errors, formatted with path and fix
    warnings: Sequence[str] = ()
    conflict: str | None = None  # "ConfigMap x exists and is not ours"
    # changed immutable fields that were refused (None: not judged again, the status keeps
    # its verdict for this generation)
    immutable: Sequence[str] | None = ()
    rayjob_name: str | None = None  # set once the RayJob exists and is ours
    gateway_url: str | None = None
    rejection: Rejection | None = None
    # Fields the installed KubeRay would drop (nothing was created or patched for them).
    incompatible: Sequence[str] = ()
    # Another experiment writes the checkpoint directory this one would (`checkpoints`):
    # nothing was created.
    checkpoint_conflict: str | None = None


@dataclass(frozen=True)
class Observed:
    """What the cluster shows: the RayJob's status and the experiment's stuck pods."""

    rayjob: Mapping[str, Any] | None  # RayJob .status (None: no RayJob seen)
    # (pod, reason, message), in the order the pods were found stuck: the first one speaks
    # for all, so a gang whose pods get stuck one after another changes nothing.
    stuck: Sequence[tuple[str, str, str]] = ()
    created: str | None = None  # experiment creationTimestamp
    startup_deadline: int | None = None  # spec.startupDeadlineSeconds (None: no deadline)
    # The RayJob is gone while the experiment is not being deleted: the watch showed its
    # deletion (then `rayjob` is its last status), or a reconcile found none where the status
    # names one (an operator restart). Unless that last status is finished, the run failed.
    rayjob_deleted: bool = False
    checkpoint: str | None = None  # spec.checkpoint.path when a new run resumes from it
    # (RayCluster, reason, message): KubeRay cannot create the cluster's pods (no pod to read).
    cluster: tuple[str, str, str] | None = None
    # What holds a Suspended run, from the spec (`suspended_message`): the Suspended message.
    suspended: str = ""
    active_deadline: int | None = None  # spec.activeDeadlineSeconds (None: unset)
    # (reason, message): the Job controller cannot create KubeRay's submitter pod, read from
    # the submitter Job's events while KubeRay reports Running and Ray has no job.
    submitter: tuple[str, str] | None = None
    # The names of KubeRay's submitter pods among the experiment's pods (a stuck one leaves
    # Ray without the job, as the Job controller's refusal above does).
    submitter_pods: frozenset[str] = frozenset()
    # (when its wait passed the operator's bound, finalizers): the RayJob is being deleted and
    # finalizers have held it that long (KubeRay's ray.io/rayjob-finalizer: KubeRay is down).
    rayjob_held: tuple[str, tuple[str, ...]] | None = None


def apply_spec(old: Mapping[str, Any], out: SpecOutcome, now: str) -> Status:
    """Record the spec-side facts; the phase follows from them and the last RayJob seen."""
    st: Status = copy.deepcopy(dict(old))
    gen = out.generation
    if gen is not None:
        st["observedGeneration"] = gen
    if out.problems:
        conditions.put(st, C.VALID, False, reason="InvalidSpec",
                       message="; ".join(out.problems), now=now, generation=gen)  # fmt: skip
    else:
        conditions.put(st, C.VALID, True, reason="Valid", message="spec is valid", now=now,
                       generation=gen)  # fmt: skip
    if out.warnings or conditions.get(st, C.CONFIG_WARNING):
        text = "; ".join(out.warnings)
        conditions.put(st, C.CONFIG_WARNING, bool(out.warnings),
                       reason="Warnings" if out.warnings else "NoWarnings", message=text,
                       now=now, generation=gen)  # fmt: skip
    conditions.put_if_relevant(st, C.NAME_CONFLICT, out.conflict is not None,
                               reason="NameConflict" if out.conflict else "Resolved",
                               message=out.conflict or "", now=now)  # fmt: skip
    clash = out.checkpoint_conflict
    conditions.put_if_relevant(st, C.CHECKPOINT_CONFLICT, clash is not None,
                               reason=C.CHECKPOINT_CONFLICT if clash else "Resolved",
                               message=clash or "", now=now)  # fmt: skip
    if out.immutable is not None:
        conditions.put_if_relevant(st, C.IMMUTABLE_FIELD_CHANGED, bool(out.immutable),
                                   reason="Refused" if out.immutable else "Reverted",
                                   message=_immutable_message(out.immutable),
                                   now=now)  # fmt: skip
    rejected = out.rejection
    conditions.put_if_relevant(st, C.CHILD_REJECTED, rejected is not None,
                               reason=rejected.reason if rejected else "Accepted",
                               message=_rejection_message(rejected, gen), now=now)  # fmt: skip
    conditions.put_if_relevant(st, C.KUBERAY_INCOMPATIBLE, bool(out.incompatible),
                               reason="FieldsWouldBeDropped" if out.incompatible
                               else "Compatible",
                               message=_incompatible_message(out.incompatible, gen),
                               now=now)  # fmt: skip
    if out.rayjob_name:
        st["rayJobName"] = out.rayjob_name
        # A RayJob deleted by hand stays reported deleted: a later reconcile (a new operator,
        # a spec edit) creates nothing, and its words are what Failed carries.
        created = conditions.get(st, C.RAYJOB_CREATED) or {}
        if created.get("reason") != conditions.RAYJOB_DELETED:
            conditions.put(st, C.RAYJOB_CREATED, True, reason="Created",
                           message=f"RayJob {out.rayjob_name}", now=now)  # fmt: skip
    if out.gateway_url:
        st["gatewayURL"] = out.gateway_url
    return st


def _immutable_message(fields: Sequence[str]) -> str:
    if not fields:
        return ""
    names = ", ".join(f"spec.{f}" for f in fields)
    return (f"{names} cannot change after creation; the change was not applied. Revert it, or "
            "create a new experiment (only suspend, deadlines, backoffLimit, "
            "ttlSecondsAfterFinished and scheduling may change)")  # fmt: skip


def _rejection_message(rejected: Rejection | None, generation: int | None) -> str:
    if rejected is None:
        return ""
    which = f"generation {generation}" if generation is not None else "this generation"
    then = ("nothing more is created" if rejected.reason == FAILED_CREATE
            else "the RayJob keeps its previous values")  # fmt: skip
    return (f"{rejected.message}; {then} for {which} and it is not retried: fix the spec "
            "(a new generation is tried again)")  # fmt: skip


def _incompatible_message(problems: Sequence[str], generation: int | None) -> str:
    if not problems:
        return ""
    which = f"generation {generation}" if generation is not None else "this generation"
    return (f"{'; '.join(problems)}. Nothing was created or changed for {which}: change the "
            "spec, or upgrade KubeRay (the operator reads its CRD again on the next "
            "generation)")  # fmt: skip


def apply_observed(old: Mapping[str, Any], seen: Observed, now: str) -> Status:
    """Fold the RayJob status and pod health into the experiment status."""
    st: Status = copy.deepcopy(dict(old))
    rj = seen.rayjob
    if rj is not None:
        _mirror(st, rj)
    elif st.get("rayJob"):
        # Not seen since a restart, or deleted by KubeRay after finishing: the mirror of its
        # last status keeps the phase, so nothing moves backwards while the watch catches up.
        rj = st["rayJob"]
    before = st.get("phase")
    phase, reason = phase_of(st, rj)
    if seen.rayjob_deleted and not phase.is_terminal:
        phase, reason = Phase.FAILED, conditions.RAYJOB_DELETED
    deleted = phase == Phase.FAILED and reason == conditions.RAYJOB_DELETED
    if deleted and not conditions.is_true(st, C.FAILED):  # once: its words stay
        conditions.put(st, C.RAYJOB_CREATED, False, reason=reason,
                       message=rayjob_deleted_message(st, before, seen.checkpoint),
                       now=now)  # fmt: skip
    st["phase"] = str(phase)
    _times(st, rj, phase, now, ended=deleted)
    _attempts(st, rj)
    _phase_conditions(st, phase, reason, now, suspended=seen.suspended)
    _stalled(st, seen, phase, now)
    return st


def finished(st: Mapping[str, Any]) -> bool:
    """Succeeded, or Failed in a way a new spec cannot clear (the run itself ended)."""
    failed = conditions.get(st, C.FAILED) or {}
    spec_failure = failed.get("reason") in SPEC_FAILURE_REASONS
    return bool(st.get("phase") in (Phase.SUCCEEDED, Phase.FAILED) and not spec_failure)


def applied(st: Mapping[str, Any], generation: int) -> bool:
    """Whether an earlier reconcile of this very generation (by this operator process or
    an earlier one, perhaps of another release) already brought the RayJob up to date: it
    recorded the generation, valid, with its RayJob, and no refusal of the RayJob or of a
    patch to it. Then nothing is written to the RayJob again: what a newer release renders
    differently for the same spec (a default, an image) must not reach a running job."""
    refused = (C.CHILD_REJECTED, C.KUBERAY_INCOMPATIBLE, C.NAME_CONFLICT)
    return bool(
        st.get("rayJobName")
        and st.get("observedGeneration") == generation
        and conditions.is_true(st, C.VALID)
        and not any(conditions.is_true(st, ctype) for ctype in refused)
    )


def phase_of(st: Mapping[str, Any], rj: Mapping[str, Any] | None) -> tuple[Phase, str]:
    """The phase and its reason; sticky for terminal phases the RayJob reached."""
    prev = st.get("phase")
    failed = conditions.get(st, C.FAILED)
    spec_failure = failed is not None and failed.get("reason") in SPEC_FAILURE_REASONS
    if prev in (Phase.SUCCEEDED, Phase.FAILED) and not spec_failure:
        cond = conditions.get(st, str(prev))
        return Phase(prev), (cond or {}).get("reason") or str(prev)
    if not conditions.is_true(st, C.VALID) and conditions.get(st, C.VALID) and rj is None:
        return Phase.FAILED, "InvalidSpec"
    if conditions.is_true(st, C.NAME_CONFLICT) and rj is None:
        return Phase.FAILED, "NameConflict"
    if conditions.is_true(st, C.CHECKPOINT_CONFLICT) and rj is None:
        return Phase.FAILED, C.CHECKPOINT_CONFLICT
    if conditions.is_true(st, C.CHILD_REJECTED) and rj is None:
        return Phase.FAILED, FAILED_CREATE
    if conditions.is_true(st, C.KUBERAY_INCOMPATIBLE) and rj is None:
        return Phase.FAILED, C.KUBERAY_INCOMPATIBLE
    if rj is None:
        return Phase.PENDING, "Pending"
    return rayjob_phase(rj, Phase(prev) if prev in set(Phase) else Phase.PENDING)


def rayjob_phase(rj: Mapping[str, Any], prev: Phase) -> tuple[Phase, str]:
    """KubeRay's jobDeploymentStatus -> (phase, reason). Unknown values keep the phase."""
    deployment = rj.get("jobDeploymentStatus") or ""
    phase = DEPLOYMENT_PHASES.get(deployment)
    if phase is None:
        return prev, f"Unknown jobDeploymentStatus {deployment!r}"
    if phase == Phase.SUCCEEDED and rj.get("jobStatus") == "STOPPED":
        return Phase.FAILED, JOB_STOPPED
    if phase == Phase.SUCCEEDED and rj.get("jobStatus") == "FAILED":
        return Phase.FAILED, str(rj.get("reason") or "JobFailed")
    if phase == Phase.FAILED:
        return phase, str(rj.get("reason") or deployment)
    return phase, deployment or "Pending"


def rayjob_deleted_message(st: Mapping[str, Any], phase: str | None, checkpoint: str | None) -> str:
    """What happened to a run whose RayJob was deleted, and how to run it again."""
    name = st.get("rayJobName") or "of this experiment"
    if checkpoint:
        again = (f"training resumes from the last checkpoint saved under {checkpoint} "
                 "(spec.checkpoint), if one was saved there")  # fmt: skip
    else:
        again = "it starts from the beginning (no spec.checkpoint.path to resume from)"
    was = phase or Phase.PENDING
    # Only an Initializing or Running attempt has a Ray cluster: KubeRay deletes it on suspend
    # (and between attempts), and creates none before Initializing.
    if was in (Phase.INITIALIZING, Phase.RUNNING):
        ended = "its Ray cluster went with it, so the run has ended"
    else:
        ended = ("it had no Ray cluster then, and without its RayJob none is started again, so "
                 "the run has ended")  # fmt: skip
    return (f"RayJob {name} was deleted outside the operator while the experiment was {was}; "
            f"{ended} and is not restarted. To run it again, delete this RLExperiment "
            f"(`kubectl delete rlx`) and apply it again; {again}")  # fmt: skip


def _mirror(st: Status, rj: Mapping[str, Any]) -> None:
    mirror = {k: rj[k] for k in ("jobStatus", "jobDeploymentStatus", "reason", "message")
              if rj.get(k)}  # fmt: skip
    if mirror:
        st["rayJob"] = mirror
    else:
        st.pop("rayJob", None)
    for src, dst in (("rayClusterName", "rayClusterName"), ("dashboardURL", "dashboardURL")):
        if rj.get(src):
            st[dst] = rj[src]


def _times(
    st: Status, rj: Mapping[str, Any] | None, phase: Phase, now: str, *, ended: bool = False
) -> None:
    """`ended`: the run ended without KubeRay saying so (its RayJob deleted)."""
    rj = rj or {}
    started = phase in (Phase.INITIALIZING, Phase.RUNNING) or (phase.is_terminal and rj)
    if started and "startTime" not in st:
        st["startTime"] = rj.get("startTime") or now
    if phase.is_terminal and (rj or ended) and "completionTime" not in st:
        st["completionTime"] = rj.get("endTime") or now


def _attempts(st: Status, rj: Mapping[str, Any] | None) -> None:
    """Attempts started: KubeRay's counters, plus the one under way; never decreases."""
    if not rj or not rj.get("jobDeploymentStatus"):
        return
    done = int(rj.get("succeeded") or 0) + int(rj.get("failed") or 0)
    deployment = rj["jobDeploymentStatus"]
    running = deployment not in ("Complete", "Failed", "ValidationFailed")
    attempts = max(done + (1 if running else 0), 1)
    st["attempts"] = max(attempts, int(st.get("attempts") or 0))


def suspended_message(spec: Mapping[str, Any]) -> str:
    """Who holds a Suspended run: its own `spec.suspend`, or Kueue until it admits the
    workload (KubeRay reports both alike; while Kueue waits for quota no pod exists, so
    nothing else would say why nothing starts)."""
    queue = (spec.get("scheduling") or {}).get("queueName")
    if spec.get("suspend"):
        return "spec.suspend is true: the Ray cluster is deleted; set it to false to resume"
    if queue:
        return (f"Kueue holds the RayJob until LocalQueue {queue} (spec.scheduling.queueName) "
                "admits its workload; no pod runs meanwhile. `kubectl get workloads` in this "
                "namespace shows what it waits for")  # fmt: skip
    return ""


def attempt_failed_message(st: Mapping[str, Any]) -> str | None:
    """Why the last attempt failed, while KubeRay retries it (`Retrying`); None otherwise.

    KubeRay v1.6.2 writes the failed attempt's reason and message with `Retrying` and clears
    both once the attempt's cluster is gone (the next write, `New`): without this, nothing
    would say why a run is on its second attempt."""
    rj = st.get("rayJob") or {}
    if rj.get("jobDeploymentStatus") != conditions.RETRYING:
        return None
    attempt = max(int(st.get("attempts") or 2) - 1, 1)
    why = f" ({rj['reason']})" if rj.get("reason") else ""
    what = f": {rj['message']}" if rj.get("message") else ""
    return (f"attempt {attempt} failed{why}{what}; KubeRay retries it on a new Ray cluster "
            "(spec.backoffLimit)")  # fmt: skip


def stopped_message(rj: Mapping[str, Any]) -> str:
    """Why a run whose Ray job was stopped is over, with KubeRay's or Ray's own words.

    KubeRay v1.6.2 ends the RayJob `Complete` with jobStatus STOPPED once the submitter has
    finished, with Ray's message ("Job was intentionally stopped."), or, when the submitter
    has not finished within its transition grace period, with its own reason and message in
    place of Ray's. Only `Failed` is retried (spec.backoffLimit), so a stopped job is not."""
    said = ""
    if rj.get("reason"):
        said = f"; KubeRay: {rj['reason']}" + (f": {rj['message']}" if rj.get("message") else "")
    elif rj.get("message"):
        said = f"; Ray: {rj['message']}"
    return ("Ray reports the job STOPPED: it was stopped before it ended (`ray job stop`, or a "
            "stop from the Ray dashboard), and KubeRay does not retry a stopped job (only a "
            f"failed one, spec.backoffLimit){said}")  # fmt: skip


def not_retried_message(reason: str, said: str) -> str:
    """Why the run failed for good although spec.backoffLimit may allow retries: what the
    reason means, that KubeRay does not retry it, then KubeRay's own words."""
    then = f". KubeRay: {said}" if said else ""
    return (f"{NOT_RETRIED[reason]}; KubeRay does not retry a RayJob that failed with "
            f"{reason}, whatever spec.backoffLimit{then}")  # fmt: skip


def _phase_conditions(
    st: Status, phase: Phase, reason: str, now: str, *, suspended: str = ""
) -> None:
    message = st.get("rayJob", {}).get("message", "")
    # Running stays False with the failed attempt's words until the next attempt runs.
    retry = attempt_failed_message(st)
    was = conditions.get(st, C.RUNNING) or {}
    between = phase in (Phase.PENDING, Phase.INITIALIZING) and was.get("status") == "False"
    if retry is None and between:
        retry = was.get("message") or None
    for ctype, target in ((C.RUNNING, Phase.RUNNING), (C.SUSPENDED, Phase.SUSPENDED),
                          (C.SUCCEEDED, Phase.SUCCEEDED)):  # fmt: skip
        note = suspended if ctype == C.SUSPENDED and phase == target else ""
        if ctype == C.RUNNING and retry and phase != target:
            conditions.put(st, ctype, False, reason=reason, message=retry, now=now)
            continue
        conditions.put_if_relevant(st, ctype, phase == target, reason=reason, message=note,
                                   now=now)  # fmt: skip
    if phase == Phase.FAILED and reason in SPEC_FAILURES:
        message = (conditions.get(st, SPEC_FAILURES[reason]) or {}).get("message", "")
    if phase == Phase.FAILED and reason == conditions.RAYJOB_DELETED:
        message = (conditions.get(st, C.RAYJOB_CREATED) or {}).get("message", "")
    if phase == Phase.FAILED and reason == JOB_STOPPED:
        message = stopped_message(st.get("rayJob") or {})
    if phase == Phase.FAILED and reason in NOT_RETRIED:
        was_failed = conditions.get(st, C.FAILED) or {}
        if was_failed.get("status") == "True" and was_failed.get("reason") == reason:
            # Its words stay: an operator upgrade rewrites no ended run's status.
            message = str(was_failed.get("message", ""))
        else:
            message = not_retried_message(reason, message)
    failed = phase == Phase.FAILED
    conditions.put_if_relevant(st, C.FAILED, failed, reason=reason,
                               message=message if failed else "", now=now)  # fmt: skip


def _stalled(st: Status, seen: Observed, phase: Phase, now: str) -> None:
    """Stuck pods, pods KubeRay cannot create, or the startup deadline passed before the run
    started.

    Every message is stable while the trouble lasts: it names the pod, the reason and the
    moment the clock started, never an age, so a stuck experiment costs one status write
    and one event. How long it has been stuck is the condition's lastTransitionTime.
    """
    if phase.is_terminal or phase == Phase.SUSPENDED:
        conditions.put_if_relevant(st, C.STALLED, False, reason=str(phase), message="", now=now)
        return
    rj = seen.rayjob if seen.rayjob is not None else st.get("rayJob") or {}
    if seen.rayjob_held:
        moment, finalizers = seen.rayjob_held
        conditions.put(st, C.STALLED, True, reason=RAYJOB_DELETION_HELD,
                       message=rayjob_held_message(st, finalizers), now=moment)  # fmt: skip
        return
    if seen.stuck:
        pod, reason, message = seen.stuck[0]
        text = stuck_pod_text(pod, reason, message)
        waits = pod in seen.submitter_pods and reason not in observe.CRASH_REASONS
        if waits and phase == Phase.RUNNING and not rj.get("jobStatus"):
            # KubeRay's submitter pod cannot start (no node for it, its image): Ray never
            # gets the job, and KubeRay ends nothing for it (submitter_holds_gpus). A pod that
            # fails instead counts towards the submitter Job's backoffLimit, which ends it.
            text += f"{SUBMITTER_POD_NOTE}{submitter_holds_gpus(seen.active_deadline)}"
        conditions.put(st, C.STALLED, True, reason=reason, message=text, now=now)
        return
    if seen.cluster:
        cluster, reason, message = seen.cluster
        conditions.put(st, C.STALLED, True, reason=reason,
                       message=cluster_trouble_text(cluster, reason, message), now=now)  # fmt: skip
        return
    if seen.submitter and phase == Phase.RUNNING and not rj.get("jobStatus"):
        reason, message = seen.submitter
        name = str(st.get("rayJobName") or "of the RayJob")
        text = submitter_trouble_text(name, reason, message, seen.active_deadline)
        conditions.put(st, C.STALLED, True, reason=SUBMITTER_NOT_STARTED, message=text, now=now)
        return
    late = startup_overdue(st, seen, phase, now)
    if late is not None:
        reason, message, since = late
        conditions.put(st, C.STALLED, True, reason=reason, message=message, now=since)
        return
    conditions.put_if_relevant(st, C.STALLED, False, reason="Progressing", message="", now=now)


def _trouble_text(what: str, name: str, reason: str, message: str) -> str:
    """`WHAT NAME: REASON[: MESSAGE]`, the shape of a stuck pod's and a RayCluster's words."""
    return f"{what} {name}: {reason}" + (f": {message}" if message else "")


def _trouble_of(text: str, what: str, reason: str) -> tuple[str, str] | None:
    """(name, message) of a `_trouble_text` for `what` and `reason`, else None."""
    if not text.startswith(f"{what} "):
        return None
    name, _, rest = text.removeprefix(f"{what} ").partition(": ")
    if rest.split(": ", 1)[0] != reason:
        return None
    return name, rest.removeprefix(reason).removeprefix(": ")


def stuck_pod_text(pod: str, reason: str, message: str) -> str:
    """The Stalled message of a stuck pod: `pod NAME: REASON[: MESSAGE]`."""
    return _trouble_text("pod", pod, reason, message)


def stuck_pod_of(text: str, reason: str) -> tuple[str, str] | None:
    """(pod, message) of a Stalled message `stuck_pod_text` wrote for `reason`, else None
    (the note on a submitter pod, `SUBMITTER_POD_NOTE` on, is not the pod's message)."""
    found = _trouble_of(text, "pod", reason)
    if found is None or not found[0]:
        return None
    return found[0], found[1].partition(SUBMITTER_POD_NOTE)[0]


# What follows a stuck submitter pod's words while KubeRay reports Running and Ray has no job.
SUBMITTER_POD_NOTE = ". It is KubeRay's submitter pod, so Ray never gets the job. "


def cluster_trouble_text(cluster: str, reason: str, message: str) -> str:
    """The Stalled message of pods KubeRay cannot create: `RayCluster NAME: REASON[: MESSAGE]`."""
    return _trouble_text("RayCluster", cluster, reason, message)


def cluster_trouble_of(text: str, reason: str) -> str | None:
    """The message of a Stalled message `cluster_trouble_text` wrote for `reason`, else None."""
    found = _trouble_of(text, "RayCluster", reason)
    return None if found is None else found[1]


_SUBMITTER_JOB = "cannot create its pod, so Ray never gets the job: "


def submitter_trouble_text(name: str, reason: str, message: str, active: int | None) -> str:
    """The Stalled message of a submitter Job whose pod the Job controller cannot create."""
    return (f"KubeRay's submitter Job {name} {_SUBMITTER_JOB}{reason}: {message}. "
            f"{submitter_holds_gpus(active)}")  # fmt: skip


def submitter_trouble_of(text: str) -> tuple[str, str] | None:
    """(reason, message) of a Stalled message `submitter_trouble_text` wrote, else None."""
    head, found, rest = text.partition(f" {_SUBMITTER_JOB}")
    trouble, held, _ = rest.rpartition(f". {_NOT_ENDED}")
    if not found or not held or not head.startswith("KubeRay's submitter Job "):
        return None
    reason, _, message = trouble.partition(": ")
    return reason, message


@dataclass(frozen=True)
class Inherited:
    """What the Stalled condition of a status this process did not write says was observed,
    as the observations that would write it again: an operator that starts (or takes the
    lead) takes them as its own until what it sees itself replaces them (the watch's
    replay, a read), so a reconcile or an event that comes first neither clears Stalled
    nor moves its lastTransitionTime, and the same trouble keeps its first words."""

    pod: tuple[str, str, str] | None = None  # (pod, reason, message): the first stuck pod
    submitter_pod: bool = False  # that pod is KubeRay's submitter (SUBMITTER_POD_NOTE)
    cluster: tuple[str, str] | None = None  # (reason, message): pods KubeRay cannot create
    submitter: tuple[str, str] | None = None  # (reason, message): the submitter Job's
    # (when the wait passed the operator's bound, finalizers): a RayJob's deletion held
    rayjob_held: tuple[str, tuple[str, ...]] | None = None


def inherited(st: Mapping[str, Any]) -> Inherited:
    """The observations behind a True Stalled condition (`Inherited`); none for one that
    follows from the status alone (the startup deadline) or is not True."""
    cond = conditions.get(st, C.STALLED) or {}
    reason, text = str(cond.get("reason") or ""), str(cond.get("message") or "")
    if cond.get("status") != "True":
        return Inherited()
    if reason == RAYJOB_DELETION_HELD:
        held = rayjob_held_of(text)
        moment = cond.get("lastTransitionTime")
        return Inherited(rayjob_held=(str(moment), held) if held and moment else None)
    if reason == SUBMITTER_NOT_STARTED:
        return Inherited(submitter=submitter_trouble_of(text))
    if (pod := stuck_pod_of(text, reason)) is not None:
        return Inherited(pod=(pod[0], reason, pod[1]), submitter_pod=SUBMITTER_POD_NOTE in text)
    if (message := cluster_trouble_of(text, reason)) is not None:
        return Inherited(cluster=(reason, message))
    return Inherited()


STARTUP_DEADLINE_EXCEEDED = "StartupDeadlineExceeded"
RAYJOB_DELETION_HELD = "RayJobDeletionHeld"
# KubeRay's finalizer on every RayJob it manages (utils.RayJobStopJobFinalizer, v1.6.2 and
# v1.7.0): removed once KubeRay has asked Ray to stop the job, whether or not that worked.
KUBERAY_FINALIZER = "ray.io/rayjob-finalizer"


def rayjob_held_message(st: Mapping[str, Any], held: Sequence[str]) -> str:
    """Why a RayJob being deleted is still there, and what it holds meanwhile."""
    name = st.get("rayJobName") or "of this experiment"
    which = ", ".join(held)
    if KUBERAY_FINALIZER in held:
        why = (f"KubeRay removes {KUBERAY_FINALIZER} once it has asked Ray to stop the job, "
               "within seconds while it runs: check that the KubeRay operator is running and "
               "watches this namespace")  # fmt: skip
    else:
        why = "the controllers that own these finalizers have not removed them"
    return (f"RayJob {name} is being deleted, and its finalizers ({which}) still hold it: "
            f"{why}. Until it is gone its Ray cluster stays, on its GPUs")  # fmt: skip


def rayjob_held_of(text: str) -> tuple[str, ...]:
    """The finalizers a message `rayjob_held_message` wrote names (none: not one of those)."""
    _, found, rest = text.partition(", and its finalizers (")
    which, held, _ = rest.partition(") still hold it: ")
    return tuple(which.split(", ")) if found and held and which else ()


SUBMITTER_NOT_STARTED = "SubmitterNotStarted"


def startup_overdue(
    st: Mapping[str, Any], seen: Observed, phase: Phase, now: str
) -> tuple[str, str, str] | None:
    """(reason, message, when the deadline passed) when the run has not started within
    startupDeadlineSeconds; None while it has time, or has started.

    Started means Running, and Ray knowing the job: KubeRay reports Running as soon as it
    has created its submitter Job, and only the submitter's `ray job submit` makes the job
    known, so a submitter pod that never starts (quota, admission, no node for it) leaves a
    Running RayJob whose jobStatus stays empty.
    """
    if seen.startup_deadline is None:
        return None
    rj = seen.rayjob if seen.rayjob is not None else st.get("rayJob") or {}
    if phase == Phase.RUNNING:
        if rj.get("jobStatus"):
            return None
        reason = SUBMITTER_NOT_STARTED
    elif phase in (Phase.PENDING, Phase.INITIALIZING):
        reason = STARTUP_DEADLINE_EXCEEDED
    else:
        return None
    start = startup_clock(st, seen)
    if start is None:
        return None
    deadline = start + timedelta(seconds=seen.startup_deadline)
    if parse_time(now) <= deadline:
        return None
    limit = f"startupDeadlineSeconds={seen.startup_deadline}"
    since = format_time(start)
    if reason == SUBMITTER_NOT_STARTED:
        name = st.get("rayJobName") or "the RayJob"
        message = (f"KubeRay reports the RayJob Running, but Ray has not seen its job within "
                   f"{limit} of the start at {since}: the submitter pod never started; check "
                   f"`kubectl describe job {name}` and its pods' events. "
                   f"{submitter_holds_gpus(seen.active_deadline)}")  # fmt: skip
    elif st.get("rayJobName") and not any(rj.get(k) for k in KUBERAY_MARKS):
        # KubeRay's first reconcile of a RayJob writes Initializing, its startTime and a
        # cluster name (initRayJobStatusIfNeed, v1.6.2), even when Kueue holds it: with none
        # of them, no KubeRay operator has acted on it, and there are no pods to look at.
        message = (f"not Running within {limit} of the start at {since}, and KubeRay has not "
                   f"acted on RayJob {st['rayJobName']} (it has no status): check that the "
                   "KubeRay operator is running and watches this namespace")  # fmt: skip
    else:
        message = (f"not Running within {limit} of the start at {since}; check the pods' "
                   "events")  # fmt: skip
    return reason, message, format_time(deadline)


# What KubeRay writes on its first reconcile of a RayJob (and keeps across retries).
KUBERAY_MARKS = ("jobDeploymentStatus", "startTime", "rayClusterName", "jobId")


# How `submitter_holds_gpus` opens: it ends every Stalled message of a submitter that never
# starts, which is where `submitter_trouble_of` finds the end of the Job controller's words.
_NOT_ENDED = "KubeRay does not end this attempt on its own"


def submitter_holds_gpus(active_deadline: int | None) -> str:
    """What ends an attempt whose submitter never started, and what to do meanwhile.

    KubeRay v1.6.2 fails a Running RayJob only when Ray reports the job ended, the submitter
    Job failed or finished, or activeDeadlineSeconds passed (preRunningDeadlineSeconds
    covers Initializing only); a submitter Job that never creates a pod does none of these,
    so its Ray cluster keeps its GPUs. The operator does not end the run itself: the
    trouble (a quota, an admission policy) is often fixed in place."""
    if active_deadline is not None:
        until = (f"until spec.activeDeadlineSeconds={active_deadline} after the attempt's "
                 "start, when KubeRay fails it")  # fmt: skip
    else:
        until = "with no spec.activeDeadlineSeconds, until you act"
    return (f"{_NOT_ENDED}: its Ray cluster holds its GPUs "
            f"{until}; set spec.suspend to true to release them while you fix it")  # fmt: skip


def startup_clock(st: Mapping[str, Any], seen: Observed) -> datetime | None:
    """When the startup deadline's clock started: creation, the last resume (Suspended
    turning False), the end of a Running attempt (Running turning False: KubeRay is
    retrying), or the start of KubeRay's current attempt (its status.startTime, set anew
    for each backoffLimit retry, the clock KubeRay's own preRunningDeadlineSeconds uses), so
    a retry gets its own.

    KubeRay stamps startTime only when an attempt begins Initializing; while it tears the
    failed attempt's cluster down (`Retrying`, then `New`) startTime is still the previous
    attempt's, which may have started days ago. The end of the Running attempt starts the
    next one's clock in between."""
    starts: list[str] = [seen.created] if seen.created else []
    attempt = (seen.rayjob or {}).get("startTime")
    if isinstance(attempt, str) and attempt:
        starts.append(attempt)
    for ctype in (C.SUSPENDED, C.RUNNING):
        ended = conditions.get(st, ctype)
        if ended and ended.get("status") == "False" and ended.get("lastTransitionTime"):
            starts.append(str(ended["lastTransitionTime"]))
    return max((parse_time(s) for s in starts), default=None)


def apply_progress(old: Mapping[str, Any], values: Mapping[str, Any], now: str) -> Status:
    """Merge scraped training progress; `updatedAt` moves only when a value changed."""
    st: Status = copy.deepcopy(dict(old))
    before = dict(st.get("progress") or {})
    after = {**before, **{k: v for k, v in values.items() if v is not None}}
    after.pop("updatedAt", None)
    before.pop("updatedAt", None)
    if after != before:
        st["progress"] = {**after, "updatedAt": now}
    return st


def apply_preflight(old: Mapping[str, Any], reading: Reading, now: str) -> Status:
    """The launcher's gang preflight result as the Preflight condition: True when it passed
    (the message says what was checked and measured), False with the first problem."""
    st: Status = copy.deepcopy(dict(old))
    conditions.put(st, C.PREFLIGHT, reading.passed, reason=reading.reason,
                   message=reading.message, now=now)  # fmt: skip
    return st


def apply_episodes(old: Mapping[str, Any], counted: Episodes | None, name: str, now: str) -> Status:
    """The EpisodesFailing condition from the training episodes last judged (`counted`).

    True, with the most frequent failure reason in CamelCase (`agent_error`: `AgentError`),
    while at least EPISODES_FAILING_RATIO of them failed; False (`EpisodesRecovered`) once a
    count falls below it, and False with the phase's name when the run is no longer Running
    (a retry's next head is judged afresh). Nothing judged (None: too few episodes, or none
    read since the operator started) leaves the condition as it is. The phase is not
    touched: the run goes on, and stopping it is the user's call.

    While it stays True with the same reason the message keeps the counts that turned it
    True (`progress.failedSessionRatio` shows the share now): a run whose agent service is
    down for days costs one status write, not one per read.
    """
    st: Status = copy.deepcopy(dict(old))
    phase = st.get("phase")
    if phase != Phase.RUNNING:
        if conditions.is_true(st, C.EPISODES_FAILING):
            conditions.put(st, C.EPISODES_FAILING, False, reason=str(phase or Phase.PENDING),
                           message=f"the experiment is {phase}: no training episodes are read",
                           now=now)  # fmt: skip
        return st
    if counted is None:
        return st
    if not counted.failing:
        conditions.put_if_relevant(st, C.EPISODES_FAILING, False, reason=EPISODES_RECOVERED,
                                   message=recovered_message(), now=now)  # fmt: skip
        return st
    reason = failure_reason(counted)
    was = conditions.get(st, C.EPISODES_FAILING) or {}
    if was.get("status") == "True" and was.get("reason") == reason:
        return st
    conditions.put(st, C.EPISODES_FAILING, True, reason=reason,
                   message=episodes_failing_message(counted, name), now=now)  # fmt: skip
    return st


def failure_reason(counted: Episodes) -> str:
    """The most frequent failure reason as a condition reason: `agent_error` -> `AgentError`.
    Only the rollout's own reasons (FAILURE_REASONS) are named; anything else, a label no
    agentrl version counts, is `EpisodesFailing`: the reason labels a metric series too."""
    label = counted.reasons[0][0] if counted.reasons else ""
    if label not in FAILURE_REASONS:
        return C.EPISODES_FAILING
    return "".join(word.capitalize() for word in label.split("_"))


def episodes_failing_message(counted: Episodes, name: str) -> str:
    """Counts, reasons and where to look, e.g. `38 of the last 40 training episodes failed
    ...: agent_error 30, timeout 8. ...`. Bounded: the reasons are FAILURE_REASONS and
    `other`, the name the experiment's."""
    return (f"{counted.failed} of the last {counted.finished} training episodes failed "
            f"(EpisodesFailing is True from {EPISODES_FAILING_RATIO:.0%}): "
            f"{counted.breakdown() or 'no reason counted'}. A failed episode gives no "
            "training signal, and the run goes on holding its GPUs. The run's log "
            f"(`agentrl logs {name}`) has each failure once, with its session id and reason; "
            "status.progress.failedSessionRatio shows the share now")  # fmt: skip


def recovered_message() -> str:
    """Stable, so a healthy run's reads write nothing."""
    return (f"fewer than {EPISODES_FAILING_RATIO:.0%} of the last training episodes "
            "counted failed")  # fmt: skip


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch (RFC 7386) turning old into new; None when they are equal."""
    patch: dict[str, Any] = {}
    for key in sorted(set(old) | set(new)):
        if key not in new:
            patch[key] = None
        elif key not in old or old[key] != new[key]:
            both_maps = isinstance(old.get(key), Mapping) and isinstance(new[key], Mapping)
            patch[key] = (diff(old[key], new[key]) or {}) if both_maps else new[key]
    return patch or None
