"""Whether another experiment writes the checkpoint directory this one would (pure).

slime saves into `spec.checkpoint.path` with Megatron's layout: `iter_NNNNNNN/` directories and
the tracker `latest_checkpointed_iteration.txt` directly in it, and the launcher resumes
whatever that tracker names at every pod start (each KubeRay retry, each resume). Two running
experiments that name one directory (a copied YAML with a new `metadata.name`) save over each
other, and a retry of either resumes the other run's weights. Nothing fails; the runs are
silently mixed. So before it creates an experiment's RayJob the operator compares where its
checkpoint directory lies with that of every other experiment of the namespace.

**The same directory** is the same storage and the same directory on it, one inside the other
included (a run saving `iter_*` directly into a directory that holds another run's).
`checkpoint.path` lies on the volumeMount with the longest `mountPath` above it (as
`api.paths` finds it); that mount's `subPath` and the path below the mount name the directory
on the volume. The storage is the PersistentVolumeClaim (by claim name: claims are
namespaced), the NFS server (its `path` prefixes the directory), the node's `hostPath` (its
`path` prefixes the directory; two pods on one node share it), or for any other source the
source exactly as written. A path on no volume, on a volume each pod has its own (`emptyDir`,
`ephemeral`) or on a mount with a `subPathExpr` (expanded per container) is never compared.

**Who keeps it.** Only experiments that are not finished count: going on from a finished
run's checkpoint in a new experiment is how one deliberately continues it. Of the others, one
that has its RayJob (`status.rayJobName`) holds the directory, whatever its age; one that has
none yet holds it against newer experiments only (older `metadata.creationTimestamp`, then
name), unless it is Failed for its spec (it creates nothing until it changes, and is checked
again then). An experiment being deleted does not count. So of two applied together the
older runs and the newer is refused, whichever the operator reconciles first.

**A refusal stays for its generation**, across operator restarts too (`held`): once the
other run has finished, starting the refused one on its own would resume the other run's
last checkpoint, days later, with nobody asking. A spec change (a new generation) is checked
again.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.api.constants import ConditionType, Phase
from agentrl.api.kube_rules import at
from agentrl.api.paths import clean, under
from agentrl.controller import conditions, status

FIELD = "spec.checkpoint.path"
# Volume sources each pod has its own (or that are read-only views of API objects): a
# directory on them is never another pod's, let alone another experiment's.
_PER_POD = frozenset(
    {"emptyDir", "ephemeral", "configMap", "secret", "downwardAPI", "projected", "image"}
)


@dataclass(frozen=True)
class Location:
    """Where a checkpoint directory lies: on which storage, and which directory of it."""

    storage: tuple[str, ...]  # equal for the same storage
    directory: str  # absolute on that storage, lexically normal
    where: str  # the storage in words


@dataclass(frozen=True)
class Collision:
    """Another experiment writes this one's checkpoint directory."""

    other: str  # its name
    message: str  # the refusal, naming it, the field and the fix


def location(spec: Mapping[str, Any]) -> Location | None:
    """Where `spec.checkpoint.path` lies on shared storage; None when no other pod's can."""
    path = at(spec, "checkpoint", "path")
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/"):
        return None
    mount = _mount_of(_dicts(at(spec, "runtime", "volumeMounts")), clean(path))
    if mount is None or mount.get("subPathExpr"):
        return None
    volume = next((v for v in _dicts(at(spec, "runtime", "volumes"))
                   if v.get("name") == mount.get("name")), None)  # fmt: skip
    sub = mount.get("subPath") or ""
    if volume is None or not isinstance(sub, str) or ".." in sub.split("/"):
        return None
    kind = next((k for k, v in volume.items() if k != "name" and isinstance(v, Mapping)), None)
    if kind is None or kind in _PER_POD:
        return None
    source: Mapping[str, Any] = volume[kind]
    below = posixpath.relpath(clean(path), clean(str(mount["mountPath"])))
    root, storage, where = "/", (kind, _canonical(source)), f"a {kind} volume"
    if kind == "persistentVolumeClaim":
        claim = str(source.get("claimName"))
        storage, where = (kind, claim), f"PersistentVolumeClaim {claim}"
    elif kind in ("nfs", "hostPath"):
        root = str(source.get("path") or "/")
        server = str(source.get("server") or "")
        storage = (kind, server)
        where = f"NFS server {server}" if kind == "nfs" else "a node's hostPath"
    directory = clean(posixpath.join("/", root, sub, below))
    return Location(storage, directory, where)


