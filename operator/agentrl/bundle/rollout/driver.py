"""Train and eval batches from slime's point of view: inputs in, slime's outputs back.

Train: groups from slime's data source (rollout_batch_size prompts x n_samples_per_prompt,
more when over-sampling; `sampling.fill_batch` decides which are trained), one episode per
sample, and back `list[list[Sample]]` grouped by prompt. No padding is added: every
episode, failed or not, yields at least one sample with its own `rollout_id`, so slime sees
exactly rollout_batch_size x n_samples_per_prompt rollouts, which `--global-batch-size`
already divides (agentrl validates that).
Eval: every eval set of the spec, and back `{name: {"rewards", "truncated", "samples"}}`
over the episodes with a task outcome (rewards and truncated per episode in prompt order,
samples their merged sequences): failed episodes are counted in the metrics, not averaged
in as 0 (a set where every episode failed has no entry).
A train step ends by writing what a restart from its checkpoint needs (`resume.py`: the
prompt cursor, the groups handed back, the carried-over episodes) under slime's `--save`;
the first train step of a process restores it from `--load`.
Both return only once the model engines are idle (`settle_engines`): slime offloads the
engines or updates their weights right after, and a request still running there trips
SGLang's "server is idle" assertion and crashes the scheduler (docs/rollout.md, "Concurrency
and pacing").
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.rollout.batch import (
    STEP_FAILED,
    RolloutContext,
    batch_stats,
    group_samples,
    log_discarded,
    pass_at_k,
    run_groups,
)
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeOutcome
from agentrl.bundle.rollout.filters import load_filter
from agentrl.bundle.rollout.inputs import eval_spec, load_eval_groups, train_spec, wandb_run_url
from agentrl.bundle.rollout.resume import resume, save_step
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.sampling import SamplingPlan, StepReport, fill_batch
from agentrl.bundle.rollout.source import DataSource
from agentrl.bundle.rollout.types import SlimeTypes, to_sample
from agentrl.bundle.session import SessionError

log = logging.getLogger("agentrl.rollout")

QUIESCE_TIMEOUT_S = 60.0  # how long a batch end waits for the engines to go idle


async def settle_engines(ctx: RolloutContext, kind: str, rollout_id: int) -> None:
    """Every episode has closed its session, but closing only queues the aborts of its
    engine requests, and an abort that reaches SGLang before the request is a no-op: abort
    everything still running and wait (bounded) until the engines are idle. Logged once
    (a warning) if they are not; the batch is returned either way."""
    try:
        report = await ctx.sessions.quiesce_engines(QUIESCE_TIMEOUT_S)
    except SessionError as exc:
        log.warning(
            "%s %s: could not make the engines idle (%s); requests may still be running at "
            "weight update",
            kind,
            rollout_id,
            exc,
        )
        return
    if not report.idle:
        log.warning(
            "%s %s: engines not idle %gs after the batch (%d gateway call(s) in flight, "
            "engines report %s request(s) on %d worker(s)); continuing",
            kind,
            rollout_id,
            QUIESCE_TIMEOUT_S,
            report.in_flight,
            "an unknown number of" if report.engine_requests is None else report.engine_requests,
            report.workers,
        )


_eval_cache: dict[tuple[str, str, int], list[list[EpisodeInput]]] = {}


async def train_batch(
    rt: RolloutRuntime,
    config: RuntimeConfig,
    args: Any,
    rollout_id: int,
    data_source: Any,
    *,
    types: SlimeTypes,
) -> Any:
    """One train step on slime's `data_source` (its get_samples/add_samples)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    grpo = config.spec.grpo
    plan = SamplingPlan.from_spec(grpo, int(args.rollout_batch_size))
    source = DataSource(data_source)
    if plan.cuts:
        source.check_returns()  # before any episode starts
    group_filter = load_filter(grpo.dynamic_sampling_filter, args)
    ctx = await rt.context()
    if not ctx.resumed:  # a restarted job: what its checkpoint's step left behind
        ctx.resumed = True
        if resume(args, data_source, ctx.carry, rollout_id, ctx.recorder):
            # What the load counted leaves the process now: the state no longer holds it.
            await rt.flush_and_drain()
    ctx.recorder.run_link(wandb_run_url(args), getattr(args, "wandb_group", None))

    def to_samples(outcomes: Sequence[EpisodeOutcome]) -> list[Any]:
        return [to_sample(s, types) for o in outcomes for s in o.samples]

    outcomes, report = await fill_batch(
        ctx,
        source,
        plan,
        spec=replace(train_spec(config.spec, args), policy_version=rollout_id),
        group_filter=group_filter,
        to_samples=to_samples,
        step=rollout_id,
        last=last_step(args, rollout_id),
    )
    # From here the batch is assembled and its episodes have stopped: a step that fails now
    # (its state not written, or the call interrupted, a cancellation, while the engines
    # settle) throws them away; only a step that gets past both records its report.
    try:
        await settle_engines(ctx, "Rollout", rollout_id)
        ctx.generated = rollout_id
        # Before slime trains and checkpoints this step: a checkpoint of it resumes from here.
        await asyncio.to_thread(save_step, args, data_source, ctx.carry, rollout_id)
    except BaseException:
        discard_unsaved(ctx, report)
        raise
    stats = batch_stats(outcomes)
    record_step(ctx, report)
    ctx.recorder.batch_finished(
        "train", rollout_id, stats.reward_mean, total_steps=config.spec.grpo.num_rollouts
    )
    ctx.recorder.step_seconds("train", loop.time() - started)
    await rt.flush_and_drain()
    log.info(stats.summary("Rollout", rollout_id))
    if plan.in_flight > plan.batch_size or group_filter is not None:
        log.info(report.summary(rollout_id))
    samples = [[to_sample(s, types) for s in g] for g in group_samples(outcomes)]
    metrics = {
        "agentrl/episodes": stats.episodes,
        "agentrl/failed_episodes": stats.failed,
        "agentrl/failed_ratio": stats.failed / stats.episodes if stats.episodes else 0.0,
        "agentrl/sequences": stats.sequences,
        # Counted by merge_turns: never silently trained on, never silently lost.
        "agentrl/masked_turns": stats.masked_turns,
        "agentrl/dropped_over_budget": stats.dropped_over_budget,
        "agentrl/clipped_sequences": stats.clipped_segments,
        "agentrl/groups_kept": report.kept,
        "agentrl/groups_filtered": report.filtered,
        "agentrl/groups_backfilled": report.backfilled,
        "agentrl/groups_cut": report.aborted + report.carried_over,
        "agentrl/episodes_cut": report.episodes_cut,
        "agentrl/zero_variance_share": report.zero_variance_share,
        # Infrastructure failures left out of their groups' statistics (failedEpisodes).
        "agentrl/excluded_episodes": sum(report.excluded.values()),
        "agentrl/excluded_share": report.excluded_share,
        "agentrl/groups_skipped": report.skipped,
        "agentrl/groups_too_few_valid": report.too_few_valid,
        # Token age: carried-over episodes are sampled by an older policy.
        "agentrl/policy_lag_max": max(report.policy_lags, default=0),
        "agentrl/stale_tokens_masked": report.stale_tokens_masked,
        "agentrl/stale_tokens_trained": report.stale_tokens_trained,
        "agentrl/stale_episodes_restarted": report.stale_restarted,
    }
    if not math.isnan(stats.reward_mean):  # no task outcome, no mean (the gauge says NaN)
        metrics["agentrl/episode_reward_mean"] = stats.reward_mean
    if report.length_bias is not None:
        metrics["agentrl/length_bias"] = report.length_bias
    # The keys slime's own dynamic filter logs, so existing dashboards keep working.
    for reason, n in report.drop_reasons.items():
        metrics[f"rollout/dynamic_filter/drop_{reason}"] = n
    return types.train_output(samples=samples, metrics=metrics)


