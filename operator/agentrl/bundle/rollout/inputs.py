"""The rollout's inputs: its knobs, read from the runtime config and slime's args; eval rows
from JSONL.

The runtime config (written by the operator, mounted at `AGENTRL_CONFIG`) is the source
of truth for agent, concurrency and eval-set settings; slime's `args` supply only what
slime owns at run time (sampling flags it may have overridden through `extraArgs`).
Everything here is pure apart from reading two files, and it fails with the field and
the fix named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.api.constants import CONFIG_PATH, ENV_CONFIG_PATH
from agentrl.api.data_rows import TOOLS_KEY, tools_problem
from agentrl.api.models import EvalSet, RLExperimentSpec
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec


def load_runtime_config(env: Mapping[str, str] | None = None) -> RuntimeConfig:
    env = os.environ if env is None else env
    path = Path(env.get(ENV_CONFIG_PATH) or CONFIG_PATH)
    if not path.is_file():
        raise FileNotFoundError(
            f"agentrl runtime config not found at {path}; the operator mounts it there "
            f"(set {ENV_CONFIG_PATH} to its path when running outside the RayJob)"
        )
    return RuntimeConfig.load(path)


WANDB_CLOUD_UI = "https://wandb.ai"


def wandb_run_url(args: Any) -> str | None:
    """The W&B run slime logs this training to, as a browser opens it, or None.

    slime's driver sets `args.wandb_run_id` before it creates the RolloutManager (whose args
    these are); the entity comes from `--wandb-team` (spec.tracking.wandb.team), since W&B's
    default entity of an API key is not knowable here. A self-hosted `--wandb-host` serves its
    UI at the same address; W&B's cloud API host is not its UI, so the cloud UI is used then.
    """
    run_id, team = getattr(args, "wandb_run_id", None), getattr(args, "wandb_team", None)
    project = getattr(args, "wandb_project", None)
    if not (getattr(args, "use_wandb", False) and run_id and team and project):
        return None
    host = str(getattr(args, "wandb_host", None) or WANDB_CLOUD_UI).rstrip("/")
    if host in ("https://api.wandb.ai", "http://api.wandb.ai"):
        host = WANDB_CLOUD_UI
    return f"{host}/{team}/{project}/runs/{run_id}"


def agent_timeout_s(spec: RLExperimentSpec) -> float:
    agent = spec.agent
    backend = agent.agent_core or agent.http
    if backend is None:
        raise ValueError("spec.agent: set exactly one of agentCore or http")
    return float(backend.timeout_seconds)


def train_spec(spec: RLExperimentSpec, args: Any) -> EpisodeSpec:
    max_len = getattr(args, "rollout_max_response_len", None) or spec.grpo.max_response_length
    temperature = getattr(args, "rollout_temperature", None)
    params = {
        "temperature": spec.grpo.temperature if temperature is None else float(temperature),
        "top_p": float(getattr(args, "rollout_top_p", None) or 1.0),
        "max_new_tokens": int(max_len),
    }
    return EpisodeSpec(params, int(max_len), agent_timeout_s(spec), spec.agent.model_id)


def eval_spec(spec: RLExperimentSpec, eval_set: EvalSet) -> EpisodeSpec:
    max_len = eval_set.max_response_length or spec.grpo.max_response_length
    params = {"temperature": eval_set.temperature, "top_p": 1.0, "max_new_tokens": max_len}
    return EpisodeSpec(params, max_len, agent_timeout_s(spec), spec.agent.model_id)


def inputs_from_slime(
    groups: Sequence[Sequence[Any]], first_group: int = 0
) -> list[list[EpisodeInput]]:
    """slime's `data_source.get_samples()` groups on plain types; a sample without a
    `group_index` (slime always sets one) gets its group's position, from `first_group`."""
    out: list[list[EpisodeInput]] = []
    for g, group in enumerate(groups, start=first_group):
        row: list[EpisodeInput] = []
        for sample in group:
            metadata = getattr(sample, "metadata", None) or {}
            if not isinstance(metadata, Mapping):
                raise TypeError(
                    f"sample {getattr(sample, 'index', '?')}: metadata must be a JSON object "
                    f"(the agent payload), got {type(metadata).__name__}; check --metadata-key"
                )
            group_index = getattr(sample, "group_index", None)
            index = getattr(sample, "index", None)
            row.append(
                EpisodeInput(
                    prompt=getattr(sample, "prompt", ""),
                    metadata=metadata,
                    label=getattr(sample, "label", None),
                    group_index=g if group_index is None else int(group_index),
                    index=len(row) if index is None else int(index),
                    prompt_tokens=list(getattr(sample, "tokens", None) or ()),
                )
            )
        out.append(row)
    return out


