"""Checks of the Kubernetes objects a spec passes through (volumes, mounts, tolerations...)
and of the names that end up in Kubernetes objects.

Volumes, mounts, tolerations and affinity are typed `KubeObject` in the models and copied
verbatim into the RayJob's pod templates. The API server *prunes* unknown fields there
instead of refusing them, so a typo (`claimNme`, `operater`) would vanish silently and
surface hours later as an unschedulable pod or a missing volume. They are checked against
Kubernetes' own core/v1 schema (`agentrl.api.kube_schema`), then for what the schema cannot
say: one source per volume, names Kubernetes accepts, no clash with agentrl's own volumes
and mounts.

These rules read the document as written (wire form), defensively, so they also run when
the typed parse failed: `agentrl validate` then still reports a bad name or a misspelt
toleration next to the type errors, instead of one round of fixes at a time.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentrl.api import kube_schema
from agentrl.api.bounds import join
from agentrl.api.constants import (
    ANNOTATIONS_MAX_BYTES,
    BUNDLE_MOUNT_DIR,
    BUNDLE_VOLUME,
    CONFIG_MOUNT_DIR,
    CONFIG_VOLUME,
    EXTRA_CODE_MOUNT_ROOT,
    RAYJOB_NAME_MAX,
    RESERVED_VOLUME_PREFIX,
    SHM_MOUNT_DIR,
    SHM_VOLUME,
)
from agentrl.api.findings import Finding, err, repeats
from agentrl.api.formats import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MAX,
    FORMATS,
    LABEL_VALUE,
    QUALIFIED_NAME,
    QUALIFIED_NAME_MAX,
    QUALIFIED_NAME_PART_MAX,
)

RESERVED_MOUNTS = (SHM_MOUNT_DIR, CONFIG_MOUNT_DIR, BUNDLE_MOUNT_DIR, EXTRA_CODE_MOUNT_ROOT)
# core/v1 Volume sources (from the vendored schema); a volume has exactly one.
VOLUME_SOURCES = frozenset(kube_schema.definition(kube_schema.VOLUME)["properties"]) - {"name"}
RESERVED_VOLUMES = (SHM_VOLUME, CONFIG_VOLUME, BUNDLE_VOLUME)
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Enumerations core/v1 validation enforces where the schema only says "string".
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MOUNT_PROPAGATIONS = ("None", "HostToContainer", "Bidirectional")
EMPTY_DIR_MEDIA = ("", "Memory", "HugePages")
DNS1035 = re.compile(DNS1035_LABEL)
_DNS1123_LABEL = re.compile(DNS1123_LABEL)
_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN)
_QUALIFIED = re.compile(QUALIFIED_NAME)
_LABEL_VALUE = re.compile(LABEL_VALUE)
# Object names inside volume sources: (source, field) -> the object they name.
NAMED_OBJECTS = (
    ("persistentVolumeClaim", "claimName", "PersistentVolumeClaim"),
    ("configMap", "name", "ConfigMap"),
    ("secret", "secretName", "Secret"),
)


def at(doc: Any, *keys: str) -> Any:
    """doc[k1][k2]... or None when any level is missing or not a mapping."""
    for key in keys:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def _dicts(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, item) of the mapping items of a list (type errors are the parser's to report)."""
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)]


def _object_name(path: str, value: Any, kind: str) -> Iterator[Finding]:
    """`value` is a valid name of a `kind` object (RFC 1123 subdomain)."""
    if not isinstance(value, str):
        return  # the schema check reports missing or mistyped names
    if not value:
        yield err(path, f"the {kind} name is empty", "name the object")
        return
    if len(value) > DNS1123_SUBDOMAIN_MAX or not _SUBDOMAIN.match(value):
        fmt = FORMATS[DNS1123_SUBDOMAIN]
        yield err(path, f"{value!r} is {fmt.message} for a {kind}", fmt.hint)


def name_fits(body: Mapping[str, Any]) -> Iterator[Finding]:
    """`metadata.name` is a DNS-1035 label of at most 47 characters (KubeRay's RayJob cap;
    every child name derives from it).
    """
    name = at(body, "metadata", "name")
    if not isinstance(name, str):
        return
    if len(name) > RAYJOB_NAME_MAX:
        yield err(
            "metadata.name",
            f"name is {len(name)} characters; at most {RAYJOB_NAME_MAX} fit",
            "KubeRay derives RayCluster and Service names from the RayJob name; shorten it",
        )
    if not DNS1035.match(name):
        yield err(
            "metadata.name",
            f"{name!r} is not a DNS-1035 label",
            "use lower-case letters, digits and '-', starting with a letter",
        )


