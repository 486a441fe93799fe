"""Kubernetes-style conditions on plain status dicts, and the events their changes deserve.

Conditions are the durable record of *why* an experiment is in its phase; events are the
one-off notices `kubectl describe` shows. Both are derived here, purely, from an old and a
new status, so an event is posted exactly when something changed and never on a re-read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.api.constants import ConditionType, Phase

Status = dict[str, Any]

# The experiment's RayJob was deleted outside the operator (`kubectl delete rayjob`) before
# the run finished: the reason of its Failed phase, of RayJobCreated=False and of the Warning
# event. The run is over (KubeRay deletes the Ray cluster with the RayJob), and it is never
# created again on its own: that would start a new GPU cluster nobody asked for.
RAYJOB_DELETED = "RayJobDeleted"
# An attempt failed and KubeRay retries it (`Retrying`, spec.backoffLimit): the reason of the
# Warning event that carries why (KubeRay clears its own words once the retry starts).
ATTEMPT_FAILED = "AttemptFailed"
RETRYING = "Retrying"  # KubeRay's jobDeploymentStatus while it tears a failed attempt down
# EpisodesFailing turned False because the training episodes fail less again: its reason,
# and that of the Normal event (the Warning one is the condition's type).
EPISODES_RECOVERED = "EpisodesRecovered"

# Conditions whose entering their problem value (True, or False for Valid and Preflight) is
# news the user must see in `kubectl describe`, and the reason of its Warning event (None: the
# condition's own reason, e.g. FailedCreate).
WARNING_CONDITIONS: dict[str, tuple[str, str | None]] = {
    ConditionType.VALID: ("False", "InvalidSpec"),
    ConditionType.PREFLIGHT: ("False", "PreflightFailed"),
    ConditionType.STALLED: ("True", "Stalled"),
    ConditionType.NAME_CONFLICT: ("True", "NameConflict"),
    ConditionType.CHECKPOINT_CONFLICT: ("True", "CheckpointConflict"),
    ConditionType.IMMUTABLE_FIELD_CHANGED: ("True", "ImmutableFieldChanged"),
    ConditionType.CHILD_REJECTED: ("True", None),
    ConditionType.KUBERAY_INCOMPATIBLE: ("True", "KubeRayIncompatible"),
}

# The value of each condition that is a problem (agentrl_experiment_condition exports them):
# those above, Failed and ConfigWarning. Running, Suspended, Succeeded and RayJobCreated are
# the normal course.
PROBLEM_VALUES: dict[str, str] = {
    **{ctype: value for ctype, (value, _) in WARNING_CONDITIONS.items()},
    ConditionType.FAILED: "True",
    ConditionType.CONFIG_WARNING: "True",
    ConditionType.EPISODES_FAILING: "True",
}


@dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


def get(status: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in status.get("conditions") or ():
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(status: Mapping[str, Any], ctype: str) -> bool:
    cond = get(status, ctype)
    return cond is not None and cond.get("status") == "True"


def put(
    status: Status,
    ctype: str,
    value: bool,
    *,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> None:
    """Set one condition in place; its transition time moves only when its status flips."""
    conds: list[dict[str, Any]] = [dict(c) for c in status.get("conditions") or ()]
    text = "True" if value else "False"
    old = next((c for c in conds if c.get("type") == ctype), None)
    new: dict[str, Any] = {"type": ctype, "status": text, "reason": reason}
    if message:  # optional in our schema; some apiservers (1.20) read "" as null and refuse it
        new["message"] = message
    if generation is None:  # the generation whose spec this status reflects
        generation = status.get("observedGeneration")
    if generation is not None:
        new["observedGeneration"] = generation
    if old is not None and old.get("status") == text and old.get("lastTransitionTime"):
        new["lastTransitionTime"] = old["lastTransitionTime"]
    else:
        new["lastTransitionTime"] = now
    if old is None:
        conds.append(new)
    else:
        conds[conds.index(old)] = new
    status["conditions"] = conds


def put_if_relevant(
    status: Status, ctype: str, value: bool, *, reason: str, message: str, now: str
) -> None:
    """Like `put`, but a condition that was never True is not written as False (less noise)."""
    if value or get(status, ctype) is not None:
        put(status, ctype, value, reason=reason, message=message, now=now)


def events_between(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """What to post for the change old -> new: condition problems first, then the phase,
    then the training episodes."""
    return _problems_and_phase(old, new) + _episodes(old, new)


def _episodes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """A Warning when EpisodesFailing turns True, a Normal one when it turns False because
    the episodes recovered; never for a new count or reason while it stays (one per read
    would bury every other event), nor when the run stops (its phase event says so)."""
    cond, was = get(new, ConditionType.EPISODES_FAILING), get(old, ConditionType.EPISODES_FAILING)
    now, before = (cond or {}).get("status"), (was or {}).get("status")
    if cond is None or now == before:
        return []
    if now == "True":
        return [Event("Warning", ConditionType.EPISODES_FAILING, str(cond.get("message", "")))]
    if before == "True" and cond.get("reason") == EPISODES_RECOVERED:
        return [Event("Normal", EPISODES_RECOVERED, str(cond.get("message", "")))]
    return []


def _problems_and_phase(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    events: list[Event] = []
    for ctype, (bad, reason) in WARNING_CONDITIONS.items():
        cond, was = get(new, ctype), get(old, ctype)
        # Entered its problem value, or still in it with a new message (a different problem).
        if (
            cond
            and cond["status"] == bad
            and (not was or was.get("status") != bad or was.get("message") != cond.get("message"))
        ):
            events.append(
                Event("Warning", reason or str(cond.get("reason")), cond.get("message", ""))
            )
    deployment_old = (old.get("rayJob") or {}).get("jobDeploymentStatus")
    if (new.get("rayJob") or {}).get("jobDeploymentStatus") == RETRYING != deployment_old:
        # An attempt failed and KubeRay retries it: its words leave KubeRay's status soon.
        running = get(new, ConditionType.RUNNING) or {}
        events.append(Event("Warning", ATTEMPT_FAILED, str(running.get("message", ""))))
    phase_old, phase_new = old.get("phase"), new.get("phase")
    failed = get(new, ConditionType.FAILED) or {}
    deleted = failed.get("reason") == RAYJOB_DELETED
    if phase_new == Phase.FAILED and phase_old != phase_new and deleted:
        # The operator's own finding: its event carries what happened and how to run again.
        events.append(Event("Warning", RAYJOB_DELETED, str(failed.get("message", ""))))
        return events
    # The first phase (Pending on create) is not news; a Failed already explained is not either.
    if (
        phase_old
        and phase_new
        and phase_old != phase_new
        and not (phase_new == Phase.FAILED and events)
    ):
        kind = "Warning" if phase_new == Phase.FAILED else "Normal"
        detail = ""
        if phase_new == Phase.FAILED:
            # The Failed condition's reason and message: KubeRay's, or ours where KubeRay
            # gives none (a stopped Ray job ends `Complete` with no reason).
            why, what = failed.get("reason"), failed.get("message")
            detail = (f" ({why})" if why else "") + (f": {what}" if what else "")
        events.append(Event(kind, str(phase_new), f"phase {phase_old} -> {phase_new}{detail}"))
    return events


def problems(status: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """(condition, reason) of each problem the conditions report: a problem condition that is
    True, or Valid that is False. At most one per condition type, reasons from small fixed
    sets (the kubelet's, KubeRay's and our own), so a metric labelled by them stays small."""
    found = set()
    for cond in status.get("conditions") or ():
        ctype = cond.get("type")
        if ctype in PROBLEM_VALUES and cond.get("status") == PROBLEM_VALUES[ctype]:
            found.add((str(ctype), str(cond.get("reason") or "")))
    return frozenset(found)
