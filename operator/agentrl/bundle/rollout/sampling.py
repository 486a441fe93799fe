"""A train step that over-samples, filters and cuts stragglers (dynamic sampling).

Agent episodes are heavy-tailed, and a step that waits for every episode of every group
leaves the cluster idle behind the slowest one; a group whose episodes all scored the same
trains nothing. slime's default rollout answers both with `--over-sampling-batch-size`,
`--dynamic-sampling-filter-path` and `--partial-rollout`; agentrl's rollout replaces it, so
it does the same here, at group granularity, with agents:

1. Start `overSamplingBatchSize` groups (O >= the batch size B); their episodes queue on
   the shared `maxConcurrent` semaphore in group order, so groups finish roughly in order.
2. When a group's last episode finishes, the filter decides. A dropped group is replaced
   by a fresh one from slime's data source, so O candidates stay in flight, until the step
   has started (1 + maxRefillRounds) x O groups; after that, or once the batch is full, a
   dropped group that the batch still needs is kept as a backfill (slime counts its
   episodes; every loss mask 0, so none of its tokens trains).
3. Once B groups are kept, the rest are cut (`abort` / `carryOver`): running episodes are
   cancelled (the agent backend stops the agent, the episode closes its gateway session,
   which aborts its engine requests; the batch end then makes the engines idle), and the
   groups go back to slime's data source (`data_source.add_samples`). Under `carryOver` a
   cut group's finished episodes are kept (`carry.py`) and only the others run again.
4. The length bias this creates is bounded twice: a cut happens only once B of the at most
   O candidates finished, so at most (O - B) / O of a step's groups are cut; and a group
   that was cut is waited for when it comes back (reserved), so no prompt is cut twice and
   every started prompt trains within two steps. Episodes that were cut while running are
   redrawn when they run again; the step measures the resulting shift
   (`agentrl_episode_length_bias`). docs/rollout.md has the numbers.

Infrastructure failures (`failures.py`) never shape a group's signal under
`failedEpisodes: exclude`: the filter sees the rewards of the task outcomes only, and a group
with fewer than `minValidSamplesPerGroup` of them is dropped like a zero-variance group:
replaced under a dynamicSamplingFilter, otherwise counted and trained with zero advantage
(`skipped`; the reward post-process zeroes it).

Only a cut group's task outcomes are carried over: its failed episodes run again with it.
Carried-over episodes are as old as the step they ran in (`policy_version`): one more than
`maxPolicyLag` updates old is run again from its prompt; a younger one is reused, and under
`offPolicyTokens: mask` its tokens are masked when the batch is assembled (its reward still
counts in the group), with its logprobs kept as sampled.

With the defaults (O = B, no filter, `wait`) this is exactly a wait-for-all batch.
Eval never comes here: every episode of every eval set runs to its end (`batch.run_groups`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentrl.api.constants import SPLIT_TRAIN
from agentrl.api.models import GrpoSpec
from agentrl.bundle.rollout.batch import (
    CARRY_EXPIRED,
    CARRY_STALE,
    GROUP_ABORTED,
    RUN_ENDED,
    STEP_FAILED,
    RolloutContext,
    Ticket,
    log_discarded,
    run_one,
)
from agentrl.bundle.rollout.carry import TTL_STEPS
from agentrl.bundle.rollout.episode import EpisodeOutcome, EpisodeSpec
from agentrl.bundle.rollout.filters import KEEP, GroupFilter, Verdict, has_reward_variance
from agentrl.bundle.rollout.source import DataSource, PromptGroup
from agentrl.bundle.rollout.types import SampleFields

log = logging.getLogger("agentrl.rollout")

Policy = Literal["wait", "abort", "carryOver"]
TRAIN = SPLIT_TRAIN
TOO_FEW_VALID = "too_few_valid"  # drop reason: fewer task outcomes than minValidSamplesPerGroup


@dataclass(frozen=True)
class SamplingPlan:
    batch_size: int  # B: groups slime gets back (rollout_batch_size)
    in_flight: int  # O: candidate groups kept in flight (overSamplingBatchSize)
    max_refill_rounds: int
    policy: Policy
    exclude_failed: bool = True  # failedEpisodes: exclude
    min_valid: int = 1  # task outcomes a group needs to train
    max_policy_lag: int = 1
    mask_stale: bool = True  # offPolicyTokens: mask

    @classmethod
    def from_spec(cls, grpo: GrpoSpec, batch_size: int) -> SamplingPlan:
        policy: Policy = grpo.straggler_policy
        over = grpo.over_sampling_batch_size or batch_size
        # `wait` never cuts, so extra candidates would only run to be thrown away; above 2 B
        # the groups cut in one step might not all fit the next batch as reserved ones
        # (validation refuses it; slime's args could still disagree with the spec).
        in_flight = batch_size if policy == "wait" else min(max(batch_size, over), 2 * batch_size)
        return cls(
            batch_size,
            in_flight,
            grpo.max_refill_rounds,
            policy,
            exclude_failed=grpo.failed_episodes == "exclude",
            min_valid=grpo.effective_min_valid_samples,
            max_policy_lag=grpo.max_policy_lag,
            mask_stale=grpo.off_policy_tokens == "mask",
        )

    def counted(self, outcomes: Sequence[EpisodeOutcome]) -> list[EpisodeOutcome]:
        """The episodes that count in their group's statistics: task outcomes only, unless
        failed episodes count as reward 0 (`zeroReward`)."""
        if not self.exclude_failed:
            return list(outcomes)
        return [o for o in outcomes if o.failure is None]

    @property
    def max_groups(self) -> int:
        """Groups one step may start, replacements included."""
        return (1 + self.max_refill_rounds) * self.in_flight

    @property
    def cuts(self) -> bool:
        return self.policy != "wait"


@dataclass
class StepReport:
    """What one train step did with its groups (metrics, the log line, the benchmark)."""

    kept: int = 0
    filtered: int = 0
    backfilled: int = 0
    skipped: int = 0  # too few task outcomes, no dynamic sampling: trained with zero advantage
    too_few_valid: int = 0  # finished groups with too few task outcomes (skipped or filtered)
    aborted: int = 0  # groups cut under `abort`
    carried_over: int = 0  # groups cut under `carryOver`
    unstarted: int = 0  # groups handed back before any of their episodes started
    zero_variance: int = 0  # finished groups without reward variance (filtered or not)
    finished: int = 0
    episodes_cut: int = 0
    episodes_reused: int = 0
    drop_reasons: Counter[str] = field(default_factory=Counter)
    # The durations of the batch's episodes of which a token trains (the length bias's
    # "trained"): not backfills', failed ones' or those masked whole.
    trained_seconds: list[float] = field(default_factory=list)
    # Episode time that trains nothing: filtered groups', and backfills' (in the batch, every
    # loss mask 0), carried episodes included.
    filtered_seconds: float = 0.0
    # Trained groups' episodes every token of which is masked (`offPolicyTokens: mask` over a
    # carried episode, or the merge: every completion aborted, of other weights or without
    # usable logprobs): their reward counts in the group, none of their tokens trains.
    masked_seconds: float = 0.0
    # Trained groups' failed episodes: one stand-in slot whose loss mask is 0, so none of it
    # trains (under `zeroReward` its stand-in 0 still counts in the group, as a masked one's
    # reward does).
    failed_seconds: float = 0.0
    # Finished episodes thrown away: of groups cut under `abort`, failed ones of groups cut
    # under `carryOver`, and carried ones too old to reuse (maxPolicyLag) or never handed
    # back (TTL_STEPS).
    aborted_seconds: float = 0.0
    cut_seconds: float = 0.0  # elapsed time of episodes cancelled while running
    # Every other finished episode the step ran (not the carried ones it handed back,
    # filtered or trained nothing of: they count in the step that ran them).
    other_seconds: list[float] = field(default_factory=list)
    # Every finished episode the step ran (not those carried into it): what a step that fails
    # after its batch is assembled throws away (`driver.discard_unsaved`).
    ran_episodes: list[EpisodeOutcome] = field(default_factory=list)
    # Session ids the step named thrown away as it assembled its batch (a group cut under
    # `abort`, the run's last step draining the carry store, ...): a step that fails after
    # that does not name them again (`driver.discard_unsaved`).
    named: set[str] = field(default_factory=set)
    # Token age (carried-over episodes): per trained group's episode (not a backfill's), how
    # many updates old it is.
    policy_lags: list[int] = field(default_factory=list)
    stale_restarted: int = 0  # carried episodes older than maxPolicyLag, run again
    stale_tokens_masked: int = 0
    stale_tokens_trained: int = 0
    # Trained groups' episodes that count in no statistic (failedEpisodes: exclude), by reason.
    excluded: Counter[str] = field(default_factory=Counter)
    trained_episodes: int = 0  # the trained groups' episodes (a backfill's are not trained)

    @property
    def excluded_share(self) -> float:
        return sum(self.excluded.values()) / self.trained_episodes if self.trained_episodes else 0.0

    @property
    def zero_variance_share(self) -> float:
        return self.zero_variance / self.finished if self.finished else 0.0

    @property
    def length_bias(self) -> float | None:
        """Mean trained episode duration over the mean of every episode the step ran (cut
        ones at their elapsed time, which understates them), minus 1."""
        if not self.trained_seconds:
            return None
        trained = sum(self.trained_seconds) / len(self.trained_seconds)
        total = sum(self.trained_seconds) + sum(self.other_seconds) + self.cut_seconds
        count = len(self.trained_seconds) + len(self.other_seconds) + self.episodes_cut
        overall = total / count
        return trained / overall - 1.0 if overall > 0 else None

    def summary(self, rollout_id: int) -> str:
        reasons = " ".join(f"{k}={v}" for k, v in sorted(self.drop_reasons.items()))
        return (
            f"Rollout {rollout_id} groups: kept={self.kept} filtered={self.filtered}"
            f"{f' ({reasons})' if reasons else ''} backfilled={self.backfilled} "
            f"skipped={self.skipped} aborted={self.aborted} carried_over={self.carried_over} "
            f"returned_unstarted={self.unstarted} episodes_cut={self.episodes_cut} "
            f"episodes_reused={self.episodes_reused} "
            f"zero_variance_share={self.zero_variance_share:.2f} "
            f"excluded_episodes={sum(self.excluded.values())} "
            f"stale_restarted={self.stale_restarted}"
        )


@dataclass(eq=False)
class GroupRun:
    """One group in a step: a task per episode still to run, outcomes as they finish."""

    prompt: PromptGroup
    order: int
    protected: bool  # cut in an earlier step: waited for, never cut again
    outcomes: list[EpisodeOutcome | None]
    tickets: list[Ticket | None]
    tasks: list[asyncio.Task[EpisodeOutcome] | None]
    carried: int = 0  # episodes taken from the carry store (finished in the step that cut it)
    # What this step took out of the carry store for it (the step that cut it, the episodes
    # reused with the step that kept them): put back if the step fails (`discard_finished`).
    cut_step: int | None = None
    taken: dict[int, tuple[int, EpisodeOutcome]] = field(default_factory=dict)
    # Those too old to reuse (maxPolicyLag): thrown away once the step ends, put back with
    # the others if it fails, so a step run again (or a restart) finds and counts them once.
    stale: dict[int, tuple[int, EpisodeOutcome]] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return all(o is not None for o in self.outcomes)

    def done_outcomes(self) -> list[EpisodeOutcome]:
        return [o for o in self.outcomes if o is not None]

    def ran(self, slot: int) -> EpisodeOutcome | None:
        """The slot's episode if this step ran it to its end: not one taken from the carry
        store, which the step that cut the group ran and counted."""
        return self.outcomes[slot] if slot not in self.taken else None

    def ran_outcomes(self) -> list[EpisodeOutcome]:
        """The finished episodes this step ran (`ran`)."""
        return [o for slot in range(len(self.outcomes)) if (o := self.ran(slot)) is not None]

    def ran_seconds(self) -> list[float]:
        """The durations of the finished episodes this step ran (`ran`)."""
        return [o.seconds for o in self.ran_outcomes()]


SampleConverter = Callable[[Sequence[EpisodeOutcome]], list[Any]]


class _Step:
    def __init__(
        self,
        ctx: RolloutContext,
        source: DataSource,
        plan: SamplingPlan,
        *,
        spec: EpisodeSpec,
        group_filter: GroupFilter | None,
        to_samples: SampleConverter,
        step: int,
    ) -> None:
        self.ctx, self.source, self.plan, self.spec = ctx, source, plan, spec
        self.filter, self.to_samples, self.step = group_filter, to_samples, step
        self.report = StepReport()
        self.runs: list[GroupRun] = []
        self.unfinished: set[GroupRun] = set()
        self.kept: list[GroupRun] = []
        self.backfilled: list[GroupRun] = []
        # Backfills the filter dropped and no replacement could take over: trained with no
        # gradient (every loss mask 0). A filter may drop a group that has reward variance,
        # so a zero advantage is not enough (nor for the KL loss, which needs no advantage).
        self.unwanted: set[GroupRun] = set()
        self.skipped: list[GroupRun] = []  # too few task outcomes, no replacement wanted
        self.cut_runs: list[GroupRun] = []
        self.unstarted: list[GroupRun] = []
        self.cancelled: list[asyncio.Task[EpisodeOutcome]] = []
        self.events: asyncio.Queue[tuple[GroupRun, int]] = asyncio.Queue()
        self.cut_done = False
        self.handed_back = False

    # --- starting groups -----------------------------------------------------------------

    @property
    def have(self) -> int:
        return len(self.kept) + len(self.backfilled) + len(self.skipped)

    def reserved(self) -> int:
        return sum(1 for r in self.unfinished if r.protected)

    def start(self, groups: Sequence[PromptGroup]) -> None:
        for prompt in groups:
            first = prompt.key(0) if prompt.samples else None
            cut_step = self.ctx.carry.cut_groups.get(first[0]) if first else None
            # A group cut before is waited for, as long as the reserved ones fit the batch.
            protected = (
                self.ctx.carry.was_cut(first[0] if first else None)
                and self.have + self.reserved() < self.plan.batch_size
            )
            n = len(prompt.inputs)
            run = GroupRun(prompt, len(self.runs), protected, [None] * n, [None] * n, [None] * n)
            run.cut_step = cut_step
            for slot, inp in enumerate(prompt.inputs):
                entry = (
                    self.ctx.carry.take_entry(prompt.key(slot))
                    if self.plan.policy == "carryOver"
                    else None
                )
                reused = None if entry is None else entry[1]
                if (
                    entry is not None
                    and reused is not None
                    and self.step - reused.policy_version > self.plan.max_policy_lag
                ):
                    self.report.stale_restarted += 1  # too old: from the prompt again
                    run.stale[slot] = entry  # thrown away when the step ends (`batch`)
                    reused = None
                if entry is not None and reused is not None:
                    # A fresh id from this process's counter: the one it was run with came
                    # from the process that ran it, and a restarted process counts from 0
                    # again. slime takes samples sharing an id for one episode (its DP
                    # schedule, its per-rollout loss denominator, the reward post-process):
                    # https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/dp_schedule.py
                    run.outcomes[slot] = renumbered(reused, next(self.ctx.rollout_ids))
                    run.taken[slot] = entry
                    run.carried += 1
                    continue
                ticket = Ticket()
                task = asyncio.create_task(run_one(self.ctx, inp, self.spec, TRAIN, ticket))
                task.add_done_callback(functools.partial(self._done, run, slot))
                run.tickets[slot], run.tasks[slot] = ticket, task
            self.runs.append(run)
            self.unfinished.add(run)
            if run.finished:  # nothing left to run (all its episodes were carried)
                self.events.put_nowait((run, -1))

    def _done(self, run: GroupRun, slot: int, _task: asyncio.Task[EpisodeOutcome]) -> None:
        self.events.put_nowait((run, slot))

    def refill(self) -> None:
        """Keep O candidates in flight while the refill budget lasts."""
        want = self.plan.in_flight - self.have - len(self.unfinished)
        budget = self.plan.max_groups - len(self.runs)
        n = min(want, budget)
        if n > 0:
            self.start(self.source.fetch(n))

    # --- the step --------------------------------------------------------------------------

    async def run(self) -> None:
        self.start(self.source.fetch(self.plan.in_flight))
        self.maybe_cut()
        while self.unfinished:
            run, slot = await self.events.get()
            task = run.tasks[slot] if slot >= 0 else None
            if task is not None and run.outcomes[slot] is None and not task.cancelled():
                run.outcomes[slot] = task.result()  # run_one only raises if cancelled
            if run in self.unfinished and run.finished:
                self.unfinished.discard(run)
                self.classify(run)
                self.maybe_cut()
                if not self.cut_done:
                    self.refill()
                    # A refill can bring groups cut in the step before (reserved: a buffer
                    # filter may hand them out after fresh ones) that fill the batch on their
                    # own; cut now, or the fresh groups run on until the next group finishes,
                    # and one kept meanwhile is only handed back by `trim`.
                    self.maybe_cut()
        if self.cancelled:  # every cut episode has stopped its agent and closed its session
            await asyncio.gather(*self.cancelled, return_exceptions=True)
        self.trim()
        self.settle_cut_groups()

    def trim(self) -> None:
        """Never more than B groups. The cut comes as soon as the groups kept and reserved
        fill the batch (a refill that brings reserved groups included), so this only guards
        the count. Fresh groups go first, reserved ones last: a reserved group handed back
        again would wait a third step, its carried episodes then too old to reuse. Within
        each, skipped groups and backfills go first, then the latest started; they are
        handed back like a cut."""
        extra = self.have - self.plan.batch_size
        if extra <= 0:
            return
        by_preference = [
            (group, run)
            for protected in (False, True)
            for group in (self.skipped, self.backfilled, self.kept)
            for run in sorted(group, key=lambda r: -r.order)
            if run.protected is protected
        ]
        for group, run in by_preference[:extra]:
            group.remove(run)
            self.cut_runs.append(run)
        log.debug("Rollout %d: %d group(s) over the batch handed back", self.step, extra)

    def classify(self, run: GroupRun) -> None:
        outcomes = self.plan.counted(run.done_outcomes())
        rewards = [o.reward for o in outcomes]
        self.report.finished += 1
        self.report.zero_variance += not has_reward_variance(rewards)
        self.report.too_few_valid += len(outcomes) < self.plan.min_valid
        verdict = group_verdict(self.plan, self.filter, outcomes, lambda: self.to_samples(outcomes))
        if verdict is None:  # no dynamic sampling: counted, trained with no advantage
            self.skipped.append(run)
            return
        if verdict.keep:
            self.kept.append(run)
            return
        others = len(self.unfinished)  # `run` has left it
        needed = self.have + others < self.plan.batch_size
        if verdict.keep_when_insufficient and self.have + others + 1 <= self.plan.batch_size:
            self.backfilled.append(run)  # slime 624b824's rule: no extra round for it
        elif needed and (self.cut_done or len(self.runs) >= self.plan.max_groups):
            self.backfilled.append(run)  # no replacement may start: in the batch, untrained
            self.unwanted.add(run)
        else:
            self.report.filtered += 1
            self.report.drop_reasons[verdict.reason or "filtered"] += 1
            # Every episode's time, failed ones too: they ran as long and train nothing
            # either (`outcomes` holds only those that count in the group's statistics).
            self.report.filtered_seconds += sum(o.seconds for o in run.done_outcomes())

    def maybe_cut(self) -> None:
        if self.cut_done or not self.plan.cuts:
            return
        if self.have + self.reserved() < self.plan.batch_size:
            return
        self.cut_done = True
        now = asyncio.get_running_loop().time()
        for run in sorted(self.unfinished, key=lambda r: r.order):
            if not run.protected:
                self.unfinished.discard(run)
                self.cut(run, now)

    def cut(self, run: GroupRun, now: float) -> None:
        started = run.carried > 0
        for slot, task in enumerate(run.tasks):
            ticket = run.tickets[slot]
            if task is None or ticket is None:
                continue
            if task.done():  # finished before the cut was decided: keep what it got
                if not task.cancelled() and run.outcomes[slot] is None:
                    run.outcomes[slot] = task.result()
                started = started or run.outcomes[slot] is not None
                continue
            if ticket.started_at is not None:
                started = True
                self.report.episodes_cut += 1
                self.report.cut_seconds += ticket.elapsed(now)
            ticket.cut = True
            task.cancel()
            self.cancelled.append(task)
        (self.cut_runs if started else self.unstarted).append(run)

    def settle_cut_groups(self) -> None:
        """Hand the cut groups back to slime, then remember what they leave behind. In that
        order: a source that refuses them fails the step with nothing logged or kept for
        them yet, and the failed step names each finished episode once (`discard_finished`)."""
        self.report.unstarted = len(self.unstarted)
        self.source.give_back([r.prompt for r in self.cut_runs + self.unstarted])
        self.handed_back = True
        for run in self.cut_runs:
            first = run.prompt.key(0)
            finished = {}
            for slot, outcome in enumerate(run.outcomes):
                key = run.prompt.key(slot)
                # A failed episode is no outcome worth keeping: its reward is a stand-in, so
                # reused it would leave its group one task outcome short (or, under
                # zeroReward, count a stale 0); it runs again with the group, on-policy.
                if outcome is not None and key is not None and outcome.failure is None:
                    finished[key] = outcome
            seconds = sum(o.seconds for o in run.done_outcomes())
            if self.plan.policy == "carryOver":
                self.report.carried_over += 1
                # Its failed episodes are not kept (above): they run again with the group, so
                # their time trained nothing, as under `abort` (logged once as they failed).
                self.report.aborted_seconds += sum(
                    o.seconds for o in run.done_outcomes() if o.failure is not None
                )
            else:
                self.report.aborted += 1
                self.report.aborted_seconds += seconds
                for outcome in finished.values():
                    self.report.named.add(outcome.session_id)
                    log_discarded(
                        outcome,
                        GROUP_ABORTED,
                        "its group was cut (stragglerPolicy: abort) and "
                        "runs again whole when slime hands it back",
                    )
                finished = {}
            if first is not None:
                self.ctx.carry.put(self.step, first[0], finished)
            # Its carried episodes, if it came back with some, ran (and counted) in an earlier
            # step and train nothing here: counted again, they would skew the length bias.
            self.report.other_seconds += run.ran_seconds()

    async def abandon(self) -> None:
        """The step failed or was cancelled: stop every episode, hand every group back."""
        pending = [t for r in self.runs for t in r.tasks if t is not None and not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self.discard_finished()
        if not self.handed_back and self.runs and self.source.returns_supported():
            try:
                self.source.give_back([r.prompt for r in self.runs])
            except Exception:
                log.exception("handing the interrupted step's groups back to slime failed")
            else:
                log.warning(
                    "the train step was interrupted; its %d group(s) went back to slime's "
                    "data source",
                    len(self.runs),
                )

    def discard_finished(self) -> None:
        """The step failed: its finished episodes train nothing. Each task outcome is named
        once with its session id and its time counted, like a cut group's under `abort`;
        failed episodes were logged as they ended, and their time counts the same. A cut
        group already settled keeps what it left in the carry store. An episode carried over
        into the step is no loss: the rollout state saved after the previous step still
        holds it, and a restart from that step's checkpoint (slime's train.py dies with the
        step) reuses it. It goes back into the carry store, with its group's cut, so the
        process agrees with that state."""
        settled = set(self.cut_runs) if self.handed_back else set()
        for run in self.runs:
            if run in settled:
                continue
            first = run.prompt.key(0) if run.prompt.samples else None
            if first is not None:
                entries = {
                    key: entry
                    for slot, entry in (run.taken | run.stale).items()
                    if (key := run.prompt.key(slot)) is not None
                }
                self.ctx.carry.put_back(first[0], run.cut_step, entries)
            for slot, task in enumerate(run.tasks):
                if task is None or not task.done() or task.cancelled() or task.exception():
                    continue
                if run.outcomes[slot] is None:  # finished before its event was read
                    run.outcomes[slot] = task.result()
            for slot, outcome in enumerate(run.outcomes):
                if outcome is None:
                    continue
                if outcome.failure is not None:
                    # Its time trains nothing either, as a cut group's failed episode's
                    # (logged once as it failed).
                    self.ctx.recorder.discarded("aborted", outcome.seconds)
                    continue
                if slot in run.taken:
                    log.info(
                        "train episode kept: session=%s after %.1fs: carried over into train "
                        "step %d, which failed; the rollout state saved after step %d still "
                        "holds it, so a restart from that step's checkpoint reuses it",
                        outcome.session_id,
                        outcome.seconds,
                        self.step,
                        self.step - 1,
                    )
                    continue
                self.ctx.recorder.discarded("aborted", outcome.seconds)
                log_discarded(
                    outcome,
                    STEP_FAILED,
                    "it finished in a train step that then failed, so it trains nothing",
                )

    def batch(self) -> list[list[EpisodeOutcome]]:
        trained = sorted(self.kept + self.backfilled + self.skipped, key=lambda r: r.order)
        self.report.ran_episodes = [o for run in self.runs for o in run.ran_outcomes()]
        for run in self.runs:
            if run not in trained and run not in self.cut_runs and run.finished:
                self.report.other_seconds += run.ran_seconds()
        self.report.kept, self.report.backfilled = len(self.kept), len(self.backfilled)
        self.report.skipped = len(self.skipped)
        for run in self.runs:
            for _, outcome in run.stale.values():
                # Its time trained nothing, like an expired one's (`fill_batch`). Finished
                # work thrown away: named once, so that its agent session (AgentCore, S3
                # result key) can be told from a lost one.
                self.report.aborted_seconds += outcome.seconds
                log_discarded(
                    outcome,
                    CARRY_STALE,
                    f"kept for its cut group, it is {self.step - outcome.policy_version} "
                    f"updates old, more than maxPolicyLag {self.plan.max_policy_lag}: "
                    "its prompt runs again",
                )
        # Reused once, by the step that settles its group (trained, or filtered); a group
        # handed back again (cut when more returned groups came than the batch holds, or
        # trimmed) takes its carried episodes back to the store, and they count when it trains.
        self.report.episodes_reused = sum(r.carried for r in self.runs if r not in self.cut_runs)
        groups = []
        for r in trained:
            done = r.done_outcomes()
            if r in self.unwanted:
                # In the batch only to fill it (slime counts its rollouts): no token trains,
                # so its time, carried episodes' and failed ones' included, is thrown away
                # like a filtered group's, not trained.
                self.report.filtered_seconds += sum(o.seconds for o in done)
                groups.append([self.untrained(self.settle_age(o, backfill=True)[0]) for o in done])
                self.length_bias_untrained(r, range(len(done)))
                continue
            settled = [self.settle_age(o) for o in done]
            groups.append([o for o, _ in settled])
            for o, trains in settled:
                if trains:
                    self.report.trained_seconds.append(o.seconds)
                elif o.failure is not None:
                    # One stand-in slot, loss mask 0: none of it trains, whatever its
                    # stand-in reward does for the group (`zeroReward`).
                    self.report.failed_seconds += o.seconds
            untrained = [i for i, (_, trains) in enumerate(settled) if not trains]
            self.length_bias_untrained(r, untrained)
        return groups

    def length_bias_untrained(self, run: GroupRun, slots: Sequence[int]) -> None:
        """A trained group's episodes of which no token trains are no trained episodes for
        the length bias: one the step ran counts among the others, a carried one not at all
        (the step that ran it counted it)."""
        for slot in slots:
            if (outcome := run.ran(slot)) is not None:
                self.report.other_seconds.append(outcome.seconds)

    @staticmethod
    def untrained(outcome: EpisodeOutcome) -> EpisodeOutcome:
        """A backfill's episode: in the batch (slime counts its rollouts), no token trained."""
        return replace(outcome, samples=[masked(s) for s in outcome.samples])

    def settle_age(
        self, outcome: EpisodeOutcome, *, backfill: bool = False
    ) -> tuple[EpisodeOutcome, bool]:
        """Count a trained episode's age and exclusion; under `offPolicyTokens: mask`, an
        episode sampled by an older policy comes back with every loss mask 0 (its reward
        still counts in its group; its logprobs stay as sampled) and its time counts as
        masked, unless it is a backfill's, which counts as filtered. A backfill's stale
        tokens count as masked under either setting: the backfill trains none of them.
        With it, whether it trains: not a failed one (its stand-in slot's loss mask is 0),
        nor one the merge masked whole (its time counts as masked too), nor one masked here.

        A backfill's episode is no trained group's: it is not counted in `trained_episodes`,
        `excluded` (whose share is of the trained groups' episodes) or `policy_lags` (the age
        of what trains). Its group was dropped and every loss mask of it is 0, so neither its
        exclusion nor its age reaches the update; counted, they would skew the
        excluded share and the lag histogram with episodes that train nothing."""
        report = self.report
        trains = outcome.failure is None
        lag = max(0, self.step - outcome.policy_version)
        if not backfill:
            report.trained_episodes += 1
            if outcome.failure is not None and self.plan.exclude_failed:
                report.excluded[outcome.failure] += 1
            report.policy_lags.append(lag)
        tokens = sum(sum(s.loss_mask) for s in outcome.samples)
        if not tokens:
            if trains and not backfill:
                # A task outcome the merge masked whole (every completion sampled under
                # other weights or without usable logprobs, some perhaps aborted: one whose
                # every call was aborted failed as no_turns): its reward counts in its
                # group, none of its tokens trains.
                report.masked_seconds += outcome.seconds
            return outcome, False
        if lag == 0:
            return outcome, trains
        if not self.plan.mask_stale and not backfill:
            report.stale_tokens_trained += tokens
            return outcome, trains
        report.stale_tokens_masked += tokens
        if not backfill:
            # No token of it trains: its time is no trained time, whatever its reward does
            # for its group's advantages (a partly masked episode, a turn whose logprobs were
            # unusable, still trains the rest and counts as trained).
            report.masked_seconds += outcome.seconds
        return replace(outcome, samples=[masked(s) for s in outcome.samples]), False


