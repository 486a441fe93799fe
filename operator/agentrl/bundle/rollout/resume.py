"""Resume without losing or repeating prompts: what a restart needs beyond Megatron's checkpoint.

A train step leaves state that Megatron's checkpoint does not hold: the groups it handed back
to slime's data source (`add_samples`: slime's buffer, which slime never saves), the
finished episodes `stragglerPolicy: carryOver` keeps for them (`carry.CarryStore`), and the
data source's prompt cursor. slime saves the cursor itself (`data_source.save`), but only
after Megatron has written its tracker (train.py saves the model, then the rollout manager),
so a job killed in between restarts from the saved weights with the cursor at the epoch's
start, and every prompt of the epoch so far is trained again.

So at the end of every train step the rollout writes all three, atomically, next to slime's
own cursor file: `<--save>/rollout/agentrl_state_<step>.pkl`. The state after step k's
rollout is exactly what a checkpoint saved at step k must resume from (training and saving
step k change none of it), and it exists before the tracker can name k. A restart
(`backoffLimit`, a Kueue preemption, a resume after suspend) starts slime at the tracker's
step + 1 with `--load` set; the first train call of the process then restores the state of the
tracker's step: the cursor (over slime's, which may be missing), the handed-back groups into
the fresh data source's buffer, and the carried episodes. States older than the tracker's are
deleted; newer ones belong to steps the restart runs again and are overwritten.

The file is a pickle, like slime's own `torch.save` of its cursor in the same directory: the
buffer holds slime's `Sample` objects as they were handed back.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from agentrl.bundle.rollout.batch import CARRY_FAILED, log_discarded
from agentrl.bundle.rollout.carry import CarryStore
from agentrl.bundle.rollout.episode import EpisodeOutcome
from agentrl.bundle.rollout.report import Recorder
from agentrl.slimecmd.checkpoint import TRACKER

log = logging.getLogger("agentrl.rollout")

STATE_DIR: Final = "rollout"  # where slime keeps `global_dataset_state_dict_<step>.pt`
_STATE_FILE = re.compile(r"^agentrl_state_(\d+)\.pkl$")
# slime's data-source cursor: the fields its save() writes (both pinned commits).
CURSOR_FIELDS: Final = (
    "sample_offset",
    "epoch_id",
    "sample_group_index",
    "sample_index",
    "metadata",
)
FORMAT: Final = 1


@dataclass
class RolloutState:
    """Everything a restart from step `step`'s checkpoint needs from the rollout."""

    step: int
    cursor: dict[str, Any]
    buffer: list[list[Any]]  # groups handed back to slime's data source, as they were
    carry: CarryStore = field(default_factory=CarryStore)
    format: int = FORMAT


def state_path(root: str | os.PathLike[str], step: int) -> Path:
    return Path(root) / STATE_DIR / f"agentrl_state_{step}.pkl"


def capture(data_source: Any, carry: CarryStore, step: int) -> RolloutState:
    """The state after step `step`'s rollout (slime's attributes where the source has them)."""
    cursor = {f: getattr(data_source, f) for f in CURSOR_FIELDS if hasattr(data_source, f)}
    buffer = list(getattr(data_source, "buffer", None) or [])
    # An unexpected error object may not pickle, and a restart has no use for it.
    kept = CarryStore(
        episodes={k: (s, replace(o, error=None)) for k, (s, o) in carry.episodes.items()},
        cut_groups=dict(carry.cut_groups),
    )
    return RolloutState(step, cursor, buffer, kept)


