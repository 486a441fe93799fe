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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agentrl.api.constants import (
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


def parse_progress(text: str) -> dict[str, float]:
    """Raw sums from a scrape: rollout, train/eval reward, episodes and failures (train)."""
    return parse_reading(text)[0]


def parse_reading(text: str) -> tuple[dict[str, float], str | None]:
    """`parse_progress`'s sums, and the W&B run's URL when the run reports one."""
    out: dict[str, float] = {}
    eval_rewards: list[float] = []
    episodes = failed = 0.0
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
    if eval_rewards:
        out["evalReward"] = sum(eval_rewards) / len(eval_rewards)
    if episodes:
        out["episodes"], out["failed"] = episodes, failed
    return out, run_url


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
