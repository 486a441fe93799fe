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


# Service fields the renderer writes only for some specs: one an earlier generation wrote and
# this one does not is removed (a merge patch keeps what it does not name).
OPTIONAL_SERVICE_FIELDS = ("loadBalancerSourceRanges",)


def refresh_patch(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch that makes a prerequisite created for an earlier generation (ours, but
    rendered from another spec) what this generation renders; None when it already is.

    For a ConfigMap or Service that exists while its RayJob does not (the RayJob was refused,
    or the operator stopped between the two): no pod uses it yet, so it is made exactly as
    rendered, annotations included. The bundle ConfigMap is immutable and named by its
    content, so one of that name is already right. What the API server fills in (a Service's
    clusterIP, a port's nodePort, defaults) is kept: only what we render is compared."""
    if desired.get("immutable"):
        return None
    patch: dict[str, Any] = {}
    want_notes = (desired.get("metadata") or {}).get("annotations") or {}
    have_notes = (existing.get("metadata") or {}).get("annotations") or {}
    if want_notes != have_notes:
        patch["metadata"] = {"annotations": _replacing(have_notes, want_notes)}
    for key in ("data", "binaryData"):
        want, have = desired.get(key) or {}, existing.get(key) or {}
        if want != have:
            patch[key] = _replacing(have, want)
    if "spec" in desired:
        want_spec, have_spec = desired["spec"], existing.get("spec") or {}
        spec = {k: v for k, v in want_spec.items() if not _within(v, have_spec.get(k))}
        spec.update({k: None for k in OPTIONAL_SERVICE_FIELDS
                     if k in have_spec and k not in want_spec})  # fmt: skip
        if spec:
            patch["spec"] = spec
    return patch or None


def _replacing(have: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch of one map that leaves exactly `want` (a None value removes a key)."""
    return {**{k: None for k in have if k not in want}, **want}


def _within(want: Any, have: Any) -> bool:
    """Whether `have` says everything `want` says (it may hold more: server defaults)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_within(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(want) == len(have)
                and all(_within(w, h) for w, h in zip(want, have, strict=True)))  # fmt: skip
    return bool(want == have)