def metadata_known(body: Mapping[str, Any]) -> Iterator[Finding]:
    """`metadata` has only Kubernetes' ObjectMeta fields: the API server drops an unknown one
    (`metadata.lables`) silently, or refuses it under strict field validation."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return
    fields = kube_schema.definition(kube_schema.OBJECT_META)["properties"]
    for key in meta:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "remove it"
            yield err(join("metadata", str(key)), "unknown field", hint)


def metadata_fits(body: Mapping[str, Any]) -> Iterator[Finding]:
    """`metadata.namespace` is an RFC 1123 label; labels and annotations are what the API
    server stores (valid keys, label values, 256 KiB of annotations); agentrl copies the
    experiment's name into every child's labels.
    """
    namespace = at(body, "metadata", "namespace")
    if isinstance(namespace, str) and (
        len(namespace) > DNS1123_LABEL_MAX or not _DNS1123_LABEL.match(namespace)
    ):
        fmt = FORMATS[DNS1123_LABEL]
        yield err("metadata.namespace", f"{namespace!r} is {fmt.message}", fmt.hint)
    labels = at(body, "metadata", "labels")
    if isinstance(labels, Mapping):
        yield from _keys("metadata.labels", labels, "label")
        for key, value in labels.items():
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                fmt = FORMATS[LABEL_VALUE]
                yield err(join("metadata.labels", str(key)), fmt.message, fmt.hint)
    annotations = at(body, "metadata", "annotations")
    if isinstance(annotations, Mapping):
        yield from _annotations("metadata.annotations", annotations)


def volumes(body: Mapping[str, Any]) -> Iterator[Finding]:
    """Volumes are core/v1 Volumes with exactly one source, a unique RFC 1123 name that is not
    one of agentrl's own (`dshm`, `agentrl-*`), and valid names of the objects they mount.
    """
    declared: list[str] = []
    for i, vol in _dicts(at(body, "spec", "runtime", "volumes")):
        path = f"spec.runtime.volumes[{i}]"
        schema_findings = kube_schema.check(vol, kube_schema.VOLUME, path)
        yield from schema_findings
        name = vol.get("name")
        if isinstance(name, str) and name:
            declared.append(name)
            yield from _volume_name(f"{path}.name", name)
        given = set(vol) & VOLUME_SOURCES
        if len(given) != 1 and not any(f[1] == "unknown field" for f in schema_findings):
            yield err(
                path,
                "needs exactly one volume source" + (f", has {len(given)}" if given else ""),
                "e.g. persistentVolumeClaim: {claimName: models}",
            )
        for source, field, kind in NAMED_OBJECTS:
            yield from _object_name(f"{path}.{source}.{field}", at(vol, source, field), kind)
        medium = at(vol, "emptyDir", "medium")
        if isinstance(medium, str) and not (
            medium in EMPTY_DIR_MEDIA or medium.startswith("HugePages-")
        ):
            yield err(f"{path}.emptyDir.medium", f"{medium!r} is not a medium", 'Memory or ""')
    for i, name in repeats(declared):
        yield err(f"spec.runtime.volumes[{i}].name", f"volume {name!r} twice", "rename one")
    mounts = _dicts(at(body, "spec", "runtime", "volumeMounts"))
    for i, mount in mounts:
        yield from _mount(i, mount, declared)
    paths = [str(m.get("mountPath")).rstrip("/") for _, m in mounts if "mountPath" in m]
    for i, mount_path in repeats(paths):
        yield err(
            f"spec.runtime.volumeMounts[{i}].mountPath",
            f"{mount_path} is mounted twice",
            "Kubernetes refuses two mounts at one path",
        )


def _volume_name(path: str, name: str) -> Iterator[Finding]:
    if name in RESERVED_VOLUMES or name.startswith(RESERVED_VOLUME_PREFIX):
        yield err(
            path,
            f"{name!r} is a volume agentrl adds to every pod",
            f"rename it: {', '.join(RESERVED_VOLUMES)} and names starting with "
            f"{RESERVED_VOLUME_PREFIX!r} are reserved",
        )
    elif len(name) > DNS1123_LABEL_MAX or not _DNS1123_LABEL.match(name):
        fmt = FORMATS[DNS1123_LABEL]
        yield err(path, f"{name!r} is {fmt.message}", fmt.hint)


def _mount(i: int, mount: Mapping[str, Any], declared: list[str]) -> Iterator[Finding]:
    path = f"spec.runtime.volumeMounts[{i}]"
    schema_findings = kube_schema.check(mount, kube_schema.VOLUME_MOUNT, path)
    yield from schema_findings
    name = mount.get("name")
    if isinstance(name, str) and name not in declared:
        yield err(
            f"{path}.name",
            f"no volume named {name!r} in runtime.volumes",
            "declare the volume or fix the name",
        )
    propagation = mount.get("mountPropagation")
    if propagation is not None and propagation not in MOUNT_PROPAGATIONS:
        yield err(
            f"{path}.mountPropagation", f"{propagation!r} is not a mount propagation",
            " or ".join(MOUNT_PROPAGATIONS),
        )  # fmt: skip
    for field in ("subPath", "subPathExpr"):
        sub = mount.get(field)
        if isinstance(sub, str) and (sub.startswith("/") or ".." in sub.split("/")):
            yield err(
                f"{path}.{field}",
                f"{sub!r} must be a relative path without '..'",
                "a path inside the volume, e.g. models/qwen",
            )
    mount_path = mount.get("mountPath")
    if not isinstance(mount_path, str):
        return  # missing or mistyped: the schema check said so
    if not mount_path.startswith("/"):
        yield err(f"{path}.mountPath", "must be an absolute path", "e.g. /models")
    elif any(_overlaps(mount_path, r) for r in RESERVED_MOUNTS):
        yield err(
            f"{path}.mountPath",
            f"{mount_path} overlaps a path agentrl mounts",
            "reserved: " + ", ".join(RESERVED_MOUNTS),
        )


def _overlaps(a: str, b: str) -> bool:
    """One path is the other or lies beneath it (a mount there would hide or be hidden)."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def placement(body: Mapping[str, Any]) -> Iterator[Finding]:
    """Tolerations and affinity are core/v1 objects (unknown keys would be dropped by the API
    server, leaving pods unschedulable); node selector keys are label keys.
    """
    res = at(body, "spec", "resources")
    for base, tolerations in (
        ("spec.resources.tolerations", at(res, "tolerations")),
        ("spec.resources.head.tolerations", at(res, "head", "tolerations")),
    ):
        for i, tol in _dicts(tolerations):
            yield from _toleration(f"{base}[{i}]", tol)
    for base, affinity in (
        ("spec.resources.affinity", at(res, "affinity")),
        ("spec.resources.head.affinity", at(res, "head", "affinity")),
    ):
        if isinstance(affinity, Mapping):
            found = kube_schema.check(affinity, kube_schema.AFFINITY, base)
            yield from found
            if not found:
                yield from _selector_operators(affinity, base)
                yield from _node_selector_terms(affinity, base)
    for base, selector in (
        ("spec.resources.nodeSelector", at(res, "nodeSelector")),
        ("spec.resources.head.nodeSelector", at(res, "head", "nodeSelector")),
    ):
        if isinstance(selector, Mapping):
            yield from _keys(base, selector, "label")


