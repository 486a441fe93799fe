"""A batch of episodes: bounded by one semaphore, cancelled as a whole, summarised once.

Train and eval batches go through `run_groups` with the same `RolloutContext`, so the
`maxConcurrent` semaphore bounds live episodes across both (agentcore PR #78: an eval set
started all at once saturated the gateway, missed its timeouts and crashed SGLang).
Episodes run in a TaskGroup: cancelling the batch cancels every pending episode, and each
one closes its gateway and agent sessions before the cancellation completes. A train step
that over-samples (`sampling.fill_batch`) cancels single episodes instead; their `Ticket`
says the cancellation was the sampling policy's (an abort, not a failure) and when the
episode got its slot.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from agentrl.api.constants import SPLIT_TRAIN
from agentrl.bundle.agents.base import AgentBackend
from agentrl.bundle.failures import CANCELLED
from agentrl.bundle.rollout.carry import CarryStore
from agentrl.bundle.rollout.episode import (
    EpisodeInput,
    EpisodeOutcome,
    EpisodeSpec,
    new_session_id,
    run_episode,
)
from agentrl.bundle.rollout.report import Recorder
from agentrl.bundle.rollout.types import SampleFields, Status
from agentrl.bundle.session import GatewaySessions

log = logging.getLogger("agentrl.rollout")

BATCH_FULL = "batch_full"  # abort reason: the batch filled while the episode still ran
# Finished episodes that train nothing after all (logged with their session id, as aborts):
GROUP_ABORTED = "group_aborted"  # its group was cut under `abort` and runs again whole
CARRY_EXPIRED = "carry_expired"  # kept for its cut group, which never came back in time
CARRY_STALE = "carry_stale"  # kept for its cut group, older than maxPolicyLag when it came back
# A failed episode in a rollout state saved before failures stopped being carried over:
# reused, its stand-in would train as one of its group's outcomes.
CARRY_FAILED = "carry_failed"
STEP_FAILED = "step_failed"  # finished (or carried into) a train step that then failed
RUN_ENDED = "run_ended"  # kept for its cut group, but the run's last train step has run


@dataclass
class Ticket:
    """One episode's bookkeeping between its task and the step that runs it."""

    started_at: float | None = None  # loop time it got its slot; None while queued
    cut: bool = False  # cancelled by the sampling policy (counted as aborted, not failed)

    def elapsed(self, now: float) -> float:
        return 0.0 if self.started_at is None else max(0.0, now - self.started_at)


@dataclass
class RolloutContext:
    """The long-lived pieces every batch shares (built once per process)."""

    sessions: GatewaySessions
    backend: AgentBackend
    semaphore: asyncio.Semaphore
    recorder: Recorder = field(default_factory=Recorder)
    rollout_ids: Iterator[int] = field(default_factory=itertools.count)
    carry: CarryStore = field(default_factory=CarryStore)  # what cut groups left behind
    resumed: bool = False  # the first train step looked for a checkpoint's rollout state
    # The last train step this process generated: slime's eval of that rollout id runs after
    # the step trained and its weights reached the engines (`policy_version` one more).
    generated: int | None = None


async def run_one(
    ctx: RolloutContext,
    inp: EpisodeInput,
    spec: EpisodeSpec,
    split: str,
    ticket: Ticket | None = None,
) -> EpisodeOutcome:
    """One episode under the shared semaphore, counted once however it ends."""
    ticket = ticket or Ticket()
    loop = asyncio.get_running_loop()
    async with ctx.semaphore:
        ticket.started_at = loop.time()
        ctx.recorder.episode_started(split)
        sid = new_session_id()
        try:
            outcome = await run_episode(
                inp, spec, next(ctx.rollout_ids), ctx.sessions, ctx.backend, session_id=sid
            )
        except BaseException:  # cancelled: count it, then let the cancellation go on
            if ticket.cut:  # the sampling policy's: in the step's summary line, not a failure
                elapsed = ticket.elapsed(loop.time())
                ctx.recorder.episode_aborted(split, BATCH_FULL, elapsed)
                # Not a failure, but its agent was stopped: named once, so that a stopped
                # agent session (AgentCore, S3 result key) can be told from a lost one.
                log.info(
                    "%s episode aborted: session=%s reason=%s after %.1fs: the batch filled "
                    "while it ran (its agent was stopped; its prompt goes back to slime's data "
                    "source)",
                    split,
                    sid,
                    BATCH_FULL,
                    elapsed,
                )
            else:
                ctx.recorder.episode_finished(split, CANCELLED, 0.0, samples=0, truncated=0)
                if split == SPLIT_TRAIN:  # stopped while running, as a cut one: its time
                    ctx.recorder.discarded("cut", ticket.elapsed(loop.time()))
                # A failure like any other: logged once, with the session id its agent
                # (AgentCore session, S3 result key) and gateway session were known by.
                log.warning(
                    "%s episode failed: session=%s reason=%s: the batch was cancelled while "
                    "it ran (its agent was stopped)",
                    split,
                    sid,
                    CANCELLED,
                )
            raise
    outcome.seconds = ticket.elapsed(loop.time())
    truncated = sum(s.status is Status.TRUNCATED for s in outcome.samples)
    ctx.recorder.episode_finished(
        split,
        outcome.failure,
        outcome.reward,
        len(outcome.samples),
        truncated,
        seconds=outcome.seconds,
        response_lengths=[s.response_length for s in outcome.samples],
    )
    ctx.recorder.merged(outcome.merge)
    if outcome.failure:
        log.warning(
            "%s episode failed: session=%s reason=%s: %s",
            split,
            outcome.session_id,
            outcome.failure,
            outcome.message,
            exc_info=outcome.error,
        )
    return outcome


