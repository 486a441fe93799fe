"""Checks that fail in seconds what slime would otherwise fail after the cluster is up.

Each check returns problems (never raises), so one run reports everything at once. Paths
are read relative to an injected filesystem root so tests run on temporary trees.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

from agentrl.api.constants import DRIVER_RAY_RESOURCE
from agentrl.api.data_rows import PREFLIGHT_ROWS, ROW_SHAPE, first_row_problems
from agentrl.api.model_context import context_length_of
from agentrl.api.models import RLExperimentSpec
from agentrl.api.paths import TRAINER_WEIGHTS_FIX, trainer_weights_problem
from agentrl.api.rules import is_local_path
from agentrl.api.slime_flags import (
    SAVE_INTERVAL_FIX,
    SAVE_INTERVAL_FLAG,
    SAVE_INTERVAL_WITHOUT_PATH,
    last_index,
)
from agentrl.slimecmd import CheckpointDir
from agentrl.slimecmd.checkpoint import TRACKER


def _host(root: Path, path: str) -> Path:
    return root / path.lstrip("/") if path.startswith("/") else root / path


def check_model(root: Path, spec: RLExperimentSpec) -> list[str]:
    """spec.model.path: an HF checkpoint directory (SGLang loads it), unless it is a Hugging
    Face id; the trainer's weights (refLoad, else path): a directory slime's loader takes."""
    model, problems = spec.model, []
    if is_local_path(model.path):
        if not model.path.startswith("/"):
            problems.append(f"spec.model.path: {model.path!r} is not an absolute path")
        elif not (_host(root, model.path) / "config.json").is_file():
            problems.append(
                f"spec.model.path: {model.path} has no config.json; mount the HF checkpoint "
                "there (spec.runtime.volumes/volumeMounts)"
            )
    if model.ref_load is None:
        if not is_local_path(model.path):
            problems.append(
                f"spec.model.path: {model.path!r} is a Hugging Face id and no refLoad is set: "
                "slime loads the trainer's weights (--ref-load) from a directory in the pods; "
                "mount the checkpoint and set spec.model.refLoad"
            )
        return problems
    ref = model.ref_load
    if ref == model.path:  # one directory, already judged above
        return problems
    if not ref.startswith("/"):
        problems.append(f"spec.model.refLoad: {ref!r} is not a directory path inside the pods")
    elif not _loadable(_host(root, ref)):
        problems.append(
            f"spec.model.refLoad: {ref} is neither an HF checkpoint (config.json) nor a "
            "Megatron one (latest_checkpointed_iteration.txt, or an iter_NNNNNNN directory); "
            "mount the checkpoint there (spec.runtime.volumes/volumeMounts)"
        )
    return problems


# SGLang's switch for a context above the checkpoint's (an EnvBool: true/1/yes/y).
ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def check_context_length(root: Path, spec: RLExperimentSpec, env: Mapping[str, str]) -> list[str]:
    """spec.model.contextLength above the context the checkpoint's config.json gives: SGLang
    refuses to start its engines (`ModelConfig` raises, at 0.5.13 and 0.5.15.post1) unless
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set, once the GPUs are up and slime's
    rollout manager launches them; said here, in seconds, with the number that fits."""
    model = spec.model
    asked = model.context_length
    if asked is None or not is_local_path(model.path) or not model.path.startswith("/"):
        return []
    if env.get(ALLOW_LONGER_CONTEXT_ENV, "").strip().lower() in ("1", "true", "yes", "y"):
        return []
    config = _host(root, model.path) / "config.json"
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # check_model says what is missing; SGLang judges an unreadable one
    derived = context_length_of(doc) if isinstance(doc, dict) else None
    if derived is None or asked <= derived:
        return []
    return [
        f"spec.model.contextLength: {asked} is more than the {derived} tokens SGLang derives "
        f"from {model.path}/config.json, and SGLang refuses to start its engines with a "
        f"longer context: set it to {derived} or less (or leave it unset), or set "
        f"{ALLOW_LONGER_CONTEXT_ENV}=1 in spec.runtime.env if the model really takes more"
    ]


def _megatron(path: Path) -> bool:
    """A directory slime's loader reads as a Megatron checkpoint (else as HF weights)."""
    return (path / TRACKER).is_file() or (
        path.is_dir() and re.fullmatch(r"iter_\d{7}", path.name) is not None
    )


