"""First run or restart: which checkpoint slime starts from (pure).

slime releases treat `--load` differently when the directory holds no Megatron checkpoint:
at THUDM/slime fa3c990 in bridge mode an existing `--load` directory is kept as is and the
loader then asserts it is non-empty, so an empty checkpoint directory crashes the first run;
in raw mode and at 624b824 slime falls back to `--ref-load` and sets `--finetune
--no-load-optim --no-load-rng` itself. So agentrl never passes `--load` to a directory that
holds no checkpoint. The launcher looks at `spec.checkpoint.path` when the pod starts (each
KubeRay attempt and each resume after a suspend starts a new pod, so attempt 2 sees what
attempt 1 saved) and:

- restart: Megatron's tracker file `latest_checkpointed_iteration.txt` names a saved
  iteration whose directory exists -> `--load <path>`; slime resumes the weights, the
  optimizer, the RNG and the rollout id from it;
- first run: no tracker -> no `--load`, and `--finetune --no-load-optim --no-load-rng`, so
  every slime release starts from `--ref-load` (the model) with a fresh optimizer at
  iteration 0, whether the model is a Hugging Face or a Megatron checkpoint;
- a tracker that names no usable iteration is refused: starting over would overwrite the
  saved run; so is a restart with `--start-rollout-id` in extraArgs (slime would count from
  it, not from the saved iteration).

The filesystem is read by the launcher; this module only judges what it read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from agentrl.api.models import RLExperimentSpec
from agentrl.api.slime_flags import (
    START_ROLLOUT_FIX,
    START_ROLLOUT_FLAG,
    START_ROLLOUT_WHY,
    fixed_start_rollout,
)

TRACKER: Final = "latest_checkpointed_iteration.txt"
# Megatron's release checkpoints live in `release/`, the others in `iter_NNNNNNN/`.
RELEASE: Final = "release"
_ITER_DIR = re.compile(r"^iter_\d{7}$")
FIRST_RUN_FLAGS: Final = ("--finetune", "--no-load-optim", "--no-load-rng")


class Start(StrEnum):
    FIRST_RUN = "first-run"
    RESUME = "resume"


@dataclass(frozen=True)
class CheckpointDir:
    """What the launcher found in `spec.checkpoint.path` at pod start."""

    tracker: str | None
    """The text of the tracker file, None when there is none."""
    entries: tuple[str, ...] = ()
    """Names directly inside the directory."""


@dataclass(frozen=True)
class Decision:
    start: Start
    iteration: str | None = None
    """The saved iteration a restart loads ("release" or a number)."""
    problem: str | None = None
    warning: str | None = None


def iteration_dir(tracker_text: str) -> str | None:
    """The directory a tracker names (Megatron's rule), None when the text is not one."""
    text = tracker_text.strip()
    if text == RELEASE:
        return RELEASE
    if text.isdigit():
        return f"iter_{int(text):07d}"
    return None


def decide(spec: RLExperimentSpec, found: CheckpointDir | None) -> Decision:
    """First run or restart for this pod start; `found` is None when there is no path."""
    ckpt = spec.checkpoint
    if not ckpt.path or found is None:
        return Decision(Start.FIRST_RUN)
    field = "spec.checkpoint.path"
    if not ckpt.resume:
        warning = None
        if found.tracker is not None:
            warning = (
                f"spec.checkpoint.resume is false: starting from the model although {ckpt.path} "
                f"holds a saved run ({TRACKER}); new saves go to the same directory"
            )
        return Decision(Start.FIRST_RUN, warning=warning)
    if found.tracker is None:
        partial = sorted(e for e in found.entries if _ITER_DIR.match(e))
        warning = None
        if partial:
            warning = (
                f"{field}: {ckpt.path} holds {', '.join(partial)} but no {TRACKER} (a save that "
                "never finished): starting from the model, and saves will overwrite them"
            )
        return Decision(Start.FIRST_RUN, warning=warning)
    saved = iteration_dir(found.tracker)
    if saved is None or saved not in found.entries:
        what = f"names {saved}, which is missing" if saved else "is not an iteration number"
        return Decision(
            Start.FIRST_RUN,
            problem=(
                f"{field}: {ckpt.path}/{TRACKER} ({found.tracker.strip()!r}) {what}; the saved "
                f"run cannot be resumed. Restore that iteration, point {TRACKER} at one that "
                "exists, or set spec.checkpoint.resume: false to start over"
            ),
        )
    iteration = found.tracker.strip()
    if (i := fixed_start_rollout(spec.runtime.extra_args)) is not None:
        return Decision(
            Start.RESUME,
            iteration=iteration,
            problem=(
                f"spec.runtime.extraArgs[{i}]: {START_ROLLOUT_FLAG} on a restart from saved "
                f"iteration {iteration}: {START_ROLLOUT_WHY} in {ckpt.path}. Fix: "
                f"{START_ROLLOUT_FIX}"
            ),
        )
    return Decision(Start.RESUME, iteration=iteration)


def start_args(spec: RLExperimentSpec, start: Start) -> list[str]:
    """The flags that make slime start as decided."""
    if start is Start.RESUME:
        assert spec.checkpoint.path  # a restart needs a checkpoint directory
        return ["--load", spec.checkpoint.path]
    return list(FIRST_RUN_FLAGS)