def log_discarded(outcome: EpisodeOutcome, reason: str, why: str) -> None:
    """A finished episode that trains nothing after all, named once with its session id."""
    log.info(
        "train episode discarded: session=%s reason=%s after %.1fs: %s",
        outcome.session_id,
        reason,
        outcome.seconds,
        why,
    )


async def run_groups(
    ctx: RolloutContext, groups: Sequence[Sequence[EpisodeInput]], spec: EpisodeSpec, split: str
) -> list[list[EpisodeOutcome]]:
    """Every episode of every group, concurrently up to the semaphore, in input order."""
    async with asyncio.TaskGroup() as tg:
        tasks = [[tg.create_task(run_one(ctx, inp, spec, split)) for inp in g] for g in groups]
    return [[t.result() for t in g] for g in tasks]


@dataclass(frozen=True)
class BatchStats:
    episodes: int
    succeeded: int
    failed: int
    sequences: int
    # Over the episodes that reported a reward (task outcomes); NaN when none did: a
    # failure's stand-in 0 is no reward, so a batch of failures has no mean, not a mean of 0.
    reward_mean: float
    masked_turns: int = 0  # turns without usable logprobs: kept, never trained
    dropped_over_budget: int = 0  # sequences whose prompt alone exceeded the budget
    clipped_segments: int = 0  # responses cut to maxResponseLength

    def summary(self, kind: str, rollout_id: int) -> str:
        return (
            f"{kind} {rollout_id} batch: episodes={self.episodes} "
            f"(succeeded={self.succeeded} failed={self.failed}) sequences={self.sequences}"
        )


def batch_stats(outcomes: Sequence[Sequence[EpisodeOutcome]]) -> BatchStats:
    flat = [o for g in outcomes for o in g]
    failed = sum(o.failure is not None for o in flat)
    rewards = [o.reward for o in flat if o.failure is None]  # a failure's 0 is no reward
    merges = [o.merge for o in flat if o.merge is not None]
    return BatchStats(
        episodes=len(flat),
        succeeded=len(flat) - failed,
        failed=failed,
        sequences=sum(len(o.samples) for o in flat),
        reward_mean=sum(rewards) / len(rewards) if rewards else math.nan,
        masked_turns=sum(m.masked_turns for m in merges),
        dropped_over_budget=sum(m.dropped_over_budget for m in merges),
        clipped_segments=sum(m.clipped_segments for m in merges),
    )


def pass_at_k(outcomes: Sequence[Sequence[EpisodeOutcome]]) -> dict[int, float]:
    """pass@k over the groups (prompts) for k = 1, 2, 4, ... up to the smallest group: the
    unbiased estimate 1 - C(n - c, k) / C(n, k) per prompt (n episodes, c of them with reward
    exactly 1, as slime's `compute_pass_rate` counts them; a failed episode is not a pass),
    averaged over the prompts. Each group is taken at its own size, so eval sets of
    different `samplesPerPrompt` each get theirs (slime's has one global group size)."""
    groups = [g for g in outcomes if g]
    if not groups:
        return {}
    smallest = min(len(g) for g in groups)
    out: dict[int, float] = {}
    k = 1
    while k <= smallest:
        per_prompt = []
        for g in groups:
            n, c = len(g), sum(o.failure is None and o.reward == 1 for o in g)
            per_prompt.append(1.0 - math.comb(n - c, k) / math.comb(n, k))
        out[k] = sum(per_prompt) / len(per_prompt)
        k *= 2
    return out


def group_samples(outcomes: Sequence[Sequence[EpisodeOutcome]]) -> list[list[SampleFields]]:
    """Per group (prompt), the samples of all its episodes, episode by episode."""
    return [[s for o in g for s in o.samples] for g in outcomes]
