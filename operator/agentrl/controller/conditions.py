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

# Conditions whose turning True is a problem the user must see in `kubectl describe`, and
# the reason of its event (None: the condition's own reason, e.g. FailedCreate).
WARNING_CONDITIONS: dict[str, str | None] = {
    ConditionType.STALLED: "Stalled",
    ConditionType.NAME_CONFLICT: "NameConflict",
    ConditionType.IMMUTABLE_FIELD_CHANGED: "ImmutableFieldChanged",
    ConditionType.CHILD_REJECTED: None,
    ConditionType.KUBERAY_INCOMPATIBLE: "KubeRayIncompatible",
}


# Conditions whose being True is a problem (agentrl_experiment_condition exports them); Valid
# and Preflight are one when False. Running, Suspended, Succeeded and RayJobCreated are the
# normal course.
PROBLEM_CONDITIONS = frozenset(
    {*WARNING_CONDITIONS, ConditionType.FAILED, ConditionType.CONFIG_WARNING}
)


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
    """What to post for the change old -> new: condition problems first, then the phase."""
    events: list[Event] = []
    valid_old, valid_new = get(old, ConditionType.VALID), get(new, ConditionType.VALID)
    if (
        valid_new
        and valid_new["status"] == "False"
        and (
            valid_old is None
            or valid_old.get("status") != "False"
            or valid_old.get("message") != valid_new.get("message")
        )
    ):
        events.append(Event("Warning", "InvalidSpec", valid_new.get("message", "")))
    pre_old, pre_new = get(old, ConditionType.PREFLIGHT), get(new, ConditionType.PREFLIGHT)
    if (
        pre_new
        and pre_new["status"] == "False"
        and (
            pre_old is None
            or pre_old.get("status") != "False"
            or pre_old.get("message") != pre_new.get("message")
        )
    ):
        events.append(Event("Warning", "PreflightFailed", pre_new.get("message", "")))
    for ctype, reason in WARNING_CONDITIONS.items():
        cond = get(new, ctype)
        was = get(old, ctype)
        if (
            cond
            and cond["status"] == "True"
            and (
                not was or was.get("status") != "True" or was.get("message") != cond.get("message")
            )
        ):
            events.append(
                Event("Warning", reason or str(cond.get("reason")), cond.get("message", ""))
            )
    phase_old, phase_new = old.get("phase"), new.get("phase")
    # The first phase (Pending on create) is not news; a Failed already explained is not either.
    if (
        phase_old
        and phase_new
        and phase_old != phase_new
        and not (phase_new == Phase.FAILED and events)
    ):
        kind = "Warning" if phase_new == Phase.FAILED else "Normal"
        why = new.get("rayJob", {}).get("reason") if phase_new == Phase.FAILED else None
        detail = f" ({why})" if why else ""
        events.append(Event(kind, str(phase_new), f"phase {phase_old} -> {phase_new}{detail}"))
    return events


def problems(status: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """(condition, reason) of each problem the conditions report: a problem condition that is
    True, or Valid that is False. At most one per condition type, reasons from small fixed
    sets (the kubelet's, KubeRay's and our own), so a metric labelled by them stays small."""
    found = set()
    for cond in status.get("conditions") or ():
        ctype, value = cond.get("type"), cond.get("status")
        if (ctype in PROBLEM_CONDITIONS and value == "True") or (
            ctype in (ConditionType.VALID, ConditionType.PREFLIGHT) and value == "False"
        ):
            found.add((str(ctype), str(cond.get("reason") or "")))
    return frozenset(found)
