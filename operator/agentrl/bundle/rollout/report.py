"""Metric updates as data: recorded where episodes run, applied where the registry lives.

The rollout runs inside slime's RolloutManager actor, on whatever node Ray chose; the
registry and its HTTP endpoint live in the hub actor on the head pod. Episodes record
into a `Recorder` (plain dict arithmetic, no I/O, cheap enough for every episode), and
the rollout ships the accumulated `MetricsDelta` (defined by the hub, which applies it)
in one call per flush, so a batch of 1,000 episodes costs a handful of actor calls
rather than thousands.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from agentrl.bundle.agents.base import PoolStats
from agentrl.bundle.hub import Key, MetricsDelta, apply_delta
from agentrl.bundle.traces import MergeStats

__all__ = ["MetricsDelta", "Recorder", "apply_delta"]


class Recorder:
    """Accumulates the rollout's metric updates until `take()`."""

    def __init__(self) -> None:
        self._counters: defaultdict[Key, float] = defaultdict(float)
        self._gauges: dict[Key, float] = {}
        self._observations: list[tuple[Key, float]] = []
        self._in_flight: defaultdict[str, int] = defaultdict(int)

    def _inc(self, name: str, labels: tuple[str, ...] = (), value: float = 1.0) -> None:
        self._counters[(name, labels)] += value

    def episode_started(self, split: str) -> None:
        self._in_flight[split] += 1
        self._gauges[("sessions_in_flight", (split,))] = self._in_flight[split]

    def episode_finished(
        self,
        split: str,
        failure: str | None,
        reward: float,
        samples: int,
        truncated: int,
        *,
        seconds: float | None = None,
        response_lengths: Sequence[int] = (),
    ) -> None:
        self._in_flight[split] -= 1
        self._gauges[("sessions_in_flight", (split,))] = self._in_flight[split]
        self._inc("episodes", (split, "failed" if failure else "succeeded"))
        if failure:
            self._inc("failed_sessions", (split, failure))
        else:  # a failed episode's 0 is a stand-in, not a reward anybody reported
            self._observations.append((("episode_reward", (split,)), reward))
        if seconds is not None:
            self._observations.append((("episode_seconds", (split,)), seconds))
        if split == "train":  # eval sequences are never trained on
            self._inc("samples", value=samples)
            if truncated:
                self._inc("truncated_samples", value=truncated)
            for length in response_lengths:
                self._observations.append((("response_tokens", ()), length))

    def episode_aborted(self, split: str, reason: str, seconds: float) -> None:
        """Stopped by the rollout's own policy: neither a success nor a failure."""
        self._in_flight[split] -= 1
        self._gauges[("sessions_in_flight", (split,))] = self._in_flight[split]
        self._inc("aborted_episodes", (split, reason))
        if seconds:
            self._inc("discarded_episode_seconds", ("cut",), seconds)

    def groups(self, outcome: str, n: int = 1) -> None:
        if n:
            self._inc("groups", (outcome,), n)

    def discarded(self, reason: str, seconds: float) -> None:
        """Finished episode time that trains nothing (filtered or backfilled, in an aborted
        group, masked whole, or failed in a trained group)."""
        if seconds:
            self._inc("discarded_episode_seconds", (reason,), seconds)

    def step_shape(self, zero_variance_share: float, length_bias: float | None) -> None:
        self._gauges[("zero_variance_group_share", ())] = zero_variance_share
        # None: no episode of the step trains a token (every group a backfill, say), so no
        # trained mean to compare. NaN, not left as it was: the gauge says "last train step",
        # and would show an earlier step's bias as this one's.
        self._gauges[("episode_length_bias", ())] = math.nan if length_bias is None else length_bias

    def signal(
        self,
        excluded: Mapping[str, int],
        excluded_share: float,
        policy_lags: Sequence[int],
        *,
        masked: int,
        trained: int,
        restarted: int,
    ) -> None:
        """One train step's signal hygiene: episodes excluded from their group's statistics
        (by failure reason) and their share, the age of every trained episode, and what
        happened to tokens sampled by an older policy."""
        for reason, n in excluded.items():
            self._inc("excluded_episodes", (reason,), n)
        self._gauges[("excluded_episode_share", ())] = excluded_share
        self._observations += [(("policy_lag", ()), float(lag)) for lag in policy_lags]
        for action, n in (("masked", masked), ("trained", trained)):
            if n:
                self._inc("stale_tokens", (action,), n)
        if restarted:
            self._inc("stale_episodes_restarted", value=restarted)

    def step_seconds(self, split: str, seconds: float) -> None:
        self._observations.append((("rollout_step_seconds", (split,)), seconds))

    def merged(self, stats: MergeStats | None) -> None:
        """Why turns started new sequences (`agentrl_trace_breaks_total{reason}`)."""
        if stats is not None:
            for reason, n in stats.breaks.items():
                self._inc("trace_breaks", (reason,), n)

    def batch_finished(
        self, split: str, rollout_id: int, reward_mean: float, total_steps: int | None = None
    ) -> None:
        self._gauges[("batch_reward_mean", (split,))] = reward_mean
        if split == "train":
            self._gauges[("rollout_step", ())] = rollout_id
        if total_steps is not None:
            self._gauges[("rollout_total_steps", ())] = total_steps

    def run_link(self, url: str | None, group: str | None) -> None:
        """The W&B run this training logs to, and its group (the dashboard's run link)."""
        if url:
            self._gauges[("wandb_run_info", (url, group or ""))] = 1

    def eval_set_finished(self, name: str, rollout_id: int, reward_mean: float) -> None:
        """One eval set's pass, by the set's name (bounded: the spec lists the sets)."""
        self._gauges[("eval_reward_mean", (name,))] = reward_mean
        self._gauges[("eval_step", (name,))] = rollout_id

    def pool(self, stats: PoolStats, discarded: int) -> None:
        self._gauges[("connection_pool_size", ())] = stats.size
        self._gauges[("connection_pool_in_use", ())] = stats.in_use
        if discarded:
            self._inc("connection_pool_discarded", value=discarded)

    def in_flight(self, split: str) -> int:
        return self._in_flight[split]

    def take(self) -> MetricsDelta:
        delta = MetricsDelta(dict(self._counters), dict(self._gauges), self._observations)
        self._counters.clear()
        self._gauges = {}
        self._observations = []
        return delta
