"""Checks of the Kubernetes objects a spec passes through (volumes, mounts, tolerations...).

These are typed `KubeObject` in the models and copied verbatim into the RayJob's pod
templates. The API server *prunes* unknown fields there instead of refusing them, so a typo
(`claimNme`, `operater`) would vanish silently and surface hours later as an unschedulable
pod or a missing volume. The most common mistakes are caught here, with the field's path.

These rules read the document as written (wire form), defensively, so they also run when
the typed parse failed: `agentrl validate` then still reports a bad name or a misspelt
toleration next to the type errors, instead of one round of fixes at a time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentrl.api.constants import (
    BUNDLE_MOUNT_DIR,
    CONFIG_MOUNT_DIR,
    EXTRA_CODE_MOUNT_ROOT,
    RAYJOB_NAME_MAX,
    SHM_MOUNT_DIR,
)
from agentrl.api.findings import Finding, err, repeats

RESERVED_MOUNTS = (SHM_MOUNT_DIR, CONFIG_MOUNT_DIR, BUNDLE_MOUNT_DIR, EXTRA_CODE_MOUNT_ROOT)
# core/v1 Volume sources (Kubernetes 1.30+); a volume has exactly one.
VOLUME_SOURCES = frozenset(
    (
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap",
        "csi", "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "nfs",
        "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "projected",
        "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
    )
)  # fmt: skip
MOUNT_KEYS = frozenset(
    (
        "name", "mountPath", "subPath", "subPathExpr", "readOnly", "recursiveReadOnly",
        "mountPropagation",
    )
)  # fmt: skip
TOLERATION_KEYS = frozenset(("key", "operator", "value", "effect", "tolerationSeconds"))
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_KEYS = frozenset(("nodeAffinity", "podAffinity", "podAntiAffinity"))
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def unknown_keys(obj: Mapping[str, Any], known: frozenset[str], path: str) -> Iterator[Finding]:
    for key in sorted(set(obj) - known):
        yield err(f"{path}.{key}", "unknown field", "accepted: " + ", ".join(sorted(known)))


def _at(doc: Any, *keys: str) -> Any:
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


def name_fits(body: Mapping[str, Any]) -> Iterator[Finding]:
    """`metadata.name` is a DNS-1035 label of at most 47 characters (KubeRay's RayJob cap;
    every child name derives from it).
    """
    name = _at(body, "metadata", "name")
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


def volumes(body: Mapping[str, Any]) -> Iterator[Finding]:
    """Volumes are named, unique and have exactly one known source; every mount names a
    declared volume at an absolute path clear of agentrl's own mounts.
    """
    declared: list[str] = []
    for i, vol in _dicts(_at(body, "spec", "runtime", "volumes")):
        path = f"spec.runtime.volumes[{i}]"
        name = vol.get("name")
        if not isinstance(name, str) or not name:
            yield err(f"{path}.name", "required field is missing", "name the volume")
        else:
            declared.append(name)
        yield from unknown_keys(vol, VOLUME_SOURCES | {"name"}, path)
        if len(set(vol) & VOLUME_SOURCES) != 1 and not set(vol) - VOLUME_SOURCES - {"name"}:
            yield err(path, "needs exactly one volume source", "e.g. persistentVolumeClaim")
    for i, name in repeats(declared):
        yield err(f"spec.runtime.volumes[{i}].name", f"volume {name!r} twice", "rename one")
    for i, mount in _dicts(_at(body, "spec", "runtime", "volumeMounts")):
        yield from _mount(i, mount, declared)


def _mount(i: int, mount: Mapping[str, Any], declared: list[str]) -> Iterator[Finding]:
    path = f"spec.runtime.volumeMounts[{i}]"
    unknown = list(unknown_keys(mount, MOUNT_KEYS, path))
    yield from unknown
    if mount.get("name") not in declared:
        yield err(
            f"{path}.name",
            f"no volume named {mount.get('name')!r} in runtime.volumes",
            "declare the volume or fix the name",
        )
    mount_path = str(mount.get("mountPath", ""))
    if "mountPath" not in mount:
        if not unknown:  # a misspelt mountPath is already reported once
            yield err(f"{path}.mountPath", "required field is missing", "e.g. /models")
    elif not mount_path.startswith("/"):
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
    """Tolerations, affinity and node selectors are well-formed (unknown keys would be
    dropped by the API server, leaving pods unschedulable).
    """
    res = _at(body, "spec", "resources")
    for base, tolerations in (
        ("spec.resources.tolerations", _at(res, "tolerations")),
        ("spec.resources.head.tolerations", _at(res, "head", "tolerations")),
    ):
        for i, tol in _dicts(tolerations):
            yield from _toleration(f"{base}[{i}]", tol)
    affinity = _at(res, "affinity")
    if isinstance(affinity, Mapping):
        yield from unknown_keys(affinity, AFFINITY_KEYS, "spec.resources.affinity")
    for base, selector in (
        ("spec.resources.nodeSelector", _at(res, "nodeSelector")),
        ("spec.resources.head.nodeSelector", _at(res, "head", "nodeSelector")),
    ):
        for key, value in (selector or {}).items() if isinstance(selector, Mapping) else ():
            if not LABEL_KEY.match(str(key)) or not LABEL_VALUE.match(str(value)):
                yield err(f"{base}.{key}", f"{key}={value} is not a valid label", "")


def _toleration(path: str, tol: Mapping[str, Any]) -> Iterator[Finding]:
    yield from unknown_keys(tol, TOLERATION_KEYS, path)
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


# Rules over the document as written; run whether or not the typed parse succeeded.
DOCUMENT_RULES = (name_fits, volumes, placement)