def collision(this: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> Collision | None:
    """The experiment of `others` (bodies as listed) that keeps the checkpoint directory
    `this` would write, oldest first; None when there is none."""
    mine = location(this.get("spec") or {})
    if mine is None:
        return None
    for other in sorted(others, key=_age):
        if _same_object(this, other) or not _holds(other, this):
            continue
        theirs = location(other.get("spec") or {})
        if theirs is None or theirs.storage != mine.storage:
            continue
        if under(mine.directory, theirs.directory) or under(theirs.directory, mine.directory):
            return Collision(_name(other), _message(this, mine, other, theirs))
    return None


def held(st: Mapping[str, Any], generation: int) -> str | None:
    """The refusal the status records for this generation (it stays: see above), or None."""
    cond = conditions.get(st, ConditionType.CHECKPOINT_CONFLICT) or {}
    if cond.get("status") == "True" and cond.get("observedGeneration") == generation:
        return str(cond.get("message") or "")
    return None


def _holds(other: Mapping[str, Any], this: Mapping[str, Any]) -> bool:
    """Whether `other` keeps its checkpoint directory against `this` (the rule above)."""
    if (other.get("metadata") or {}).get("deletionTimestamp"):
        return False
    st = other.get("status") or {}
    if status.finished(st):
        return False
    if st.get("rayJobName"):
        return True
    return st.get("phase") != Phase.FAILED and _age(other) < _age(this)


def _message(this: Mapping[str, Any], mine: Location, other: Mapping[str, Any],
             theirs: Location) -> str:  # fmt: skip
    name, path = _name(other), str(at(other.get("spec") or {}, "checkpoint", "path"))
    st = other.get("status") or {}
    if mine.directory == theirs.directory:
        relation = "the same directory as"
    elif under(mine.directory, theirs.directory):
        relation = "inside"
    else:
        relation = "above"
    holds = (f"it has RayJob {st['rayJobName']}" if st.get("rayJobName")
             else "it was created first")  # fmt: skip
    return (
        f"{FIELD} {at(this.get('spec') or {}, 'checkpoint', 'path')} ({mine.directory} on "
        f"{mine.where}) is {relation} the checkpoint directory of RLExperiment {name} ({path}, "
        f"{theirs.directory} there), which is {st.get('phase') or Phase.PENDING} and keeps it "
        f"({holds}): both runs would save iter_* and latest_checkpointed_iteration.txt into "
        f"one directory, and a retry of either would resume the other's weights. Nothing was "
        f"created for this experiment. Give it a directory of its own: a distinct {FIELD}, or "
        f"a distinct subPath of its volumeMount (a spec change is checked again). To go on "
        f"from {name}'s checkpoint on purpose, delete this experiment and apply it again once "
        f"{name} has finished"
    )


def _mount_of(mounts: list[Mapping[str, Any]], path: str) -> Mapping[str, Any] | None:
    """The mount that holds `path`: the longest mountPath above it (as Kubernetes finds it)."""
    above = [m for m in mounts if isinstance(m.get("mountPath"), str)
             and under(path, clean(m["mountPath"]))]  # fmt: skip
    return max(above, key=lambda m: len(clean(m["mountPath"])), default=None)


def _age(body: Mapping[str, Any]) -> tuple[str, str]:
    """Creation order: creationTimestamp (RFC 3339 in UTC, one-second steps), then name."""
    meta = body.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def _same_object(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return ma.get("name") == mb.get("name") and ma.get("namespace") == mb.get("namespace")


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def _canonical(source: Mapping[str, Any]) -> str:
    """A volume source as written, less `readOnly` (the same storage mounted either way)."""
    return json.dumps({k: v for k, v in source.items() if k != "readOnly"}, sort_keys=True)


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []
