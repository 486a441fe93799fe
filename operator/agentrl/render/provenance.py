"""What a rendered RayJob records about its own making, in two annotations.

`agentrl.io/spec-hash` holds a short hash of each immutable spec field, and
`agentrl.io/lifecycle` the lifecycle values the RayJob was given. The operator reads them back
on every later reconcile: the first tells "the user changed the model" (refuse, name the field)
from "the user changed a deadline", and the second lets it patch exactly the lifecycle values
the *experiment* changed, never a field another controller now owns (Kueue flips `suspend`,
the autoscaler sets replicas). They are stamped here, at render time, so `agentrl render` and
the golden files show the RayJob exactly as the operator applies it.

A field is hashed as its effective value with defaults left out: a default the API server
fills in, a value written out that equals the default, or a new optional field in a later
agentrl release changes no hash; only an edit of what the run would use does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agentrl.api.constants import ANNOTATION_PREFIX, ANNOTATION_SPEC_HASH, LABEL_KUEUE_QUEUE
from agentrl.api.crd import IMMUTABLE_SPEC_FIELDS
from agentrl.api.models import RLExperimentSpec

ANNOTATION_LIFECYCLE = f"{ANNOTATION_PREFIX}/lifecycle"
# RayJob spec fields that follow the experiment's lifecycle fields after creation.
LIFECYCLE_RAYJOB_FIELDS = (
    "suspend", "activeDeadlineSeconds", "preRunningDeadlineSeconds", "backoffLimit",
    "ttlSecondsAfterFinished",
)  # fmt: skip
# The Kueue queue travels as a label, recorded beside the spec fields under this key.
QUEUE_KEY = "queueLabel"
HASH_CHARS = 12


def field_hashes(spec: RLExperimentSpec) -> dict[str, str]:
    """A short content hash of each immutable top-level spec field (absent ones too)."""
    wire = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    out = {}
    for name in IMMUTABLE_SPEC_FIELDS:
        text = json.dumps(wire.get(name), sort_keys=True, separators=(",", ":"))
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]
    return out


def lifecycle_of(rayjob: Mapping[str, Any]) -> dict[str, Any]:
    """The lifecycle values a RayJob carries (its spec fields and the Kueue label)."""
    spec = rayjob.get("spec") or {}
    values: dict[str, Any] = {k: spec.get(k) for k in LIFECYCLE_RAYJOB_FIELDS}
    values[QUEUE_KEY] = ((rayjob.get("metadata") or {}).get("labels") or {}).get(LABEL_KUEUE_QUEUE)
    return values


def stamp(rayjob: dict[str, Any], spec: RLExperimentSpec) -> None:
    """Record on a freshly rendered RayJob what later reconciles compare against."""
    ann = rayjob["metadata"].setdefault("annotations", {})
    ann[ANNOTATION_SPEC_HASH] = json.dumps(field_hashes(spec), sort_keys=True)
    ann[ANNOTATION_LIFECYCLE] = json.dumps(lifecycle_of(rayjob), sort_keys=True)


def recorded(obj: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """An annotation written by `stamp`, parsed; None when absent or not ours."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
