"""Where the files a spec names live in the pods: on a volume, writable where slime writes.

The spec names files by their paths inside the Ray pods (the model, the data, the
checkpoint directory), and the pods see only what the image holds and what
`runtime.volumeMounts` (and agentrl's own mounts) put there. A path under no mount, a
checkpoint directory under a read-only mount or a path that climbs out of its mount with
`..` passes every type check, and fails on the GPU worker after the gang is scheduled and the
image pulled. These rules find the mount each path lies on the way Kubernetes would: the
longest `mountPath` that holds it, component by component.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentrl.api.constants import (
    BUNDLE_MOUNT_DIR,
    CONFIG_MOUNT_DIR,
    EXTRA_CODE_MOUNT_ROOT,
    SHM_MOUNT_DIR,
)
from agentrl.api.findings import Finding, Rule, err, warn
from agentrl.api.models import RLExperiment, RLExperimentSpec

# Directories agentrl mounts itself: read-only code and config, and the memory-backed /dev/shm.
AGENTRL_MOUNTS = (CONFIG_MOUNT_DIR, BUNDLE_MOUNT_DIR, SHM_MOUNT_DIR)


def under(path: str, directory: str) -> bool:
    """`path` is `directory` or lies beneath it, component by component."""
    directory = directory.rstrip("/") + "/"
    return (path.rstrip("/") + "/").startswith(directory)


def clean(path: str) -> str:
    """An absolute path's lexical normal form: no repeated, `.` or trailing separators (the
    callers refuse `..` before they compare)."""
    return posixpath.normpath(re.sub("/+", "/", path)) if path.startswith("/") else path


def trainer_weights_problem(spec: RLExperimentSpec) -> str | None:
    """`checkpoint.path` is the trainer's starting weights (`--ref-load`: refLoad, else
    path), and why that is refused; None otherwise. slime loads the KL loss's reference model
    from `--ref-load` with its own loader, which takes the latest save the tracker names
    there (`load_other_checkpoint` in slime/backends/megatron_utils/actor.py at both
    supported commits): from the run's first save on, every start (each retry, each resume)
    would use the trained policy as its reference instead of the starting weights."""
    ckpt, model = spec.checkpoint, spec.model
    field, weights = ("refLoad", model.ref_load) if model.ref_load else ("path", model.path)
    if ckpt.path is None or not weights.startswith("/") or clean(ckpt.path) != clean(weights):
        return None
    return (
        f"{ckpt.path} is also the trainer's starting weights (spec.model.{field}): slime "
        "saves the run there, and from its first save on it loads the KL loss's reference "
        "model from that directory's latest save (the trained policy) instead of the "
        "starting weights, on every retry and resume"
    )


TRAINER_WEIGHTS_FIX = (
    "give checkpoints a directory of their own (e.g. a sub-directory of this one); the "
    "starting weights stay where spec.model names them"
)


def mount_of(exp: RLExperiment, path: str) -> tuple[int, Mapping[str, Any]] | None:
    """(index, volumeMount) of the mount that holds `path`: the longest mountPath above it."""
    best: tuple[int, Mapping[str, Any]] | None = None
    for i, mount in enumerate(exp.spec.runtime.volume_mounts):
        mount_path = mount.get("mountPath")
        if not isinstance(mount_path, str) or not under(clean(path), clean(mount_path)):
            continue
        if best is None or len(clean(mount_path)) > len(clean(str(best[1]["mountPath"]))):
            best = (i, mount)
    return best


def _extra_code_dir(exp: RLExperiment, path: str) -> bool:
    """Under a runtime.extraCode ConfigMap's directory (small files may ship there)."""
    return any(
        under(clean(path), f"{EXTRA_CODE_MOUNT_ROOT}/{i}")
        for i in range(len(exp.spec.runtime.extra_code))
    )


def _named_paths(exp: RLExperiment) -> Iterator[tuple[str, str]]:
    """(wire path, value) of every filesystem path of the spec read inside the pods."""
    spec = exp.spec
    if spec.model.path.startswith("/"):
        yield "spec.model.path", spec.model.path
    if spec.model.ref_load is not None:
        yield "spec.model.refLoad", spec.model.ref_load
    yield "spec.data.train", spec.data.train
    for i, eval_set in enumerate(spec.data.eval):
        yield f"spec.data.eval[{i}].path", eval_set.path
    if spec.checkpoint.path is not None:
        yield "spec.checkpoint.path", spec.checkpoint.path
    yield "spec.runtime.cudaHome", spec.runtime.cuda_home
    yield "spec.runtime.slimeDir", spec.runtime.slime_dir


def no_backsteps(exp: RLExperiment) -> Iterator[Finding]:
    """Paths in the pods (model, data, checkpoint, cudaHome, slimeDir, mountPaths) have no
    `..` component: `/data/../../etc/x.jsonl` reads as under the /data mount and is not."""
    mounts = [
        (f"spec.runtime.volumeMounts[{i}].mountPath", m.get("mountPath"))
        for i, m in enumerate(exp.spec.runtime.volume_mounts)
    ]
    for path, value in [*_named_paths(exp), *mounts]:
        if isinstance(value, str) and ".." in value.split("/"):
            yield err(
                path,
                f"{value!r} has a '..' component",
                f"write the path it means without '..' (here {posixpath.normpath(value)!r})",
            )