def _loadable(path: Path) -> bool:
    """What slime's checkpoint loader accepts for --ref-load: Megatron, else HF weights."""
    return _megatron(path) or (path / "config.json").is_file()


def hf_weights(root: Path, spec: RLExperimentSpec) -> str | None:
    """The trainer's weights when they are a local Hugging Face checkpoint, else None."""
    weights = spec.model.ref_load or spec.model.path
    host = _host(root, weights)
    if is_local_path(weights) and (host / "config.json").is_file() and not _megatron(host):
        return weights
    return None


def unloadable_hf_weights(root: Path, spec: RLExperimentSpec, weights: str) -> list[str]:
    """The problem when the image's slime has no loader for these HF weights' model type."""
    try:
        config = json.loads((_host(root, weights) / "config.json").read_text(encoding="utf-8"))
        model_type = config.get("model_type") if isinstance(config, dict) else None
    except (OSError, ValueError):
        model_type = None
    field = "spec.model.refLoad" if spec.model.ref_load else "spec.model.path"
    return [
        f"{field}: {weights} holds Hugging Face weights of model_type {model_type!r}, which "
        "the image's slime cannot load (without Megatron-Bridge it loads HF weights per "
        "model type): convert them to a Megatron checkpoint (slime's "
        "tools/convert_hf_to_torch_dist.py) and point spec.model.refLoad at it"
    ]


def check_weights_for_mode(root: Path, spec: RLExperimentSpec, hf_mode: str | None) -> list[str]:
    """slime releases with --megatron-to-hf-mode load Hugging Face weights only in bridge
    mode (an assertion in their checkpoint loader, after the GPUs are up); `hf_mode` is the
    value the argv leaves it at (None where the image's slime has no such flag)."""
    weights = spec.model.ref_load or spec.model.path
    if hf_mode != "raw" or not is_local_path(weights) or _megatron(_host(root, weights)):
        return []
    field = "spec.model.refLoad" if spec.model.ref_load else "spec.model.path"
    return [
        f"{field}: {weights} holds Hugging Face weights, which slime loads only with "
        "--megatron-to-hf-mode bridge, but spec.runtime.extraArgs passes "
        "--megatron-to-hf-mode raw: drop that override or point spec.model.refLoad at a "
        "Megatron checkpoint"
    ]


def model_warnings(spec: RLExperimentSpec) -> list[str]:
    if is_local_path(spec.model.path):
        return []
    return [
        f"spec.model.path is the Hugging Face id {spec.model.path!r}: SGLang and the gateway "
        "download it in every pod at start (hub access and disk; HF_TOKEN for gated models)"
    ]


