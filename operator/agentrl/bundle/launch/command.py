"""slime's argv and the files it reads, composed from the runtime config (pure logic).

The order is fixed: `python3 <slime>/train.py`, MODEL_ARGS (slime's model script), the
rendered flags, `--train-env-vars`, wandb flags (only when the API key env var is set),
then `runtime.extraArgs` last so a user can override anything. slime hands unknown flags
to Megatron with `ignore_unknown_args=True`, so a typo is silently dropped; every flag is
therefore checked against the option strings slime's own parser knows.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentrl.api.models import RLExperimentSpec
from agentrl.api.runtime import ENV_WANDB_API_KEY, RuntimeConfig

TRAIN_ENV_FLAG: Final = "--train-env-vars"
CUSTOM_CONFIG_FLAG: Final = "--custom-config-path"
EVAL_CONFIG_FLAG: Final = "--eval-config"
# Parsed by slime before its main parser (slime.utils.arguments._pre_parse_mode).
PRE_PARSED_FLAGS: Final = frozenset(
    {"--train-backend", "--debug-rollout-only", "--debug-train-only", "--load-debug-rollout-data"}
)
# A whole option name: argparse does not fold `_` into `-`, so `--save_interval` is not
# `--save-interval` (and must not be read as the known prefix `--save`).
_FLAG = re.compile(r"^--[A-Za-z][A-Za-z0-9_-]*")
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)
REDACTED: Final = "<redacted>"


@dataclass(frozen=True)
class Part:
    """A run of argv with where it came from, so an error can point at the right knob."""

    origin: str
    args: list[str]


def train_env_vars(pinned: Mapping[str, str]) -> dict[str, str]:
    """What the Megatron actors need: slime builds their runtime_env itself (actor_group.py),
    so neither the pod env nor the driver's env reaches them; only --train-env-vars does."""
    keys = ("CUDA_HOME", "LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS")
    return {k: pinned[k] for k in keys if pinned.get(k)}


def wandb_args(spec: RLExperimentSpec, env: Mapping[str, str], key_env: str | None) -> list[str]:
    """wandb flags, only when the key's env var holds a value (SlimeRunner does the same)."""
    wandb = spec.tracking.wandb
    if wandb is None or not env.get(key_env or ENV_WANDB_API_KEY):
        return []
    args = ["--use-wandb", "--wandb-project", wandb.project]
    if wandb.group:
        args += ["--wandb-group", wandb.group]
    if wandb.host:
        args += ["--wandb-host", wandb.host]
    return args


def compose(
    config: RuntimeConfig,
    model_args: Sequence[str],
    train_env: Mapping[str, str],
    wandb: Sequence[str],
) -> list[Part]:
    slime_dir = config.spec.runtime.slime_dir.rstrip("/")
    return [
        Part("launcher", ["python3", f"{slime_dir}/train.py"]),
        Part(f"{slime_dir}/scripts/models/{config.spec.model.type}.sh", list(model_args)),
        Part("the rendered spec (runtime config slime_args)", list(config.slime_args)),
        Part("launcher", [TRAIN_ENV_FLAG, json.dumps(dict(train_env), sort_keys=True)]),
        Part("spec.tracking.wandb", list(wandb)),
        Part("spec.runtime.extraArgs", list(config.spec.runtime.extra_args)),
    ]


def flatten(parts: Sequence[Part]) -> list[str]:
    return [a for p in parts for a in p.args]


def unknown_flags(parts: Sequence[Part], known: frozenset[str]) -> list[tuple[str, str]]:
    """(flag, origin) for every `--flag` slime's parser does not define."""
    allowed = known | PRE_PARSED_FLAGS
    bad: list[tuple[str, str]] = []
    for part in parts[1:]:  # python3 and train.py are not flags
        for arg in part.args:
            m = _FLAG.match(arg)
            if m and m.group(0) not in allowed and (m.group(0), part.origin) not in bad:
                bad.append((m.group(0), part.origin))
    return bad


def unknown_flags_message(bad: Sequence[tuple[str, str]], known: frozenset[str]) -> str:
    lines = []
    for flag, origin in bad:
        close = difflib.get_close_matches(flag, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"  {flag}{hint}  from {origin}")
    return (
        "slime's parser does not know these flags, and slime would ignore them silently:\n"
        + "\n".join(lines)
        + "\nRemove or correct them (spec.runtime.extraArgs is the usual source)."
    )


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value after the last `flag` (or `flag=value`) in `args`."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def custom_config(config: RuntimeConfig, config_path: str) -> dict[str, Any]:
    """The --custom-config-path YAML: slime setattrs each key onto `args`.

    agentrl's toolkit knobs stay in the RuntimeConfig (typed, validated, one source of
    truth); the YAML only points the rollout code at it and labels slime's logged args.
    """
    return {
        "agentrl_config_path": config_path,
        "agentrl_experiment": f"{config.namespace}/{config.experiment}",
        "agentrl_bundle_version": config.bundle_version,
    }


def eval_config(spec: RLExperimentSpec) -> dict[str, Any]:
    """slime's --eval-config document: one entry per eval set with its own overrides.

    slime builds each entry as `EvalDatasetConfig(**entry)`, so a key its version lacks is a
    TypeError after the GPUs are allocated. The row keys are left out on purpose: slime
    renamed `prompt_key` to `input_key`, and fills both from `--input-key`/`--metadata-key`.
    Only fields every release has are written.
    """
    datasets = []
    for s in spec.data.eval:
        entry: dict[str, Any] = {
            "name": s.name,
            "path": s.path,
            "n_samples_per_eval_prompt": s.samples_per_prompt,
            "temperature": s.temperature,
        }
        if s.max_response_length:
            entry["max_response_len"] = s.max_response_length
        datasets.append(entry)
    return {"eval": {"datasets": datasets}}


def redact(env: Mapping[str, str], secret_names: Sequence[str]) -> dict[str, str]:
    """Env for printing: values of secret-bearing variables replaced."""
    names = set(secret_names)
    return {
        k: (REDACTED if k in names or _SECRET_NAME.search(k) else v) for k, v in sorted(env.items())
    }
