"""Train and eval batches from slime's point of view: inputs in, slime's outputs back.

Train: the groups slime's data source hands over (rollout_batch_size prompts x
n_samples_per_prompt), one episode per sample, and back `list[list[Sample]]` grouped by
prompt. No padding is added: every episode, failed or not, yields at least one sample
with its own `rollout_id`, so slime sees exactly rollout_batch_size x n_samples_per_prompt
rollouts, which `--global-batch-size` already divides (agentrl validates that).
Eval: every eval set of the spec, and back `{name: {"rewards", "truncated", "samples"}}`
where rewards and truncated are per episode in prompt order (what slime's eval/<name>
mean and pass@k expect) and samples are all merged sequences.
Both return only once the model engines are idle (`settle_engines`): slime offloads the
engines or updates their weights right after, and a request still running there trips
SGLang's "server is idle" assertion and crashes the scheduler (rollout-anchors §3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.rollout.batch import RolloutContext, batch_stats, group_samples, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.settings import eval_spec, load_eval_groups, train_spec
from agentrl.bundle.rollout.types import SlimeTypes, Status, to_sample
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
    groups: Sequence[Sequence[EpisodeInput]],
    *,
    types: SlimeTypes,
) -> Any:
    ctx = await rt.context()
    outcomes = await run_groups(ctx, groups, train_spec(config.spec, args), "train")
    await settle_engines(ctx, "Rollout", rollout_id)
    stats = batch_stats(outcomes)
    ctx.recorder.batch_finished("train", rollout_id, stats.reward_mean)
    await rt.flush_and_drain()
    log.info(stats.summary("Rollout", rollout_id))
    samples = [[to_sample(s, types) for s in g] for g in group_samples(outcomes)]
    metrics = {
        "agentrl/episodes": stats.episodes,
        "agentrl/failed_episodes": stats.failed,
        "agentrl/failed_ratio": stats.failed / stats.episodes if stats.episodes else 0.0,
        "agentrl/sequences": stats.sequences,
        "agentrl/episode_reward_mean": stats.reward_mean,
        # Counted by merge_turns: never silently trained on, never silently lost.
        "agentrl/masked_turns": stats.masked_turns,
        "agentrl/dropped_over_budget": stats.dropped_over_budget,
        "agentrl/clipped_sequences": stats.clipped_segments,
    }
    return types.train_output(samples=samples, metrics=metrics)


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
    data: dict[str, dict[str, Any]] = {}
    metrics: dict[str, Any] = {}
    all_outcomes = []
    # Sets run one after another; within a set episodes share the global semaphore.
    for i, eval_set in enumerate(sets):
        key = (eval_set.name, eval_set.path, eval_set.samples_per_prompt)
        if key not in _eval_cache:
            _eval_cache[key] = load_eval_groups(eval_set, f"spec.data.eval[{i}]")
        outcomes = await run_groups(ctx, _eval_cache[key], eval_spec(config.spec, eval_set), "eval")
        all_outcomes.extend(outcomes)
        flat = [o for g in outcomes for o in g]
        data[eval_set.name] = {
            "rewards": [o.reward for o in flat],
            "truncated": [any(s.status is Status.TRUNCATED for s in o.samples) for o in flat],
            "samples": [to_sample(s, types) for g in group_samples(outcomes) for s in g],
        }
        stats = batch_stats(outcomes)
        metrics[f"eval/{eval_set.name}/failed_ratio"] = stats.failed / max(1, stats.episodes)
        metrics[f"eval/{eval_set.name}/episodes"] = stats.episodes
    await settle_engines(ctx, "Eval", rollout_id)
    stats = batch_stats(all_outcomes)
    ctx.recorder.batch_finished("eval", rollout_id, stats.reward_mean)
    await rt.flush_and_drain()
    log.info(stats.summary("Eval", rollout_id))
    return types.eval_output(data=data, metrics=metrics)