def files_on_volumes(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: the spec mounts volumes, and the model (`path` when it is a directory,
    `refLoad`) or a data file is on none of them: unless the image holds it, the launcher
    stops on the GPU worker, after the gang is scheduled. (A spec without volumeMounts keeps
    its files in the image, which validation cannot see.)"""
    if not exp.spec.runtime.volume_mounts:
        return
    for path, value in _named_paths(exp):
        if path.startswith(("spec.checkpoint", "spec.runtime")) or not value.startswith("/"):
            continue  # the checkpoint has its own rule; cudaHome and slimeDir are the image's
        if ".." in value.split("/") or mount_of(exp, value) or _extra_code_dir(exp, value):
            continue
        yield warn(
            path,
            f"{value} is on no volume of runtime.volumeMounts: unless the image holds it, the "
            "launcher stops on the GPU worker",
            "mount the volume that holds it (runtime.volumes and runtime.volumeMounts)",
        )


def checkpoint(exp: RLExperiment) -> Iterator[Finding]:
    """`checkpoint.saveInterval` needs `checkpoint.path`, which is writable: not inside a
    directory agentrl mounts (read-only or in memory), not under a `readOnly` volumeMount or
    a read-only PersistentVolumeClaim, not the trainer's starting weights (slime would load
    the KL reference model from the run's latest save there); a warning when it is on no
    volume (checkpoints would be written into the container and lost with the pod) or on a
    volume each pod or node has its own (`emptyDir`, `ephemeral`, `hostPath`): every KubeRay
    retry runs on a new RayCluster, whose pods find no checkpoint and start over from the
    model."""
    ckpt = exp.spec.checkpoint
    if ckpt.save_interval is not None and ckpt.path is None:
        yield err("spec.checkpoint.path", "required when saveInterval is set", "set a PVC path")
    if ckpt.path is None or ".." in ckpt.path.split("/"):
        return
    if (problem := trainer_weights_problem(exp.spec)) is not None:
        yield err("spec.checkpoint.path", problem, TRAINER_WEIGHTS_FIX)
    if any(under(clean(ckpt.path), d) for d in AGENTRL_MOUNTS):
        yield err(
            "spec.checkpoint.path",
            f"{ckpt.path} is inside a directory agentrl mounts (read-only or in memory)",
            "put checkpoints on a volume of your own (runtime.volumes/volumeMounts)",
        )
        return
    found = mount_of(exp, ckpt.path)
    if found is None:
        yield warn(
            "spec.checkpoint.path",
            f"{ckpt.path} is on no volume of runtime.volumeMounts: checkpoints would be "
            "written into the container and lost with the pod (and each node would keep "
            "its own shards)",
            "mount a shared PVC there",
        )
        return
    i, mount = found
    where = f"runtime.volumeMounts[{i}] ({mount.get('mountPath')})"
    if mount.get("readOnly") is True:
        yield err(
            "spec.checkpoint.path",
            f"{ckpt.path} is on {where}, which is mounted readOnly: slime cannot save there",
            "mount that volume writable, or put checkpoints on a writable one",
        )
    elif _read_only_claim(exp, mount.get("name")):
        yield err(
            "spec.checkpoint.path",
            f"{ckpt.path} is on {where}, whose persistentVolumeClaim is readOnly: slime cannot "
            "save there",
            "drop persistentVolumeClaim.readOnly, or put checkpoints on a writable volume",
        )
    elif (source := _unshared_source(exp, mount.get("name"))) is not None:
        yield warn(
            "spec.checkpoint.path",
            f"{ckpt.path} is on {where}, {'an' if source[0] in 'eE' else 'a'} {source} "
            "volume, which each "
            f"{'node' if source == 'hostPath' else 'pod'} has its own: a retry (backoffLimit) "
            "or a resume runs on new pods that find no checkpoint and start over from the "
            "model, and on several nodes each keeps its own shards",
            "put checkpoints on a PersistentVolumeClaim every Ray pod mounts (ReadWriteMany)",
        )


# Volume sources that are not one directory for all pods of all attempts: `emptyDir` and a
# generic `ephemeral` volume live and die with the pod, a `hostPath` is per node.
_UNSHARED_SOURCES = ("emptyDir", "ephemeral", "hostPath")


def _unshared_source(exp: RLExperiment, name: Any) -> str | None:
    """The per-pod or per-node source of the volume `name`, None for any other."""
    for volume in exp.spec.runtime.volumes:
        if volume.get("name") == name:
            return next((s for s in _UNSHARED_SOURCES if s in volume), None)
    return None


def _read_only_claim(exp: RLExperiment, name: Any) -> bool:
    for volume in exp.spec.runtime.volumes:
        claim = volume.get("persistentVolumeClaim")
        if volume.get("name") == name and isinstance(claim, Mapping):
            return claim.get("readOnly") is True
    return False


RULES: tuple[Rule, ...] = (no_backsteps, files_on_volumes, checkpoint)