def load_eval_groups(eval_set: EvalSet, where: str) -> list[list[EpisodeInput]]:
    """An eval set's JSONL rows, each repeated `samplesPerPrompt` times as one group."""
    if "://" in eval_set.path:
        raise ValueError(
            f"{where}.path: {eval_set.path!r} is a URI; the rollout reads eval sets from "
            "local files, so mount it (runtime.volumes) and give its path in the pod"
        )
    path = Path(eval_set.path)
    if not path.is_file():
        raise FileNotFoundError(f"{where}.path: {path} does not exist in the pod")
    return read_groups(path, eval_set.samples_per_prompt, f"{where}.path")


def read_groups(
    path: Path,
    samples_per_prompt: int,
    where: str,
    limit: int | None = None,
    *,
    as_train_set: bool = False,
) -> list[list[EpisodeInput]]:
    """The JSONL rows of `path` (the first `limit` of them), each repeated
    `samples_per_prompt` times as one group (`prompt`, `metadata`, `label`), a top-level
    `tools` list joining the metadata.

    `as_train_set` reads `spec.data.train` as slime's Dataset does with the flags agentrl
    renders (`--input-key prompt --metadata-key metadata`, no `--label-key`, `--tool-key`
    at its default): no label, and a top-level `tools` list joins the metadata. Every row
    is checked, past `limit` too: slime's Dataset reads the whole train set when the job
    starts, the rollout meets a bad row's metadata whichever step draws it, and it reads a
    whole eval set (this function, without a limit) at the first evaluation.
    """
    groups: list[list[EpisodeInput]] = []
    index = 0
    with path.open(encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, 1):
            full = limit is not None and len(groups) >= limit
            if not line.strip():
                continue
            row = _parse_row(line, f"{path}:{lineno}")
            metadata: dict[str, Any] = row.get("metadata") or {}
            metadata = _with_tools(row, metadata, f"{path}:{lineno}")
            label = None if as_train_set else row.get("label")
            if full:
                continue
            group = []
            for _ in range(samples_per_prompt):
                group.append(
                    EpisodeInput(
                        prompt=row.get("prompt", ""),
                        metadata=metadata,
                        label=label,
                        group_index=len(groups),
                        index=index,
                    )
                )
                index += 1
            groups.append(group)
    if not groups:
        raise ValueError(f"{where}: {path} holds no rows")
    return groups


def _with_tools(row: Mapping[str, Any], metadata: dict[str, Any], where: str) -> dict[str, Any]:
    """The metadata slime's Dataset gives a train row, and the rollout an eval row: its
    `tools` (a list, or a JSON string of one) as `metadata.tools`, over any the metadata has;
    slime stops the job at its first data load on any other `tools` (the rollout, the eval)."""
    if TOOLS_KEY not in row:
        return metadata
    problem, tools = tools_problem(row[TOOLS_KEY])
    if problem:
        raise ValueError(
            f"{where}: {problem}; a row's 'tools' joins its metadata, and slime's Dataset "
            "(--tool-key tools) fails the job on it when it loads the train set: give a list "
            "of tool schemas, or move it into 'metadata'"
        )
    return {**metadata, TOOLS_KEY: tools}


def _parse_row(line: str, where: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise ValueError(
            f'{where}: each line must be an object {{"prompt": .., "metadata": {{..}}}}'
        )
    if not isinstance(row.get("metadata", {}), dict):
        raise ValueError(f"{where}: 'metadata' must be an object (it is the agent's payload)")
    return row
