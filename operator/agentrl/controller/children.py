"""Pure decisions about an experiment's children: ownership, immutable fields, lifecycle.

The rendered RayJob records a hash per immutable spec field and the lifecycle values it was
given (`agentrl.render.provenance`). That lets a restarted operator tell "the user changed the
model" (refuse, name the field) from "the user changed a deadline" (patch exactly that field),
and never re-assert a field someone else now owns: Kueue flips `suspend` to admit a job, the
autoscaler sets worker replicas, so we send only what the *experiment* changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentrl.api.constants import ANNOTATION_SPEC_HASH, KIND, LABEL_KUEUE_QUEUE
from agentrl.api.crd import IMMUTABLE_SPEC_FIELDS
from agentrl.api.models import RLExperimentSpec
from agentrl.render.provenance import (
    ANNOTATION_LIFECYCLE,
    QUEUE_KEY,
    field_hashes,
    lifecycle_of,
    recorded,
)


def owned_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return uid is not None and any(ref.get("uid") == uid for ref in refs)


def left_by_predecessor(obj: Mapping[str, Any], name: str, uid: str | None) -> bool:
    """Owned by an earlier RLExperiment of this name (deleted and re-created), not by us."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("kind") == KIND and r.get("name") == name and r.get("uid") != uid
               for r in refs)  # fmt: skip


def describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '')}"


def conflict_message(obj: Mapping[str, Any]) -> str:
    return (f"{describe(obj)} already exists and is not owned by this experiment; delete or "
            "rename that object, or rename the experiment")  # fmt: skip


def changed_immutable(existing: Mapping[str, Any], spec: RLExperimentSpec) -> list[str]:
    """Immutable spec fields that differ from what the existing RayJob was built from."""
    was = recorded(existing, ANNOTATION_SPEC_HASH)
    if was is None:  # not built by us (or by an older operator): nothing to compare
        return []
    now = field_hashes(spec)
    return [name for name in IMMUTABLE_SPEC_FIELDS if was.get(name, now[name]) != now[name]]


def lifecycle_patch(
    existing: Mapping[str, Any], desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """A merge patch carrying only the lifecycle values the experiment changed, or None."""
    want = lifecycle_of(desired)
    applied = recorded(existing, ANNOTATION_LIFECYCLE)
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