def last_step(args: Any, rollout_id: int) -> bool:
    """Whether slime trains no step after `rollout_id`: its train loops run rollout ids
    `range(args.start_rollout_id, args.num_rollout)` (agentrl always renders --num-rollout,
    from spec.grpo.numRollouts), so the last one is num_rollout - 1. train_async.py, which
    generates one step ahead, starts `rollout_id + 1` only while it is below num_rollout, so
    num_rollout - 1 is its last rollout too (both pinned commits). `--num-epoch` (which slime
    turns into num_rollout only in the driver's copy of the args, not the rollout manager's)
    is refused in runtime.extraArgs. Unknown (no num_rollout) is not the last.
    https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/train.py#L49
    https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/train_async.py#L32-L40
    https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/train_async.py#L31-L39"""
    total = getattr(args, "num_rollout", None)
    return isinstance(total, int) and rollout_id >= total - 1


def discard_unsaved(ctx: RolloutContext, report: StepReport) -> None:
    """The step failed after its batch was assembled: its rollout state could not be saved,
    or the call was interrupted (cancelled) while the engines settled or the state was being
    written. The step fails with it (slime's train.py dies with the step, and a restart runs
    it again from the previous step's state), so none of its batch trains, and its report is
    not recorded. Every finished episode it ran is thrown away, as a step whose filter raised
    throws its own away (`sampling._Step.discard_finished`): its time under `aborted`, each
    task outcome named once. What it took from the carry store (reused, too old, expired, or
    thrown away as the run's last step) is not counted: the previous step's state still
    holds it, and the step run again counts it. Episodes cut while running counted
    themselves."""
    for outcome in report.ran_episodes:
        ctx.recorder.discarded("aborted", outcome.seconds)
        # A failed one was logged once, as it failed; one named as the batch was assembled
        # (its group cut under `abort`, drained as the run's last step's) is not named again.
        if outcome.failure is None and outcome.session_id not in report.named:
            log_discarded(
                outcome,
                STEP_FAILED,
                "it finished in a train step that failed before its rollout state was saved "
                "(the write failed, or the call was interrupted), so it trains nothing",
            )


