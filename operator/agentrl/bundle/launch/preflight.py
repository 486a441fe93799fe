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
from typing import Any

from agentrl.api.constants import DRIVER_RAY_RESOURCE
from agentrl.api.data_rows import ENCODING, ERRORS, judge_rows
from agentrl.api.model_context import longer_context_problem
from agentrl.api.model_names import DEFAULT_FAMILY
from agentrl.api.models import RLExperimentSpec
from agentrl.api.paths import TRAINER_WEIGHTS_FIX, trainer_weights_problem
from agentrl.api.prompt_lengths import (
    ALL_DROPPED_FIX,
    Count,
    judge_prompts,
    listed_rows,
    not_text_problem,
)
from agentrl.api.rules import is_local_path
from agentrl.api.slime_flags import (
    SAVE_INTERVAL_FIX,
    SAVE_INTERVAL_FLAG,
    SAVE_INTERVAL_WITHOUT_PATH,
    last_index,
    prompt_limit,
)
from agentrl.api.tokenizer_files import VOCABULARY_NAMES, has_vocabulary
from agentrl.slimecmd import CheckpointDir
from agentrl.slimecmd.checkpoint import RUN_MARK, TRACKER, RunMark


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
        elif not has_vocabulary(p.name for p in _host(root, model.path).iterdir() if p.is_file()):
            problems.append(
                f"spec.model.path: {model.path} holds no tokenizer vocabulary (no "
                f"{VOCABULARY_NAMES} file): the "
                "SGLang engines, slime's data source and the gateway load the tokenizer from "
                "this directory, and fail (or, with transformers 5, tokenize to nothing) once "
                "the engines are up; copy the checkpoint's tokenizer files (tokenizer.json, "
                "tokenizer_config.json, ...) next to its config.json"
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


def check_context_length(root: Path, spec: RLExperimentSpec, env: Mapping[str, str]) -> list[str]:
    """spec.model.contextLength above the context the checkpoint's config.json gives: SGLang
    refuses to start its engines unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set,
    once the GPUs are up and slime's rollout manager launches them; said here, in seconds,
    with the number that fits (`longer_context_problem`)."""
    model = spec.model
    if model.context_length is None or not is_local_path(model.path):
        return []
    if not model.path.startswith("/"):
        return []
    config = _host(root, model.path) / "config.json"
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # check_model says what is missing; SGLang judges an unreadable one
    where = f"{model.path}/config.json"
    problem = longer_context_problem(model.context_length, doc, where, env)
    return [] if problem is None else [problem]


# Where transformers' tokenizer finds a chat template in a checkpoint directory: the
# `chat_template` of tokenizer_config.json, or (newer releases) chat_template.jinja and the
# named templates under additional_chat_templates/ (transformers' CHAT_TEMPLATE_FILE and
# CHAT_TEMPLATE_DIR).
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"


def _has_chat_template(directory: Path) -> bool:
    try:
        doc = json.loads((directory / TOKENIZER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and doc.get("chat_template"):
        return True
    named = directory / CHAT_TEMPLATE_DIR
    return (directory / CHAT_TEMPLATE_FILE).is_file() or (
        named.is_dir() and any(named.glob("*.jinja"))
    )


def check_chat_template(root: Path, spec: RLExperimentSpec) -> list[str]:
    """rendererFamily default renders every prompt with the checkpoint's own chat template
    (transformers applies it in the gateway), and the gateway refuses to start without one.
    It starts at the first rollout, after the engines are up and the trainer has loaded its
    weights; said here, in seconds."""
    model = spec.model
    if model.renderer_family != DEFAULT_FAMILY or not is_local_path(model.path):
        return []
    directory = _host(root, model.path)
    if not model.path.startswith("/") or not directory.is_dir() or _has_chat_template(directory):
        return []  # check_model says what is wrong with the path itself
    return [
        f"spec.model.rendererFamily: default renders prompts with the chat template of "
        f"{model.path}, which has none (no `chat_template` in its {TOKENIZER_CONFIG}, no "
        f"{CHAT_TEMPLATE_FILE}, no {CHAT_TEMPLATE_DIR}/), so the gateway would refuse to "
        "start at the first rollout, after the engines and the trainer are up: use a copy of "
        "the checkpoint that ships its tokenizer files with the template, or set "
        "spec.model.rendererFamily to the model's family (docs/api.md)"
    ]


# huggingface_hub's switch that keeps a process off the hub (HF_HUB_OFFLINE, else the
# older TRANSFORMERS_OFFLINE when the first is unset or empty; "1", "ON", "YES" or "TRUE" in
# any case), and where it then looks for a model: its cache directory. Both are read by
# huggingface_hub.constants (the same from v1.9.2 to 2.4.0):
# https://github.com/huggingface/huggingface_hub/blob/29920ab1dd0447e4dd4823f7fb2a5c4f601743c1/src/huggingface_hub/constants.py#L133-L167
HUB_OFFLINE_ENVS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_HUB_TRUE = ("1", "ON", "YES", "TRUE")


def hub_offline(env: Mapping[str, str]) -> str | None:
    """The variable that keeps huggingface_hub off the hub in `env`, or None."""
    name = next((v for v in HUB_OFFLINE_ENVS if env.get(v)), None)
    return name if name is not None and env[name].upper() in _HUB_TRUE else None


def hub_cache(env: Mapping[str, str]) -> str:
    """The hub cache huggingface_hub reads in a process with `env`: HF_HUB_CACHE, else the
    legacy HUGGINGFACE_HUB_CACHE, else <HF_HOME>/hub, HF_HOME defaulting to
    <XDG_CACHE_HOME or ~/.cache>/huggingface."""
    home = env.get("HOME", "/root")
    hf_home = env.get("HF_HOME") or f"{env.get('XDG_CACHE_HOME') or home + '/.cache'}/huggingface"
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or f"{hf_home}/hub"
    return home + cache[1:] if cache.startswith("~") else cache


def check_offline_hub(root: Path, spec: RLExperimentSpec, env: Mapping[str, str]) -> list[str]:
    """spec.model.path a Hugging Face id in pods kept off the hub: huggingface_hub resolves
    it from its cache only (refs/main names the snapshot), so without that snapshot SGLang's
    engines and the gateway fail to load the model once the gang is up."""
    path = spec.model.path
    switch = hub_offline(env)
    if is_local_path(path) or switch is None:
        return []
    cache = hub_cache(env)
    repo = _host(root, cache) / f"models--{path.replace('/', '--')}"
    try:
        commit = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        commit = ""
    if commit and (repo / "snapshots" / commit / "config.json").is_file():
        return []
    return [
        f"spec.model.path: {path!r} is a Hugging Face id, and {switch}={env[switch]} keeps "
        f"the pods off the hub, but the hub cache {cache} holds no snapshot of it (refs/main "
        "and the config.json of the snapshot it names): SGLang's engines and the gateway "
        "would fail to load it once the gang is up; mount the checkpoint and set "
        f"spec.model.path to its directory, or pre-fill {cache} on a volume, or unset {switch}"
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


def check_jsonl(
    root: Path, field: str, path: str, prompts: list[tuple[int, Any]] | None = None
) -> list[str]:
    """Every row parses and has `prompt`, a `metadata` object and, if any, a `tools` list
    (`agentrl.api.data_rows`): slime's Dataset reads the whole train file when its
    RolloutManager starts, and the rollout reads the whole eval file at the eval. `prompts`
    receives (line, prompt) of its rows in the same pass (`check_prompt_lengths`)."""
    try:
        with _host(root, path).open(encoding=ENCODING, errors=ERRORS) as f:
            report = judge_rows(f, prompts)
    except OSError as e:
        return [f"{field}: cannot read {path}: {e.strerror}; check the volume mount and path"]
    if not report.rows:
        return [f"{field}: {path} is empty"]
    return report.problems(f"{field}: {path}")


def slime_prompt_lengths(root: Path, model_path: str) -> Count:
    """Token counts of prompts as slime's Dataset counts them: the checkpoint's tokenizer
    through transformers' AutoTokenizer (slime's `load_tokenizer`), no special tokens."""
    from transformers import AutoTokenizer

    where = str(_host(root, model_path)) if is_local_path(model_path) else model_path
    tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=True)

    def lengths(prompts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]

    return lengths


def check_prompt_lengths(
    spec: RLExperimentSpec, prompts: list[tuple[int, Any]], lengths: Count
) -> tuple[list[str], list[str]]:
    """(problems, warnings): the train rows slime's Dataset drops for a prompt longer than
    extraArgs' `--rollout-max-prompt-len` (`prompt_limit`), judged by `judge_prompts` on
    the (line, prompt) of spec.data.train's rows (`check_data` reads them). slime drops them
    when the job starts and logs a count at info level only: the run trains on fewer rows
    than the file holds. Every row dropped is refused (nothing left to train on), and so is
    a prompt slime's tokenizer cannot count (the job would stop on it)."""
    limit = prompt_limit(spec.runtime.extra_args)
    if limit is None:
        return [], []
    most, flag = limit
    path = spec.data.train
    where = f"spec.runtime.extraArgs: {flag}"
    numbers = [n for n, _ in prompts]
    try:
        verdict = judge_prompts([p for _, p in prompts], most, lengths)
    except Exception as exc:  # the tokenizer: slime's fails the same way
        return [], [f"{where}: the prompts of {path} could not be counted as slime's Dataset "
                     f"counts them ({type(exc).__name__}: {str(exc)[:200]})"]  # fmt: skip
    if verdict is None:
        return [], []  # slime filters nothing when the first prompt is not text
    if verdict.not_text:
        return [not_text_problem(path, numbers, verdict.not_text, flag)], []
    if not verdict.long:
        return [], []
    long = len(verdict.long)
    said = (
        f"{where}: slime's Dataset drops the rows of spec.data.train ({path}) whose prompt is "
        f"longer than {most} tokens (the text as it is, without the chat template), at lines "
        f"{listed_rows(numbers, ((i, f'{k} tokens') for i, k in verdict.long))}"
    )
    if verdict.all_dropped:
        return [f"{said}: that is every row, nothing is left to train on; {ALL_DROPPED_FIX}"], []
    return [], [
        f"{said}: {long} of {verdict.rows} rows; the run trains on the other "
        f"{verdict.rows - long} (a rehearsal leaves them out too); shorten those prompts, or "
        "raise or remove the flag to train on them"
    ]


def check_data(
    root: Path, spec: RLExperimentSpec, train_prompts: list[tuple[int, Any]] | None = None
) -> list[str]:
    """The train and eval files' rows; `train_prompts` receives the train rows' prompts."""
    problems = check_jsonl(root, "spec.data.train", spec.data.train, train_prompts)
    for i, s in enumerate(spec.data.eval):
        problems += check_jsonl(root, f"spec.data.eval[{i}].path", s.path)
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
        mtime = tracker.stat().st_mtime_ns if text is not None else None
        mark_file = host / RUN_MARK
        mark = RunMark.from_json(mark_file.read_text()) if mark_file.is_file() else None
    except OSError as e:
        return None, [f"spec.checkpoint.path: cannot read {path} ({e.strerror})"]
    return CheckpointDir(text, entries, tracker_mtime_ns=mtime, mark=mark), []


def write_run_mark(root: Path, spec: RLExperimentSpec, mark: RunMark) -> None:
    """`RUN_MARK` into spec.checkpoint.path (OSError when it cannot be written): with
    `checkpoint.resume: false`, what lets a retry of this experiment resume its own saves."""
    assert spec.checkpoint.path
    target = _host(root, spec.checkpoint.path) / RUN_MARK
    partial = target.with_name(f".{RUN_MARK}.{uuid.uuid4().hex}")
    partial.write_text(mark.to_json(), encoding="utf-8")
    partial.replace(target)  # whole or not at all


def run_all(
    root: Path,
    spec: RLExperimentSpec,
    visible_gpus: int | None,
    train_prompts: list[tuple[int, Any]] | None = None,
) -> list[str]:
    return [
        *check_model(root, spec),
        *check_chat_template(root, spec),
        *check_data(root, spec, train_prompts),
        *check_gpus(spec, visible_gpus),
        *check_checkpoint(root, spec),
    ]