def write(root: str | os.PathLike[str], state: RolloutState) -> Path:
    """Write atomically (a kill mid-write leaves the previous file or none, never half of
    one), then delete the states a restart can no longer need (older than the tracker's)."""
    path = state_path(root, state.step)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            pickle.dump(state, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    prune(root)
    return path


def tracker_step(root: str | os.PathLike[str]) -> int | None:
    """The step Megatron's tracker names (slime saves iteration = rollout step)."""
    try:
        text = (Path(root) / TRACKER).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def prune(root: str | os.PathLike[str]) -> None:
    keep_from = tracker_step(root)
    if keep_from is None:
        return
    for entry in (Path(root) / STATE_DIR).iterdir():
        match = _STATE_FILE.match(entry.name)
        if match and int(match.group(1)) < keep_from:
            entry.unlink(missing_ok=True)


def read(root: str | os.PathLike[str], step: int) -> RolloutState | None:
    path = state_path(root, step)
    try:
        with path.open("rb") as src:
            state = pickle.load(src)
    except FileNotFoundError:
        return None
    if not isinstance(state, RolloutState) or state.format != FORMAT or state.step != step:
        raise ValueError(f"{path} is not an agentrl rollout state for step {step}")
    return state


def restore(
    data_source: Any,
    carry: CarryStore,
    state: RolloutState,
    shuffle: bool,
    *,
    recorder: Recorder,
    group_size: int | None = None,
) -> list[EpisodeOutcome]:
    """Put the state back into a fresh data source (and the process's carry store).
    `group_size`: slime's `--n-samples-per-prompt` now; handed-back groups of another size
    (the experiment resubmitted with another spec.grpo.samplesPerPrompt) are left out, since
    slime's buffer asserts that every group it takes has exactly that size. Returns the
    carried-over episodes left out because they failed (each logged once, and its time
    counted in `recorder` as thrown away)."""
    for name, value in state.cursor.items():
        if hasattr(data_source, name):
            setattr(data_source, name, value)
    dataset = getattr(data_source, "dataset", None)
    if shuffle and dataset is not None and "epoch_id" in state.cursor:
        dataset.shuffle(state.cursor["epoch_id"])  # as slime's load() does (idempotent)
    buffer = state.buffer
    if group_size is not None:
        buffer = [g for g in state.buffer if len(g) == group_size]
        if len(buffer) < len(state.buffer):
            sizes = sorted({len(g) for g in state.buffer} - {group_size})
            log.warning(
                "Rollout %d: %d group(s) handed back to slime's data source before the "
                "restart hold %s sample(s) each, and spec.grpo.samplesPerPrompt is now %d "
                "(slime's buffer takes only groups of that size): their prompts are not "
                "trained again this epoch",
                state.step + 1,
                len(state.buffer) - len(buffer),
                "/".join(map(str, sizes)),
                group_size,
            )
    if buffer:
        data_source.add_samples(buffer)
    # A state written before only task outcomes were carried over may hold a cut group's
    # failed episode: reused, its stand-in reward would count as one of the group's outcomes
    # (or leave the group an outcome short). It runs again with its group instead.
    failed = {k for k, (_, o) in state.carry.episodes.items() if o.failure is not None}
    dropped = [state.carry.episodes[k][1] for k in sorted(failed)]
    for outcome in dropped:
        # Finished work thrown away, counted where the other discards (group_aborted,
        # carry_expired, step_failed) count theirs: its failure was counted when it ended,
        # by the process that ran it, and a restarted job's hub counts from 0 again.
        recorder.discarded("aborted", outcome.seconds)
        log_discarded(
            outcome,
            CARRY_FAILED,
            f"a failed episode ({outcome.failure}) carried over in the rollout state of step "
            f"{state.step}, saved by an earlier agentrl: no outcome to reuse, it runs again "
            "with its group",
        )
    carry.episodes.update({k: v for k, v in state.carry.episodes.items() if k not in failed})
    carry.cut_groups.update(state.carry.cut_groups)
    return dropped


def save_step(args: Any, data_source: Any, carry: CarryStore, step: int) -> None:
    """End of a train step: write its state under slime's `--save` (nothing without one)."""
    root = getattr(args, "save", None)
    if root:
        write(root, capture(data_source, carry, step))


def resume(args: Any, data_source: Any, carry: CarryStore, step: int, recorder: Recorder) -> bool:
    """First train step of a process: restore the state of the checkpoint slime loaded
    (`--load`, at step - 1) and count what it leaves out in `recorder`. True if a state was
    restored."""
    root = getattr(args, "load", None)
    if not root or step <= 0:
        return False  # a first run: nothing to resume
    state = read(root, step - 1)
    if state is None:
        log.warning(
            "Rollout %d: resuming from %s without agentrl's rollout state of step %d (%s is "
            "missing): groups handed back to slime's data source and carried-over episodes "
            "from before the restart are lost, and the prompt cursor is slime's own",
            step,
            root,
            step - 1,
            state_path(root, step - 1),
        )
        return False
    size = getattr(args, "n_samples_per_prompt", None)
    group_size = size if isinstance(size, int) else None
    shuffle = bool(getattr(args, "rollout_shuffle", False))
    dropped = restore(data_source, carry, state, shuffle, recorder=recorder, group_size=group_size)
    if dropped:
        forget_dropped(root, getattr(args, "save", None), state)
    log.info(
        "Rollout %d: resumed the rollout state of step %d: cursor %s, %d handed-back "
        "group(s), %d carried-over episode(s), %d failed carried-over episode(s) dropped "
        "(reason=%s)",
        step,
        step - 1,
        _brief(state.cursor),
        sum(1 for g in state.buffer if group_size is None or len(g) == group_size),
        len(state.carry.episodes) - len(dropped),
        len(dropped),
        CARRY_FAILED,
    )
    return True


def forget_dropped(root: str, save: str | None, state: RolloutState) -> None:
    """Write the loaded state back without the failed carried-over episodes `restore` just
    dropped and counted. A job restarted again from the same checkpoint (a crash loop, a
    retry before the next checkpoint) loads the same file: had it kept them, every load would
    count their time under `aborted` once more, each process adding to what the previous one
    had already exported (a counter reset on a new head pod does not undo an increment a
    scrape already saw), and name their session ids again. Written before the count leaves
    the process (the caller flushes it next), so a kill in between loses the count rather
    than repeating it. Only the run's own checkpoint directory is written to (`--load` is
    `--save` on every restart agentrl renders): a state under another directory is left as
    it is, and said so."""
    kept = {k: v for k, v in state.carry.episodes.items() if v[1].failure is None}
    forgotten = replace(state, carry=replace(state.carry, episodes=kept))
    why = None
    if not save or os.path.realpath(root) != os.path.realpath(save):
        why = f"it is not under this run's --save ({save})"
    else:
        try:
            write(root, forgotten)
        except OSError as exc:
            why = f"rewriting it failed: {exc}"
    if why is not None:
        log.warning(
            "Rollout %d: the failed carried-over episodes dropped from the rollout state of "
            "step %d stay in %s (%s): a restart from it counts their time again",
            state.step + 1,
            state.step,
            state_path(root, state.step),
            why,
        )


def _brief(cursor: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in cursor.items())