def check_jsonl(root: Path, field: str, path: str, rows: int | None = PREFLIGHT_ROWS) -> list[str]:
    """The first `rows` rows (every row when None) parse and each has `prompt` and a
    `metadata` object; at most `PREFLIGHT_ROWS` bad rows are named, then their count."""
    host = _host(root, path)
    try:
        with host.open(encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        return [f"{field}: cannot read {path}: {e.strerror}; check the volume mount and path"]
    if not any(line.strip() for line in lines):
        return [f"{field}: {path} is empty"]
    bad = first_row_problems(lines, rows)
    named = [f"{field}: {path} line {n}: {problem}; {ROW_SHAPE}" for n, problem in bad]
    if len(named) > PREFLIGHT_ROWS:
        more = len(named) - PREFLIGHT_ROWS
        named = [*named[:PREFLIGHT_ROWS], f"{field}: {path}: {more} more bad row(s)"]
    return named


def check_data(root: Path, spec: RLExperimentSpec) -> list[str]:
    """The train file's first rows (slime's Dataset reads it whole when it starts, and stops
    on a bad row there) and every row of each eval file: the rollout reads an eval set whole
    at the first eval (before training, or `evalInterval` rollouts in with slime's
    --skip-eval-before-train), and a bad row there ends the run."""
    problems = check_jsonl(root, "spec.data.train", spec.data.train)
    for i, s in enumerate(spec.data.eval):
        problems += check_jsonl(root, f"spec.data.eval[{i}].path", s.path, rows=None)
    return problems


def check_gpus(spec: RLExperimentSpec, visible: int | None) -> list[str]:
    """Visible GPUs in the driver's pod, a GPU worker (None when nvidia-smi is absent)."""
    want = spec.resources.gpus_per_node
    if visible is None or visible == want:
        return []
    return [
        f"spec.resources.gpusPerNode is {want} but this node sees {visible} GPUs; match it to the "
        "node type (or the gpu resource limit)"
    ]


def check_driver_device(
    devices: int | None, visible_gpus: int | None, env: Mapping[str, str], error: str | None
) -> list[str]:
    """slime's driver sees a CUDA device: its parse_args runs Megatron's validate_args, which
    reads the GPU's architecture under tensor or context parallelism (and its capability for
    grouped-GEMM MoE), so without one slime dies there, after the whole gang is up.

    `devices` is torch's count in the driver's env (None: not counted), `visible_gpus` what
    nvidia-smi lists in this pod (None: no nvidia-smi or no driver)."""
    if devices is None or devices > 0:
        return []
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        why = (
            "CUDA_VISIBLE_DEVICES is empty: Ray hid this pod's GPUs from the job's zero-GPU "
            "driver (the RayJob's runtimeEnvYAML must set "
            "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: '1')"
        )
    elif not visible_gpus:
        why = (
            "this pod has no GPU: Ray ran the driver on the CPU head (the RayJob's "
            f'entrypointResources must ask for {{"{DRIVER_RAY_RESOURCE}": 1}}, which only '
            "the GPU workers advertise in rayStartParams.resources)"
        )
    else:
        why = f"torch cannot use the {visible_gpus} GPUs nvidia-smi lists ({error or 'no error'})"
    return [
        f"slime's driver sees no CUDA device: {why}. slime's parse_args runs Megatron's "
        "validate_args, which reads the GPU architecture, so slime would stop there. The "
        "RayJob agentrl renders places the driver on a GPU worker; re-apply the RayJob the "
        "operator renders (`agentrl render`) instead of an edited or older one"
    ]


def check_checkpoint(root: Path, spec: RLExperimentSpec) -> list[str]:
    """spec.checkpoint.path can be created and written (slime finds out only at the first
    save), and is not the trainer's starting weights."""
    path = spec.checkpoint.path
    if not path:
        i = last_index(spec.runtime.extra_args, SAVE_INTERVAL_FLAG)
        if i is None:
            return []
        return [f"spec.runtime.extraArgs[{i}]: {SAVE_INTERVAL_WITHOUT_PATH}; {SAVE_INTERVAL_FIX}"]
    if (problem := trainer_weights_problem(spec)) is not None:
        return [f"spec.checkpoint.path: {problem}; {TRAINER_WEIGHTS_FIX}"]
    host = _host(root, path)
    probe = host / f".agentrl-write-test-{uuid.uuid4().hex}"
    try:
        host.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return [
            f"spec.checkpoint.path: {path} is not writable ({e.strerror}); mount a writable "
            f"shared volume there (uid {os.getuid()})"
        ]
    return []


def read_checkpoint(root: Path, spec: RLExperimentSpec) -> tuple[CheckpointDir | None, list[str]]:
    """What spec.checkpoint.path holds now: the tracker's text and the entry names."""
    path = spec.checkpoint.path
    if not path:
        return None, []
    host = _host(root, path)
    try:
        entries = tuple(sorted(p.name for p in host.iterdir())) if host.is_dir() else ()
        tracker = host / TRACKER
        text = tracker.read_text(encoding="utf-8") if tracker.is_file() else None
    except OSError as e:
        return None, [f"spec.checkpoint.path: cannot read {path} ({e.strerror})"]
    return CheckpointDir(tracker=text, entries=entries), []


def run_all(root: Path, spec: RLExperimentSpec, visible_gpus: int | None) -> list[str]:
    return [
        *check_model(root, spec),
        *check_data(root, spec),
        *check_gpus(spec, visible_gpus),
        *check_checkpoint(root, spec),
    ]
