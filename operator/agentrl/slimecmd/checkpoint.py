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

`checkpoint.resume: false` leaves out saves this experiment did not make (another run's, in
the same directory), not its own: a KubeRay retry (backoffLimit) or a resume after a suspend
goes on from what the attempts before it saved, or it would train again from rollout 0 and
save over them. The first start of the experiment writes `RUN_MARK` into the directory (its
uid, and the tracker as it found it); a later start of the same uid restarts when the tracker
changed since, which only a save of its own does.

The filesystem is read by the launcher; this module only judges what it read.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final

from agentrl.api.models import RLExperimentSpec
from agentrl.api.slime_flags import (
    START_ROLLOUT_FIX,
    START_ROLLOUT_FLAG,
    START_ROLLOUT_WHY,
    fixed_start_rollout,
)

TRACKER: Final = "latest_checkpointed_iteration.txt"
# Which experiment the directory's saves belong to, under `checkpoint.resume: false`.
RUN_MARK: Final = "agentrl-run.json"
# Megatron's release checkpoints live in `release/`, the others in `iter_NNNNNNN/`.
RELEASE: Final = "release"
_ITER_DIR = re.compile(r"^iter_\d{7}$")
FIRST_RUN_FLAGS: Final = ("--finetune", "--no-load-optim", "--no-load-rng")


class Start(StrEnum):
    FIRST_RUN = "first-run"
    RESUME = "resume"


@dataclass(frozen=True)
class RunMark:
    """The first start of an experiment with `checkpoint.resume: false`: its uid, and the
    tracker it found (text and modification time), which holds no save of its own."""

    uid: str
    tracker: str | None
    tracker_mtime_ns: int | None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunMark | None:
        """The mark `text` holds, None when it holds none (not JSON, another shape)."""
        try:
            doc: Any = json.loads(text)
            mark = cls(doc["uid"], doc["tracker"], doc["tracker_mtime_ns"])
        except (ValueError, TypeError, KeyError):
            return None
        ok = isinstance(mark.uid, str) and isinstance(mark.tracker, str | None)
        return mark if ok and isinstance(mark.tracker_mtime_ns, int | None) else None


@dataclass(frozen=True)
class CheckpointDir:
    """What the launcher found in `spec.checkpoint.path` at pod start."""

    tracker: str | None
    """The text of the tracker file, None when there is none."""
    entries: tuple[str, ...] = ()
    """Names directly inside the directory."""
    tracker_mtime_ns: int | None = None
    """The tracker's modification time (Megatron rewrites it at every save)."""
    mark: RunMark | None = None
    """`RUN_MARK`'s content, None without one (or an unreadable one)."""


@dataclass(frozen=True)
class Decision:
    start: Start
    iteration: str | None = None
    """The saved iteration a restart loads ("release" or a number)."""
    problem: str | None = None
    warning: str | None = None
    mark: RunMark | None = None
    """To write as `RUN_MARK` before slime starts (the experiment's first start)."""


def iteration_dir(tracker_text: str) -> str | None:
    """The directory a tracker names (Megatron's rule), None when the text is not one."""
    text = tracker_text.strip()
    if text == RELEASE:
        return RELEASE
    if text.isdigit():
        return f"iter_{int(text):07d}"
    return None


def own_save(found: CheckpointDir, uid: str | None) -> bool:
    """Whether the tracker names a save of the experiment `uid`: its mark is there, and the
    tracker changed since its first start found it."""
    mark = found.mark
    if uid is None or mark is None or mark.uid != uid or found.tracker is None:
        return False
    return (found.tracker, found.tracker_mtime_ns) != (mark.tracker, mark.tracker_mtime_ns)


def decide(spec: RLExperimentSpec, found: CheckpointDir | None, uid: str | None = None) -> Decision:
    """First run or restart for this pod start; `found` is None when there is no path. `uid`
    is the experiment's (the runtime config's): with `checkpoint.resume: false` a start of the
    same experiment resumes its own saves."""
    ckpt = spec.checkpoint
    if not ckpt.path or found is None:
        return Decision(Start.FIRST_RUN)
    field = "spec.checkpoint.path"
    if not ckpt.resume and not own_save(found, uid):
        warning = None
        if found.tracker is not None:
            warning = (
                f"spec.checkpoint.resume is false: starting from the model although {ckpt.path} "
                f"holds a saved run ({TRACKER}) this experiment did not make; new saves go to "
                "the same directory"
            )
        first = uid is not None and (found.mark is None or found.mark.uid != uid)
        mark = RunMark(uid, found.tracker, found.tracker_mtime_ns) if first and uid else None
        return Decision(Start.FIRST_RUN, warning=warning, mark=mark)
    if not ckpt.resume and fixed_start_rollout(spec.runtime.extra_args) is not None:
        # extraArgs fix the rollout every attempt starts at, which resume: false lets them do
        return Decision(Start.FIRST_RUN)
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
