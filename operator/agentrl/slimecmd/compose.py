"""slime's whole command line, in one function for the preview and for the pod (pure).

`compose(spec, facts)` returns the argv as parts, each with where it came from. `facts` holds
what only the pod knows; each fact left unknown (None) becomes a placeholder or a part
marked with the pod-time condition under which it is passed, which is what `agentrl render
--show-command` prints. The launcher fills every fact in, so its argv has no placeholder
and no condition; both come from this one function, so they cannot disagree.

The order is fixed: `python3 <slime>/train.py`, MODEL_ARGS (slime's model script), the
spec's flags (with the image- and checkpoint-dependent ones in place), `--train-env-vars`,
wandb flags, then `runtime.extraArgs` last so a user can override anything (argparse keeps
the last value); only a restart's `--load` of the run's own saves follows an extraArgs
`--load` of another directory, which starts the first run alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from agentrl.api.models import RLExperimentSpec
from agentrl.api.runtime import ENV_WANDB_API_KEY, RuntimeConfig
from agentrl.api.slime_flags import EXTRA_ARGS_ORIGIN, restart_load, user_decides_start
from agentrl.slimecmd import checkpoint, files, flags
from agentrl.slimecmd.checkpoint import Start

# Only the pinned env reaches slime's Megatron actors: slime builds their Ray runtime_env
# itself, so neither the pod env nor the driver's env does; --train-env-vars does.
TRAIN_ENV_KEYS: Final = (
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "PATH",
    "PYTHONPATH",
    "CUDA_DEVICE_MAX_CONNECTIONS",
)
TRAIN_ENV_FLAG: Final = "--train-env-vars"
# slime has converted Megatron weights for SGLang through Megatron-Bridge behind this flag;
# releases without it convert natively and take no flag for it.
HF_MODE_FLAG: Final = "--megatron-to-hf-mode"
HF_MODE: Final = "bridge"
# Where the user's own flags come from (last, so they override; and named in messages).


class Cond(StrEnum):
    """A pod-time fact a preview part depends on."""

    HF_MODE_FLAG = "hf-mode-flag"
    RESTART = "restart"
    FIRST_RUN = "first-run"
    WANDB_KEY = "wandb-key"


@dataclass(frozen=True)
class Part:
    """A run of argv and where it came from, so an error can point at the right knob."""

    origin: str
    args: tuple[str, ...]
    cond: Cond | None = None
    """Preview only: these args are passed only when `cond` holds in the pod."""
    marker: str = ""
    """Preview only: how `cond` reads in the printed command."""
    placeholder: bool = False
    """Preview only: `args` stand for values only the pod knows."""


@dataclass(frozen=True)
class PodFacts:
    """What the launcher learns in the pod; None leaves a placeholder or a condition."""

    model_args: Sequence[str] | None = None
    train_env: Mapping[str, str] | None = None
    wandb_key: bool | None = None
    start: Start | None = None
    hf_mode_flag: bool | None = None
    """Whether the image's slime defines --megatron-to-hf-mode."""
    files_dir: str = files.FILES_DIR
    experiment: str | None = None
    """`<namespace>/<name>` of the experiment (the W&B run's name and group)."""


@dataclass(frozen=True)
class Command:
    parts: tuple[Part, ...]
    custom_config_path: str
    eval_config_path: str | None

    @property
    def resolved(self) -> bool:
        return all(p.cond is None and not p.placeholder for p in self.parts)

    def argv(self) -> list[str]:
        """The argv; a preview's conditional parts are led by their `<...:>` marker."""
        out: list[str] = []
        for part in self.parts:
            if part.cond is not None:
                out.append(f"<{part.marker}:>")
            out += part.args
        return out


def train_env_vars(pinned: Mapping[str, str]) -> dict[str, str]:
    """The part of the pinned env the Megatron actors get."""
    return {k: pinned[k] for k in TRAIN_ENV_KEYS if pinned.get(k)}


EXPERIMENT_PLACEHOLDER: Final = "<namespace>/<name>"


def wandb_run_name(namespace: str, name: str) -> str:
    """The W&B run name and group of an experiment."""
    return f"{namespace}/{name}"


def wandb_args(spec: RLExperimentSpec, experiment: str | None) -> list[str]:
    """slime's W&B flags. slime names a run after its W&B group, and adds a random suffix to
    both unless told not to (`init_wandb_primary` in slime/utils/wandb_utils.py at fa3c990,
    slime/observability/wandb_utils.py at 624b824); it also needs a group, or it fails
    concatenating None. So the group is `spec.tracking.wandb.group`, else the experiment's
    `<namespace>/<name>`, with the suffix off: every attempt (each backoffLimit retry, each
    resume) logs a run of that name into that one group."""
    wandb = spec.tracking.wandb
    if wandb is None:
        return []
    group = wandb.group or experiment or EXPERIMENT_PLACEHOLDER
    args = ["--use-wandb", "--wandb-project", wandb.project, "--wandb-group", group,
            "--disable-wandb-random-suffix"]  # fmt: skip
    if wandb.team:
        args += ["--wandb-team", wandb.team]
    if wandb.host:
        args += ["--wandb-host", wandb.host]
    return args


def _switch(
    origin: str, args: Sequence[str], known: bool | None, cond: Cond, marker: str
) -> list[Part]:
    """A part passed when a pod fact holds: as is, left out, or conditional in a preview."""
    if not args or known is False:
        return []
    if known is None:
        return [Part(origin, tuple(args), cond, marker)]
    return [Part(origin, tuple(args))]