def renumbered(outcome: EpisodeOutcome, rollout_id: int) -> EpisodeOutcome:
    """The episode with every sample carrying `rollout_id` (nothing else changes)."""
    return replace(outcome, samples=[replace(s, rollout_id=rollout_id) for s in outcome.samples])


def masked(sample: SampleFields) -> SampleFields:
    """The sample with no token trained: loss mask all 0, everything else as it was."""
    return replace(sample, loss_mask=[0] * len(sample.loss_mask))


def group_verdict(
    plan: SamplingPlan,
    group_filter: GroupFilter | None,
    counted: Sequence[EpisodeOutcome],
    samples: Callable[[], list[Any]],
) -> Verdict | None:
    """What dynamic sampling makes of a finished group, given the episodes that count in it
    (`plan.counted`): fewer than `minValidSamplesPerGroup` is a drop (`too_few_valid`), or,
    without a filter, None (the group is skipped: trained with no advantage); otherwise the
    filter's verdict, KEEP without one."""
    if len(counted) < plan.min_valid:
        return None if group_filter is None else Verdict(keep=False, reason=TOO_FEW_VALID)
    if group_filter is None:
        return KEEP
    return group_filter([o.reward for o in counted], samples)


async def fill_batch(
    ctx: RolloutContext,
    source: DataSource,
    plan: SamplingPlan,
    *,
    spec: EpisodeSpec,
    group_filter: GroupFilter | None,
    to_samples: SampleConverter,
    step: int,
    last: bool = False,
) -> tuple[list[list[EpisodeOutcome]], StepReport]:
    """One train step's groups (at most `plan.batch_size`, in the order they were started).
    `last`: slime trains no step after this one, so what the carry store still holds once
    the batch is assembled never trains and is thrown away (counted, not saved)."""
    run = _Step(
        ctx, source, plan, spec=spec, group_filter=group_filter, to_samples=to_samples, step=step
    )
    try:
        await run.run()
    except BaseException:
        await asyncio.shield(run.abandon())
        raise
    groups = run.batch()
    for outcome in ctx.carry.expire(step):  # finished work the source never handed back
        run.report.aborted_seconds += outcome.seconds
        log_discarded(
            outcome,
            CARRY_EXPIRED,
            f"kept for its cut group, which slime's data source did not hand back within "
            f"{TTL_STEPS} steps",
        )
    if last:
        # Nothing comes after this step to reuse them: the finished episodes of the groups it
        # cut, and of groups cut before and not handed back yet, train nothing. Counted here;
        # left in the store, a run extended from this step's checkpoint would reuse (and
        # count) them once more.
        for outcome in ctx.carry.drain():
            run.report.aborted_seconds += outcome.seconds
            run.report.named.add(outcome.session_id)
            log_discarded(
                outcome,
                RUN_ENDED,
                f"kept for its cut group, but step {step} is the run's last (slime's "
                "--num-rollout), so it trains nothing",
            )
    if len(groups) < plan.batch_size:
        log.warning(
            "Rollout %d: only %d of %d groups (slime's data source ran out of prompts)",
            step,
            len(groups),
            plan.batch_size,
        )
    return groups, run.report