def record_step(ctx: RolloutContext, report: StepReport) -> None:
    rec = ctx.recorder
    for outcome, n in (
        ("kept", report.kept),
        ("filtered", report.filtered),
        ("backfilled", report.backfilled),
        ("skipped", report.skipped),
        ("aborted", report.aborted),
        ("carried_over", report.carried_over),
    ):
        rec.groups(outcome, n)
    rec.discarded("filtered", report.filtered_seconds)
    rec.discarded("masked", report.masked_seconds)
    rec.discarded("failed", report.failed_seconds)
    # Episodes cut while running count themselves (reason "cut", as they stop).
    rec.discarded("aborted", report.aborted_seconds)
    rec.step_shape(report.zero_variance_share, report.length_bias)
    rec.signal(
        report.excluded,
        report.excluded_share,
        report.policy_lags,
        masked=report.stale_tokens_masked,
        trained=report.stale_tokens_trained,
        restarted=report.stale_restarted,
    )


async def eval_batch(
    rt: RolloutRuntime, config: RuntimeConfig, rollout_id: int, types: SlimeTypes
) -> Any:
    ctx = await rt.context()
    sets = config.spec.data.eval
    if not sets:
        raise ValueError(
            "slime asked for an evaluation but spec.data.eval is empty; add an eval set "
            "or drop --eval-interval from runtime.extraArgs"
        )
    started = asyncio.get_running_loop().time()
    # slime's train.py (both supported commits) evaluates rollout id N before any training
    # only at N = 0 (and for an eval-only run), on the weights train step 0 samples with;
    # every other eval of N comes after step N trained and its weights were pushed, so the
    # engines hold the weights train step N + 1 samples with.
    # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/train.py#L49-L91
    version = rollout_id + 1 if ctx.generated == rollout_id else rollout_id
    data: dict[str, dict[str, Any]] = {}
    metrics: dict[str, Any] = {}
    all_outcomes = []
    # Sets run one after another; within a set episodes share the global semaphore.
    for i, eval_set in enumerate(sets):
        key = (eval_set.name, eval_set.path, eval_set.samples_per_prompt)
        if key not in _eval_cache:
            _eval_cache[key] = load_eval_groups(eval_set, f"spec.data.eval[{i}]")
        spec = replace(eval_spec(config.spec, eval_set), policy_version=version)
        outcomes = await run_groups(ctx, _eval_cache[key], spec, "eval")
        all_outcomes.extend(outcomes)
        stats = batch_stats(outcomes)
        # slime logs eval/<name> as the mean of `rewards` and its per-sample figures
        # (response_len, zero_std, truncated_ratio) over `samples`:
        # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/observability/rollout_metrics.py#L223-L245
        # A failed episode (an agent crash, a timeout, the gateway) is no task outcome: its
        # stand-in reward 0 and 1-token sample would make eval/<name> a mix of model quality
        # and infrastructure luck. They are left out and counted (failed_ratio, episodes),
        # as agentrl_eval_reward_mean does; a set with no task outcome is left out of `data`
        # altogether, since slime divides by len(rewards).
        scored = [o for g in outcomes for o in g if o.failure is None]
        if scored:
            data[eval_set.name] = {
                "rewards": [o.reward for o in scored],
                # Per episode, over all its sequences: one left out of `samples` because
                # it trains nothing still truncated the episode.
                "truncated": [o.truncated for o in scored],
                "samples": [to_sample(s, types) for o in scored for s in o.samples],
            }
        else:
            log.warning(
                "Eval %s: every episode of eval set %r failed (%d); no eval/%s this pass",
                rollout_id,
                eval_set.name,
                stats.failed,
                eval_set.name,
            )
        ctx.recorder.eval_set_finished(eval_set.name, rollout_id, stats.reward_mean)
        metrics[f"eval/{eval_set.name}/failed_ratio"] = stats.failed / max(1, stats.episodes)
        # The same figure as slime's eval/<name>, kept under the name dashboards know.
        if not math.isnan(stats.reward_mean):  # every episode failed: no mean to log
            metrics[f"eval/{eval_set.name}/task_reward_mean"] = stats.reward_mean
        metrics[f"eval/{eval_set.name}/episodes"] = stats.episodes
        # slime's own pass@k comes with --log-passrate, which is refused (its train-side
        # pass@k asserts one sample per episode): agentrl logs the eval figure itself. A
        # failed episode is no pass there; a set with no task outcome gets no pass@k (0
        # would say the model never solved anything when the agent never ran).
        for k, value in (pass_at_k(outcomes) if scored else {}).items():
            metrics[f"eval/{eval_set.name}/pass@{k}"] = value
    await settle_engines(ctx, "Eval", rollout_id)
    stats = batch_stats(all_outcomes)
    ctx.recorder.batch_finished("eval", rollout_id, stats.reward_mean)
    ctx.recorder.step_seconds("eval", asyncio.get_running_loop().time() - started)
    await rt.flush_and_drain()
    log.info(stats.summary("Eval", rollout_id))
    return types.eval_output(data=data, metrics=metrics)