_START_ORIGIN: Final = "spec.checkpoint (judged at pod start)"


def _restart_marker(spec: RLExperimentSpec) -> str:
    path = spec.checkpoint.path
    tracker = f"{path.rstrip('/') if path else ''}/{checkpoint.TRACKER}"
    if not spec.checkpoint.resume:
        return f"restart, only when {tracker} names a save of this experiment (a retry's)"
    return f"restart, only when {tracker} exists"


def _start_parts(spec: RLExperimentSpec, start: Start | None) -> list[Part]:
    if user_decides_start(spec.runtime.extra_args):
        return []  # extraArgs set --load or --finetune themselves (see _restart_after_extra)
    ckpt = spec.checkpoint
    if start is None and not ckpt.path:
        start = Start.FIRST_RUN  # nothing to resume from: known without the pod
    if start is not None:
        return [Part(_START_ORIGIN, tuple(checkpoint.start_args(spec, start)))]
    return [
        Part(
            _START_ORIGIN,
            tuple(checkpoint.start_args(spec, Start.RESUME)),
            Cond.RESTART,
            _restart_marker(spec),
        ),
        Part(
            _START_ORIGIN,
            tuple(checkpoint.start_args(spec, Start.FIRST_RUN)),
            Cond.FIRST_RUN,
            "first run, otherwise",
        ),
    ]


def _restart_after_extra(spec: RLExperimentSpec, start: Start | None) -> list[Part]:
    """A restart loads the run's own saves even when extraArgs `--load` another directory
    (where the first run started): argparse keeps the last `--load`, so this part follows
    extraArgs (with `checkpoint.resume: false` too, a retry's own saves), not under
    `--finetune`."""
    ckpt = spec.checkpoint
    if not restart_load(spec.runtime.extra_args, ckpt.path):
        return []
    args = tuple(checkpoint.start_args(spec, Start.RESUME))
    origin = f"{_START_ORIGIN}: the run's own saves, over the --load of {EXTRA_ARGS_ORIGIN}"
    return _switch(origin, args, None if start is None else start is Start.RESUME,
                   Cond.RESTART, _restart_marker(spec))  # fmt: skip


def compose(spec: RLExperimentSpec, facts: PodFacts) -> Command:
    slime_dir = spec.runtime.slime_dir.rstrip("/")
    script = f"{slime_dir}/scripts/models/{spec.model.type}.sh"
    custom_path = f"{facts.files_dir}/{files.CUSTOM_CONFIG_NAME}"
    eval_path = f"{facts.files_dir}/{files.EVAL_CONFIG_NAME}"
    uses_eval_config = bool(spec.data.eval) and flags.eval_sets_differ(spec.data.eval)
    the_spec = "the spec"

    if facts.model_args is None:
        model = Part(script, (f"<MODEL_ARGS from {script}>",), placeholder=True)
    else:
        model = Part(script, tuple(facts.model_args))
    if facts.train_env is None:
        keys = ", ".join(TRAIN_ENV_KEYS)
        train_env = Part("launcher", (TRAIN_ENV_FLAG, f"<JSON: {keys}>"), placeholder=True)
    else:
        pinned = json.dumps(dict(facts.train_env), sort_keys=True)
        train_env = Part("launcher", (TRAIN_ENV_FLAG, pinned))

    parts = [
        Part("launcher", ("python3", f"{slime_dir}/train.py")),
        model,
        Part(the_spec, tuple(flags.cluster_args(spec) + flags.model_args(spec))),
        *_switch(
            f"the image's slime (it defines {HF_MODE_FLAG})",
            [HF_MODE_FLAG, HF_MODE],
            facts.hf_mode_flag,
            Cond.HF_MODE_FLAG,
            f"only when the image's slime defines {HF_MODE_FLAG}",
        ),
        Part(the_spec, tuple(flags.save_args(spec))),
        *_start_parts(spec, facts.start),
        Part(
            the_spec,
            tuple(
                flags.sglang_model_args(spec)
                + flags.data_args(spec)
                + flags.algorithm_args(spec)
                + flags.eval_args(spec, eval_path)
                + flags.hook_args(custom_path)
            ),
        ),
        train_env,
        *_switch(
            "spec.tracking.wandb",
            wandb_args(spec, facts.experiment),
            facts.wandb_key,
            Cond.WANDB_KEY,
            f"only when {ENV_WANDB_API_KEY} is set",
        ),
        Part(EXTRA_ARGS_ORIGIN, tuple(spec.runtime.extra_args)),
        *_restart_after_extra(spec, facts.start),
    ]
    return Command(
        parts=tuple(p for p in parts if p.args),
        custom_config_path=custom_path,
        eval_config_path=eval_path if uses_eval_config else None,
    )


def preview(spec: RLExperimentSpec, experiment: str | None = None) -> list[str]:
    """The command as `agentrl render --show-command` prints it: pod facts as conditions.
    `experiment`: `<namespace>/<name>` (None: shown as a placeholder)."""
    return compose(spec, PodFacts(experiment=experiment)).argv()


def file_docs(
    config: RuntimeConfig, command: Command, config_path: str
) -> dict[str, dict[str, Any]]:
    """The YAML documents to write before slime starts, by the paths `command` names."""
    docs = {command.custom_config_path: files.custom_config(config, config_path)}
    if command.eval_config_path:
        docs[command.eval_config_path] = files.eval_config(config.spec)
    return docs