def _keys(base: str, mapping: Mapping[Any, Any], what: str) -> Iterator[Finding]:
    for key in mapping:
        text = str(key)
        problem = qualified_name_problem(text)
        if problem is not None:
            yield err(join(base, text), f"{text!r} is not a valid {what} key: {problem}",
                      FORMATS[QUALIFIED_NAME].hint)  # fmt: skip


def qualified_name_problem(key: str) -> str | None:
    """What Kubernetes' IsQualifiedName says of a label or annotation key: an optional
    prefix that is a DNS subdomain of at most 253 characters, then '/', then a name of at most
    63 characters; None when it is valid."""
    if len(key) > QUALIFIED_NAME_MAX or not _QUALIFIED.match(key):
        return "not an optional DNS prefix and '/' and a name"
    prefix, _, name = key.rpartition("/")
    if len(prefix) > DNS1123_SUBDOMAIN_MAX:
        return f"the prefix is {len(prefix)} characters; at most {DNS1123_SUBDOMAIN_MAX}"
    if len(name) > QUALIFIED_NAME_PART_MAX:
        return f"the name after the prefix is {len(name)} characters; at most 63"
    return None


def _node_selector_terms(affinity: Mapping[str, Any], base: str) -> Iterator[Finding]:
    """A required node affinity has terms, and no empty one: Kubernetes refuses an empty
    list, and an empty term matches no node, so the pods would wait forever."""
    required = at(affinity, "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return
    path = f"{base}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms")
    if not terms:
        yield err(path, "required node affinity needs at least one term", "add a term or drop it")
    for i, term in _dicts(terms):
        if not term.get("matchExpressions") and not term.get("matchFields"):
            yield err(
                f"{path}[{i}]",
                "an empty term matches no node: the pods would never be scheduled",
                "give it matchExpressions (or matchFields), or remove it",
            )


