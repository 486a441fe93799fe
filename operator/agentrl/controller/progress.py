"""Training progress from the experiment's own metrics: pure readings, step time and ETA.

The sweep GETs the head pod's Prometheus endpoint (the metric names are listed in
docs/monitoring.md); everything here turns that text, and the reading before it, into
`status.progress`. `agentrl_rollout_step` is the id of the last finished training rollout,
counted from 0 as slime's training loop counts them, so `rollout + 1` of `numRollouts` are
done.

Step time comes from the moments the rollout id is seen to move: the time between two moves
divided by the steps in between, smoothed. The first value seen is not a move (it may have
been reached long before), so it only starts the clock. Readings are one sweep apart, which
bounds the error of one measurement by the sweep interval; smoothing spreads it out. The ETA
is a timestamp computed when the rollout moves, so it does not change (and costs no status
write) between moves.

The same reading says whether the training episodes are failing (`episodes_window`): the
train episodes finished since the start of the current count, and the failed ones by
`agentrl_failed_sessions_total{reason}`, judged once at least EPISODES_FAILING_MIN_EPISODES
finished. Counters that went back (a new head pod: a retry, a resume) count from 0 again, as
Prometheus' `increase()` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agentrl.api.constants import (
    EPISODES_FAILING_MIN_EPISODES,
    EPISODES_FAILING_RATIO,
    FAILURE_REASON_OTHER,
    FAILURE_REASONS,
    METRIC_BATCH_REWARD_MEAN,
    METRIC_EPISODES_TOTAL,
    METRIC_FAILED_SESSIONS_TOTAL,
    METRIC_ROLLOUT_STEP,
    METRIC_WANDB_RUN_INFO,
    SPLIT_TRAIN,
)
from agentrl.controller.status import format_time

# Weight of the newest step-time measurement: a few steps of history, so one slow step
# (an evaluation, a checkpoint save) moves the estimate without taking it over.
SMOOTHING = 0.3
STEP_SECONDS_DIGITS = 1
# A reading's key for the failed train episodes of one reason: `failed:agent_error`.
FAILED_PREFIX = "failed:"


def parse_progress(text: str) -> dict[str, float]:
    """Raw sums from a scrape: rollout, train/eval reward, episodes and failures (train)."""
    return parse_reading(text)[0]


def parse_reading(text: str) -> tuple[dict[str, float], str | None]:
    """`parse_progress`'s sums, and the W&B run's URL when the run reports one.

    Once a train episode finished, the sums also hold the failed train episodes of each
    reason, under `FAILED_PREFIX + reason`: FAILURE_REASONS, any other label value summed
    under FAILURE_REASON_OTHER."""
    out: dict[str, float] = {}
    eval_rewards: list[float] = []
    episodes = failed = 0.0
    by_reason: dict[str, float] = {}
    run_url: str | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if math.isnan(value):  # NaN: the gauge was never set
                continue
            split = labels.get("split")
            if name == METRIC_WANDB_RUN_INFO and value == 1 and labels.get("url"):
                run_url = labels["url"]
            elif name == METRIC_ROLLOUT_STEP:
                out["rollout"] = value
            elif name == METRIC_BATCH_REWARD_MEAN:
                if split == SPLIT_TRAIN:
                    out["trainReward"] = value
                else:
                    eval_rewards.append(value)
            elif name == METRIC_EPISODES_TOTAL and split == SPLIT_TRAIN:
                episodes += value
            elif name == METRIC_FAILED_SESSIONS_TOTAL and split == SPLIT_TRAIN:
                failed += value
                reason = labels.get("reason")
                if reason not in FAILURE_REASONS:  # a bounded set of keys, names and labels
                    reason = FAILURE_REASON_OTHER
                by_reason[reason] = by_reason.get(reason, 0.0) + value
    if eval_rewards:
        out["evalReward"] = sum(eval_rewards) / len(eval_rewards)
    if episodes:
        out["episodes"], out["failed"] = episodes, failed
        out.update({FAILED_PREFIX + reason: n for reason, n in by_reason.items()})
    return out, run_url


@dataclass(frozen=True)
class Episodes:
    """Training episodes finished over one count, and the failed ones by reason."""

    finished: int
    failed: int
    reasons: tuple[tuple[str, int], ...] = ()  # (reason, failed), most first, none at 0

    @property
    def failing(self) -> bool:
        return self.failed >= EPISODES_FAILING_RATIO * self.finished

    def breakdown(self) -> str:
        """`agent_error 30, timeout 8`."""
        return ", ".join(f"{reason} {n}" for reason, n in self.reasons)


def _went_back(start: Mapping[str, float], raw: Mapping[str, float]) -> bool:
    """Whether a counter is lower than at the start: the head pod started again (a retry or
    a resume), and its counters with it."""
    keys = ("episodes", "failed", *(k for k in start if k.startswith(FAILED_PREFIX)))
    return any(raw.get(key, 0.0) < start.get(key, 0.0) for key in keys)


def episodes_window(
    start: Mapping[str, float] | None, raw: Mapping[str, float]
) -> tuple[dict[str, float], Episodes | None]:
    """(where the count runs from now, the judged episodes or None) once `raw` is read.

    `start` is the reading the count runs from; None before this process read any, when
    `raw` only starts the count: its totals reach back to the head's start, maybe days,
    and a run that failed then and recovered since must not be judged on them. Fewer than
    EPISODES_FAILING_MIN_EPISODES finished since `start` (none at all included) judge
    nothing, and the count runs on from `start`; counters that went back run from 0.
    """
    if start is None:
        return dict(raw), None
    if _went_back(start, raw):
        start = {}
    finished = round(raw.get("episodes", 0.0) - start.get("episodes", 0.0))
    if finished < EPISODES_FAILING_MIN_EPISODES:
        return dict(start), None
    failed = round(raw.get("failed", 0.0) - start.get("failed", 0.0))
    reasons = []
    for key, value in raw.items():
        if key.startswith(FAILED_PREFIX):
            n = round(value - start.get(key, 0.0))
            if n > 0:
                reasons.append((key.removeprefix(FAILED_PREFIX), n))
    reasons.sort(key=lambda pair: (-pair[1], pair[0]))
    return dict(raw), Episodes(finished, max(0, failed), tuple(reasons))


@dataclass(frozen=True)
class Pace:
    """How fast rollouts go: the last rollout id seen, since when, and the step time."""

    rollout: int
    since: datetime  # when `rollout` was first seen
    moved: bool  # whether `since` is a move (not just the first reading)
    step_seconds: float | None = None  # smoothed seconds per rollout step


def pace_after(pace: Pace | None, rollout: int, at: datetime) -> Pace:
    """The pace once `rollout` is read at `at`.

    A rollout id lower than before means the trainer restarted from an earlier checkpoint:
    the clock starts again, and the step time measured so far is kept.
    """
    if pace is None:
        return Pace(rollout, at, moved=False)
    if rollout == pace.rollout:
        return pace
    if rollout < pace.rollout or not pace.moved:
        return Pace(rollout, at, moved=rollout > pace.rollout, step_seconds=pace.step_seconds)
    measured = (at - pace.since).total_seconds() / (rollout - pace.rollout)
    smoothed = measured
    if pace.step_seconds is not None:
        smoothed = SMOOTHING * measured + (1 - SMOOTHING) * pace.step_seconds
    return Pace(rollout, at, moved=True, step_seconds=smoothed)


def eta(pace: Pace, total_rollouts: int | None) -> datetime | None:
    """When the last rollout should finish, from the latest move; None if unknown."""
    if pace.step_seconds is None or total_rollouts is None:
        return None
    remaining = max(0, total_rollouts - (pace.rollout + 1))
    return pace.since + timedelta(seconds=round(pace.step_seconds * remaining))


def rollout_text(rollout: int, total_rollouts: int | None) -> str:
    """What the Rollout column shows: rollouts finished of the total, e.g. `12/200`."""
    done = rollout + 1
    return f"{done}/{total_rollouts}" if total_rollouts is not None else str(done)


def progress_fields(
    raw: Mapping[str, float],
    previous: Mapping[str, float] | None,
    total_rollouts: int | None,
    pace: Pace | None = None,
) -> dict[str, Any]:
    """status.progress values from a scrape, the one before it and the pace so far.

    The failed-session ratio is over the train episodes finished since the previous scrape,
    or over the whole run when there is no usable previous scrape (the first, or one whose
    counters were higher: a new head pod). A scrape with no new train episodes leaves it out,
    so the status keeps the last figure: the whole run's would show a failing run as a
    healthy one (and back) between steps, a status write each time.
    """
    fields: dict[str, Any] = {}
    if "rollout" in raw:
        fields["rollout"] = int(raw["rollout"])
        fields["rolloutText"] = rollout_text(fields["rollout"], total_rollouts)
    if total_rollouts is not None:
        fields["totalRollouts"] = total_rollouts
    for key in ("trainReward", "evalReward"):
        if key in raw:
            fields[key] = round(raw[key], 6)
    episodes, failed = raw.get("episodes", 0.0), raw.get("failed", 0.0)
    if previous and episodes == previous.get("episodes", 0.0):
        episodes = 0.0  # nothing new to judge
    elif previous and episodes > previous.get("episodes", 0.0):
        episodes -= previous.get("episodes", 0.0)
        failed -= previous.get("failed", 0.0)
    if episodes > 0:
        fields["failedSessionRatio"] = round(max(0.0, failed) / episodes, 4)
    if pace is not None and pace.step_seconds is not None:
        fields["stepSeconds"] = round(pace.step_seconds, STEP_SECONDS_DIGITS)
        finish = eta(pace, total_rollouts)
        if finish is not None:
            fields["eta"] = format_time(finish)
    return fields
