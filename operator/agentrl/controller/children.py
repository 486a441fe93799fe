"""Pure decisions about an experiment's children: ownership, immutable fields, lifecycle.

The RayJob records (in annotations) a hash per immutable spec field and the lifecycle values
the operator last applied. That lets a restarted operator tell "the user changed the model"
(refuse, name the field) from "the user changed a deadline" (patch exactly that field), and
never re-assert a field someone else now owns: Kueue flips `suspend` to admit a job, the
autoscaler sets worker replicas, so we send only what the *experiment* changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agentrl.api.constants import ANNOTATION_PREFIX, ANNOTATION_SPEC_HASH, LABEL_KUEUE_QUEUE
from agentrl.api.crd import IMMUTABLE_SPEC_FIELDS

ANNOTATION_LIFECYCLE = f"{ANNOTATION_PREFIX}/lifecycle"
# RayJob spec fields that follow the experiment's lifecycle fields after creation.
LIFECYCLE_RAYJOB_FIELDS = (
    "suspend", "activeDeadlineSeconds", "preRunningDeadlineSeconds", "backoffLimit",
    "ttlSecondsAfterFinished",
)  # fmt: skip
QUEUE_KEY = "queueLabel"


def owned_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return uid is not None and any(ref.get("uid") == uid for ref in refs)


def left_by_predecessor(obj: Mapping[str, Any], name: str, uid: str | None) -> bool:
    """Owned by an earlier RLExperiment of this name (deleted and re-created), not by us."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("kind") == "RLExperiment" and r.get("name") == name and r.get("uid") != uid
               for r in refs)  # fmt: skip


def describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '')}"


def conflict_message(obj: Mapping[str, Any]) -> str:
    return (f"{describe(obj)} already exists and is not owned by this experiment; delete or "
            "rename that object, or rename the experiment")  # fmt: skip


def field_hashes(spec: Mapping[str, Any]) -> dict[str, str]:
    """A short content hash of each immutable top-level spec field (absent fields too)."""
    out = {}
    for name in IMMUTABLE_SPEC_FIELDS:
        text = json.dumps(spec.get(name), sort_keys=True, separators=(",", ":"))
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:12]
    return out


def lifecycle_of(rayjob: Mapping[str, Any]) -> dict[str, Any]:
    """The lifecycle values a rendered RayJob carries (spec fields + the Kueue label)."""
    spec = rayjob.get("spec") or {}
    values: dict[str, Any] = {k: spec.get(k) for k in LIFECYCLE_RAYJOB_FIELDS}
    values[QUEUE_KEY] = ((rayjob.get("metadata") or {}).get("labels") or {}).get(LABEL_KUEUE_QUEUE)
    return values


def annotate(rayjob: dict[str, Any], spec: Mapping[str, Any]) -> None:
    """Stamp a freshly rendered RayJob with what later reconciles compare against."""
    ann = rayjob["metadata"].setdefault("annotations", {})
    ann[ANNOTATION_SPEC_HASH] = json.dumps(field_hashes(spec), sort_keys=True)
    ann[ANNOTATION_LIFECYCLE] = json.dumps(lifecycle_of(rayjob), sort_keys=True)


def _recorded(existing: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    raw = ((existing.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def changed_immutable(existing: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """Immutable spec fields that differ from what the existing RayJob was built from."""
    recorded = _recorded(existing, ANNOTATION_SPEC_HASH)
    if recorded is None:  # not built by us (or by an older operator): nothing to compare
        return []
    now = field_hashes(spec)
    return [name for name in IMMUTABLE_SPEC_FIELDS if recorded.get(name, now[name]) != now[name]]


def lifecycle_patch(
    existing: Mapping[str, Any], desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A merge patch carrying only the lifecycle values the experiment changed, or None."""
    want = lifecycle_of(desired)
    applied = _recorded(existing, ANNOTATION_LIFECYCLE)
    if applied is None:
        applied = lifecycle_of(existing)
    changed = {k: v for k, v in want.items() if applied.get(k) != v}
    if not changed:
        return None
    patch: dict[str, Any] = {"metadata": {"annotations": {
        ANNOTATION_LIFECYCLE: json.dumps(want, sort_keys=True)}}}  # fmt: skip
    spec = {k: v for k, v in changed.items() if k != QUEUE_KEY}
    if spec:
        patch["spec"] = spec  # a None value removes the field (merge-patch semantics)
    if QUEUE_KEY in changed:
        patch["metadata"]["labels"] = {LABEL_KUEUE_QUEUE: changed[QUEUE_KEY]}
    return patch