def _selector_operators(node: Any, path: str) -> Iterator[Finding]:
    """`operator` of every selector requirement in an affinity: node selector terms allow
    Gt and Lt, label selectors do not (core/v1 validation; the schema says only "string").
    """
    stack: list[tuple[Any, str, tuple[str, ...]]] = [(node, path, ())]
    while stack:
        item, where, allowed = stack.pop()
        if isinstance(item, list):
            stack.extend((x, f"{where}[{i}]", allowed) for i, x in enumerate(item))
        elif isinstance(item, Mapping):
            op = item.get("operator")
            if allowed and op is not None and op not in allowed:
                yield err(f"{where}.operator", f"{op!r} is not an operator here", "/".join(allowed))
            for key, value in item.items():
                if key in ("matchExpressions", "matchFields"):
                    ops = LABEL_SELECTOR_OPERATORS if where.endswith("Selector") else ()
                    stack.append((value, f"{where}.{key}", ops or NODE_SELECTOR_OPERATORS))
                else:
                    stack.append((value, f"{where}.{key}", ()))


def _toleration(path: str, tol: Mapping[str, Any]) -> Iterator[Finding]:
    yield from kube_schema.check(tol, kube_schema.TOLERATION, path)
    key = tol.get("key")
    problem = qualified_name_problem(key) if isinstance(key, str) and key else None
    if problem is not None:
        yield err(
            f"{path}.key", f"{key!r} is not a valid taint key: {problem}",
            FORMATS[QUALIFIED_NAME].hint,
        )  # fmt: skip
    op = tol.get("operator", "Equal")
    if op not in TOLERATION_OPERATORS:
        yield err(f"{path}.operator", f"{op!r} is not Exists or Equal", "")
    elif op == "Exists" and tol.get("value"):
        yield err(f"{path}.value", "must be empty when operator is Exists", "")
    effect = tol.get("effect")
    if effect is not None and effect not in TOLERATION_EFFECTS:
        yield err(
            f"{path}.effect", f"{effect!r} is not a taint effect", "/".join(TOLERATION_EFFECTS)
        )


# Label and annotation prefixes whose keys agentrl and KubeRay set on the pods themselves (the
# Services and the RayCluster select pods by them).
RESERVED_POD_KEY_PREFIXES = ("agentrl.io/", "ray.io/")


def pod_metadata(body: Mapping[str, Any]) -> Iterator[Finding]:
    """`spec.runtime.podLabels`/`podAnnotations` are what the API server stores on a pod, and
    stay off the keys agentrl and KubeRay select pods by."""
    for field, what in (("podLabels", "label"), ("podAnnotations", "annotation")):
        base = f"spec.runtime.{field}"
        mapping = at(body, "spec", "runtime", field)
        if not isinstance(mapping, Mapping):
            continue
        yield from (
            _annotations(base, mapping) if what == "annotation" else _keys(base, mapping, what)
        )
        for key in mapping:
            if str(key).startswith(RESERVED_POD_KEY_PREFIXES):
                yield err(
                    join(base, str(key)),
                    f"{what} {key!r} is set by agentrl or KubeRay, which find the pods by it",
                    "use a key under your own prefix",
                )


def service_annotations(body: Mapping[str, Any]) -> Iterator[Finding]:
    """The gateway Service's annotations have valid keys and fit Kubernetes' 256 KiB limit."""
    annotations = at(body, "spec", "gateway", "service", "annotations")
    if isinstance(annotations, Mapping):
        yield from _annotations("spec.gateway.service.annotations", annotations)


def _annotations(base: str, annotations: Mapping[Any, Any]) -> Iterator[Finding]:
    yield from _keys(base, annotations, "annotation")
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        yield err(
            base,
            f"{size:,} bytes of annotations; Kubernetes allows {ANNOTATIONS_MAX_BYTES // 1024} KiB "
            "per object",
            "keep annotations short; put data in a ConfigMap",
        )


# Rules over the document as written; run whether or not the typed parse succeeded.
DOCUMENT_RULES = (
    name_fits, metadata_known, metadata_fits, volumes, placement, service_annotations,
    pod_metadata,
)  # fmt: skip
