"""Which KubeRay releases can run what agentrl renders, and what an older one would drop.

The API server prunes every field a CRD's structural schema does not declare, silently: on a
KubeRay whose `rayjobs.ray.io` predates a field, `spec.startupDeadlineSeconds` (rendered as
`preRunningDeadlineSeconds`) or `spec.backoffLimit` would vanish from the RayJob without a
word. `pruned_fields` walks a rendered RayJob against a CRD the way the API server's pruning
does; `explain_pruned` turns the paths into messages naming the RLExperiment field and the
KubeRay release that added it. `KUBERAY_MIN_VERSION` is the one home of the minimum the chart
and the docs state: the oldest release whose schema keeps every field agentrl renders.

Pruning follows k8s.io/apiextensions-apiserver's `pkg/apiserver/schema/pruning` (see
https://github.com/kubernetes/kubernetes/blob/5e813c7ced0ff1902d8fe09a80cba36888740015/staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go):
unknown object keys are dropped unless `x-kubernetes-preserve-unknown-fields` is set;
`additionalProperties` declares every key; array items follow `items`; the root and every
`x-kubernetes-embedded-resource` keep `apiVersion`, `kind` and `metadata`, whose unknown keys
are dropped by ObjectMeta decoding instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.api.models import RLExperimentSpec

# The oldest KubeRay release whose rayjobs.ray.io keeps every field agentrl renders:
# `preRunningDeadlineSeconds` first appears in v1.6.0 (v1.6.0, v1.6.1 and v1.6.2 ship the
# same CRD). The chart's `agentrl.io/kuberay-min-version` annotation states the same value.
KUBERAY_MIN_VERSION = "1.6.0"
RAYJOB_CRD = "rayjobs.ray.io"

# metav1.ObjectMeta's JSON fields: what survives in the metadata of the root and of embedded
# resources (anything else is dropped when the API server decodes ObjectMeta).
OBJECT_META_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
        "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
        "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip
_TYPE_META = ("apiVersion", "kind")


@dataclass(frozen=True)
class Feature:
    """A RayJob field that only some KubeRay releases declare, and the spec field behind it."""

    rayjob_field: str  # path in the RayJob, e.g. "spec.preRunningDeadlineSeconds"
    spec_field: str | None  # the RLExperiment field rendered into it; None: agentrl's own
    since: str  # the first KubeRay release whose CRD declares it
    # Whether a spec relies on it: a field rendered at KubeRay's own default (`backoffLimit:
    # 0`) loses nothing when dropped.
    used_by: Callable[[RLExperimentSpec], bool] = field(compare=False, repr=False)

    def message(self) -> str:
        name = self.rayjob_field.removeprefix("spec.")
        if self.spec_field is None:
            return (
                f"agentrl renders {name} on every RayJob, which needs KubeRay >= "
                f"{_short(self.since)}; the installed {RAYJOB_CRD} CRD lacks it, so the API "
                f"server would drop it silently: upgrade KubeRay to >= {KUBERAY_MIN_VERSION}"
            )
        return (
            f"{self.spec_field} needs KubeRay >= {_short(self.since)} ({name}); the installed "
            f"{RAYJOB_CRD} CRD lacks it, so the API server would drop it silently: upgrade "
            f"KubeRay to >= {KUBERAY_MIN_VERSION} or unset {self.spec_field}"
        )


# Every rendered RayJob field that is younger than the oldest KubeRay v1 release (v1.1).
FEATURES = (
    Feature("spec.backoffLimit", "spec.backoffLimit", "1.2.0", lambda s: s.backoff_limit > 0),
    # The submitter's own retry budget (KubeRay's default of 2 is spent by a couple of node
    # drains over a days-long run, and a failed submitter fails the RayJob): always rendered.
    Feature("spec.submitterConfig", None, "1.2.0", lambda s: True),
    Feature(
        "spec.preRunningDeadlineSeconds",
        "spec.startupDeadlineSeconds",
        "1.6.0",
        lambda s: s.startup_deadline_seconds is not None,
    ),
)


def pruned_fields(rayjob: Mapping[str, Any], crd: Mapping[str, Any]) -> list[str]:
    """Paths (`spec.a.b[0].c`) of the fields of `rayjob` that `crd` does not declare, so the
    API server would drop them on create or update. Only the outermost dropped field of a
    subtree is listed. Raises ValueError when the CRD does not serve the RayJob's version.
    """
    schema = version_schema(crd, str(rayjob.get("apiVersion", "")))
    return list(_walk(rayjob, schema, "", embedded=True))


def version_schema(crd: Mapping[str, Any], api_version: str) -> Mapping[str, Any]:
    """The openAPIV3Schema `crd` serves for `api_version` (`ray.io/v1` or just `v1`)."""
    group, _, version = api_version.rpartition("/")
    spec = crd.get("spec") or {}
    if group and spec.get("group") not in (None, group):
        raise ValueError(f"{crd_name(crd)} is for group {spec.get('group')}, not {group}")
    served = [v for v in spec.get("versions") or () if v.get("served", True)]
    for entry in served:
        if entry.get("name") == version:
            schema: Mapping[str, Any] = (entry.get("schema") or {}).get("openAPIV3Schema") or {}
            return schema
    names = ", ".join(str(v.get("name")) for v in served) or "none"
    raise ValueError(
        f"{crd_name(crd)} does not serve {api_version} (served: {names}): "
        f"agentrl needs KubeRay >= {KUBERAY_MIN_VERSION}"
    )


def crd_name(crd: Mapping[str, Any]) -> str:
    return str((crd.get("metadata") or {}).get("name") or RAYJOB_CRD)


def _walk(value: Any, schema: Mapping[str, Any] | None, path: str, embedded: bool) -> Iterator[str]:
    if isinstance(value, Mapping):
        yield from _walk_object(value, schema, path, embedded)
    elif isinstance(value, list):
        if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
            items = schema.get("items")
            if items is None:  # unknown items kept as they are
                return
        else:
            items = None if schema is None else schema.get("items")
        for i, item in enumerate(value):
            yield from _walk(item, items, f"{path}[{i}]", _embedded(items))


def _walk_object(
    obj: Mapping[str, Any], schema: Mapping[str, Any] | None, path: str, embedded: bool
) -> Iterator[str]:
    if schema is None:  # no schema at all below here: nothing is kept
        yield from (_join(path, key) for key in obj)
        return
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    props: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, child in obj.items():
        where = _join(path, key)
        if embedded and key in _TYPE_META:
            continue
        if embedded and key == "metadata":
            yield from _walk_meta(child, props.get("metadata"), where)
        elif key in props:
            yield from _walk(child, props[key], where, _embedded(props[key]))
        elif isinstance(extra, Mapping):
            yield from _walk(child, extra, where, _embedded(extra))
        elif extra is True or preserve:
            continue
        else:
            yield where


def _walk_meta(meta: Any, schema: Mapping[str, Any] | None, path: str) -> Iterator[str]:
    """ObjectMeta of the root or an embedded resource: decoded, not pruned by the schema."""
    if not isinstance(meta, Mapping):
        return
    for key in meta:
        if key not in OBJECT_META_FIELDS:
            yield _join(path, key)


def _embedded(schema: Mapping[str, Any] | None) -> bool:
    return bool(schema is not None and schema.get("x-kubernetes-embedded-resource"))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_INDEX = re.compile(r"\[\d+\]")


def explain_pruned(paths: Sequence[str]) -> list[str]:
    """One message per dropped path: the RLExperiment field and the KubeRay release it
    needs when the path is a known feature, otherwise the RayJob path and the minimum."""
    by_field = {f.rayjob_field: f for f in FEATURES}
    out: list[str] = []
    for path in paths:
        feature = by_field.get(_INDEX.sub("", path))
        if feature is not None:
            out.append(feature.message())
        else:
            out.append(
                f"RayJob field {path} is not in the installed {RAYJOB_CRD} CRD, so the API "
                f"server would drop it silently: agentrl needs KubeRay >= {KUBERAY_MIN_VERSION}"
            )
    return out


def defaulted(spec: RLExperimentSpec) -> frozenset[str]:
    """RayJob paths rendered from agentrl's default rather than from the spec: an older
    KubeRay that drops one loses nothing the spec asked for (the operator keeps its own
    startup deadline either way)."""
    return frozenset(
        f.rayjob_field for f in FEATURES if f.spec_field is not None and not f.used_by(spec)
    )


def features_used(spec: RLExperimentSpec) -> list[Feature]:
    """The release-dependent KubeRay features this spec relies on."""
    return [f for f in FEATURES if f.used_by(spec)]


def missing_features(crd: Mapping[str, Any]) -> list[Feature]:
    """The features whose RayJob field the installed CRD's v1 schema does not declare."""
    schema = version_schema(crd, "ray.io/v1")
    return [f for f in FEATURES if not _declares(schema, f.rayjob_field)]


def _declares(schema: Mapping[str, Any], path: str) -> bool:
    node: Mapping[str, Any] | None = schema
    for key in path.split("."):
        node = ((node or {}).get("properties") or {}).get(key)
        if node is None:
            return False
    return True


def _short(version: str) -> str:
    """'1.6.0' -> '1.6' (a feature arrives with a minor release)."""
    major, minor, *_ = version.split(".")
    return f"{major}.{minor}"
