"""Episodes and batches on the event loop: outcomes, failures, bounds, cancellation.

The loop's clock is fake (looptime), so a 30 s agent timeout costs no wall time and no
test depends on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentrl.bundle.rewards import post_process_rewards
from agentrl.bundle.rollout.batch import RolloutContext, batch_stats, group_samples, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec
from agentrl.bundle.rollout.types import Status, slime_types, to_sample

from .doubles import FakeGateway, StubAgent, runtime_config

SPEC = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 64}, 64, timeout_s=30.0, model_id="m")


def inputs(behaviors: list[list[dict[str, Any]]]) -> list[list[EpisodeInput]]:
    index = 0
    groups = []
    for g, group in enumerate(behaviors):
        row = []
        for meta in group:
            row.append(EpisodeInput("prompt", meta, None, group_index=g, index=index))
            index += 1
        groups.append(row)
    return groups


def context(max_concurrent: int = 4, **gw: Any) -> tuple[RolloutContext, FakeGateway, StubAgent]:
    gateway = FakeGateway(**gw)
    agent = StubAgent(gateway)
    ctx = RolloutContext(gateway, agent, asyncio.Semaphore(max_concurrent))
    return ctx, gateway, agent


@pytest.mark.looptime
async def test_successful_episodes_become_trainable_samples_sharing_a_rollout_id() -> None:
    ctx, gateway, _agent = context()
    meta = {"behavior": "ok", "turns": 3, "reward": 0.75, "task": {"q": "2+2"}}
    outcomes = await run_groups(ctx, inputs([[meta, {"behavior": "fanout"}]]), SPEC, "train")

    ok, fan = outcomes[0]
    assert ok.failure is None and ok.reward == 0.75
    (sample,) = ok.samples
    assert sample.loss_mask.count(1) == 6  # three turns x two sampled tokens
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
    assert sample.metadata["task"] == {"q": "2+2"}
    assert sample.metadata["gateway_session_id"] == ok.session_id == sample.session_id
    # Identical prompts (sub-agents) are two sequences of one episode: one rollout_id.
    assert len(fan.samples) == 2
    assert {s.rollout_id for s in fan.samples} == {fan.samples[0].rollout_id}
    assert fan.samples[0].rollout_id != sample.rollout_id
    assert [s.status for s in fan.samples] == [Status.COMPLETED, Status.TRUNCATED]
    # The engine's weight version of each turn reaches slime's Sample.weight_versions.
    assert [s.weight_versions for s in fan.samples] == [("5",), ("5",)]
    assert to_sample(fan.samples[0], slime_types(prefer_plain=True)).weight_versions == ["5"]
    assert sample.weight_versions == ()  # no version reported: none invented
    assert all(s.group_index == 0 for g in group_samples(outcomes) for s in g)
    breaks = ctx.recorder.take().counters
    assert breaks[("trace_breaks", ("identical_prompt",))] == 1  # the fan-out's second chain
    # Every session was closed, and ids are unguessable and distinct.
    assert sorted(gateway.closed) == sorted(gateway.created) and not gateway.open
    assert len(set(gateway.created)) == 2 and all(len(s) >= 43 for s in gateway.created)


@pytest.mark.looptime
async def test_a_segment_that_trains_no_token_adds_no_sample_beside_trained_ones() -> None:
    # The engine aborted a call after two tokens and the agent asked again: the partial
    # completion is its own segment, every token masked. Beside the retry's trained segment it
    # would only add a sample to slime's per-sample loss mean (diluting the episode's real
    # one), so it is left out. An episode none of whose segments trains (answered, but
    # without usable logprobs) keeps one, its last (its reward still counts once in its
    # group, as a failed episode's stand-in does).
    ctx, _gateway, _agent = context()
    behaviors = [{"behavior": "aborted_retry", "reward": 1.0}, {"behavior": "all_masked"}]
    ((retried, masked),) = await run_groups(ctx, inputs([behaviors]), SPEC, "train")

    (sample,) = retried.samples
    assert sample.tokens[-1] == 50 and sample.loss_mask == [1]
    assert sample.metadata["segment_index"] == 1  # the merge's index, kept
    assert retried.merge is not None and retried.merge.mask_reasons == {"aborted": 1}
    assert masked.failure is None and masked.merge is not None
    assert masked.merge.segments == 2  # two conversations, both untrained...
    (kept,) = masked.samples  # ...hand slime one sample, the last, not one per segment
    assert kept.tokens[-1] == 50 and kept.loss_mask == [0]
    assert kept.metadata["segment_index"] == 1 and kept.reward == 1.0
    stats = batch_stats([[retried, masked]])
    assert stats.masked_turns == 3 and stats.sequences == 2


@pytest.mark.looptime
async def test_agent_gets_metadata_verbatim_plus_session_block() -> None:
    ctx, gateway, agent = context()
    meta = {"behavior": "ok", "nested": {"a": [1, 2]}}
    await run_groups(ctx, inputs([[meta]]), SPEC, "train")

    (request,) = agent.requests
    payload = dict(request.payload)
    rollout = payload.pop("_rollout")
    assert payload == meta and "_rollout" not in meta  # the row itself is not mutated
    assert rollout["session_id"] == request.session_id == gateway.created[0]
    assert rollout["base_url"].endswith(f"/sessions/{request.session_id}/v1")
    assert rollout["model_id"] == "m"
    assert rollout["sampling_params"] == {"temperature": 1.0, "max_tokens": 64}
    assert gateway.sampling[request.session_id] == SPEC.sampling_params
    assert "api_key" not in repr(request)  # the token stays out of reprs and logs


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("meta", "gw", "reason"),
    [
        ({"behavior": "hang"}, {}, "timeout"),
        ({"behavior": "own_timeout"}, {}, "agent_error"),
        ({"behavior": "error"}, {}, "agent_error"),
        ({"behavior": "bad_result"}, {}, "bad_result"),
        ({"behavior": "no_turns"}, {}, "no_turns"),
        ({"behavior": "all_aborted"}, {}, "no_turns"),
        ({"behavior": "ok"}, {"fail_create": 1}, "gateway_error"),
    ],
)
async def test_failures_become_one_zero_gradient_sample_counted_and_logged_once(
    meta: dict[str, Any], gw: dict[str, Any], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    ctx, gateway, _ = context(**gw)
    outcomes = await run_groups(ctx, inputs([[meta, {"behavior": "ok"}]]), SPEC, "train")

    failed, ok = outcomes[0]
    assert failed.failure == reason and ok.failure is None
    (sample,) = failed.samples
    assert sample.reward == 0.0 and sample.status is Status.FAILED
    assert sample.loss_mask == [0] and sample.rollout_log_probs == [0.0]
    assert sample.response_length == 1 and sample.metadata["episode_error"] == reason
    lines = [r.getMessage() for r in caplog.records if failed.session_id in r.getMessage()]
    assert len(lines) == 1 and reason in lines[0]
    assert not any(ok.session_id in r.getMessage() for r in caplog.records)
    delta = ctx.recorder.take()
    assert delta.counters[("failed_sessions", ("train", reason))] == 1
    assert delta.counters[("episodes", ("train", "failed"))] == 1
    assert delta.counters[("episodes", ("train", "succeeded"))] == 1
    assert not gateway.open  # closed even on timeout


async def test_an_agent_failure_quoting_its_payload_logs_no_session_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An agent's failure report is its own text, and a validation error of its payload
    quotes the payload: the episode's gateway token went into the failure's log line."""
    ctx, _, agent = context()
    outcomes = await run_groups(ctx, inputs([[{"behavior": "echo_payload"}]]), SPEC, "train")

    ((failed,),) = outcomes
    (request,) = agent.requests
    token = request.payload["_rollout"]["api_key"]
    assert failed.failure == "agent_error" and len(token) > 16
    assert "bad payload" in failed.message and "'api_key': '<redacted>'" in failed.message
    assert token not in failed.message and token not in caplog.text
    assert failed.session_id in caplog.text  # the line is still there, with its session id


@pytest.mark.looptime
async def test_the_backends_own_timeout_is_not_reported_as_the_episode_deadline() -> None:
    ctx, _, _ = context()
    outcomes = await run_groups(
        ctx, inputs([[{"behavior": "own_timeout"}, {"behavior": "hang"}]]), SPEC, "train"
    )
    own, deadline = outcomes[0]
    assert own.failure == "agent_error"
    assert "request of the agent backend timed out" in own.message
    assert "before the episode deadline of 30s" in own.message
    assert deadline.failure == "timeout" and deadline.message == "no result within 30s"


@pytest.mark.looptime
async def test_one_semaphore_bounds_train_and_eval_together() -> None:
    ctx, gateway, agent = context(max_concurrent=3)
    train = inputs([[{"behavior": "ok"}] * 4] * 3)
    evals = inputs([[{"behavior": "fanout"}] * 5] * 2)
    await asyncio.gather(
        run_groups(ctx, train, SPEC, "train"), run_groups(ctx, evals, SPEC, "eval")
    )
    assert len(agent.requests) == 22
    assert agent.max_live == 3  # reached, never exceeded
    assert gateway.max_open <= 3


@pytest.mark.looptime
async def test_cancelling_a_batch_closes_every_session_and_stops_agents(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrl.rollout")
    ctx, gateway, agent = context(max_concurrent=2)
    task = asyncio.create_task(run_groups(ctx, inputs([[{"behavior": "hang"}] * 5]), SPEC, "eval"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert agent.live == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(agent.cancelled) == 2  # the two live ones; the queued three never started
    assert not gateway.open and sorted(gateway.closed) == sorted(gateway.created)
    delta = ctx.recorder.take()
    assert delta.counters[("failed_sessions", ("eval", "cancelled"))] == 2
    assert delta.gauges[("sessions_in_flight", ("eval",))] == 0
    # Counted as failures, so logged like failures: once each, naming its session.
    lines = [r.getMessage() for r in caplog.records if "episode failed" in r.getMessage()]
    assert sorted(lines) == sorted(
        f"eval episode failed: session={sid} reason=cancelled: the batch was cancelled "
        "while it ran (its agent was stopped)"
        for sid in gateway.created
    )


@pytest.mark.looptime
async def test_batch_stats_and_summary_line() -> None:
    ctx, _, _ = context()
    metas = [
        {"behavior": "ok", "reward": 1.0},
        {"behavior": "error"},
        {"behavior": "fanout", "reward": 0.5},
    ]
    outcomes = await run_groups(ctx, inputs([metas]), SPEC, "train")
    stats = batch_stats(outcomes)
    assert stats.summary("Rollout", 7) == (
        "Rollout 7 batch: episodes=3 (succeeded=2 failed=1) sequences=4"
    )
    # Over the episodes that reported a reward: a failure's stand-in 0 is no reward.
    assert stats.reward_mean == pytest.approx(0.75)


def test_an_interrupted_call_returns_only_after_the_batch_cleaned_up() -> None:
    from agentrl.bundle.rollout.runtime import LoopThread

    ctx, gateway, agent = context(max_concurrent=2)
    thread = LoopThread()
    try:
        batch = run_groups(ctx, inputs([[{"behavior": "hang"}] * 3]), SPEC, "train")
        with pytest.raises(TimeoutError, match="did not finish"):
            thread.call(batch, timeout=0.5)
        # No waiting here: the call itself waited for the cancellation to finish.
        assert len(agent.cancelled) == 2 and not gateway.open
        assert sorted(gateway.closed) == sorted(gateway.created)
    finally:
        thread.close()


@pytest.mark.looptime
async def test_rewards_post_process_weighs_each_episode_once_in_its_group(tmp_path: Path) -> None:
    """What slime does next: --custom-reward-post-process-path on the flattened samples."""
    ctx, _, _ = context()
    groups = inputs(
        [
            [{"behavior": "fanout", "reward": 1.0}, {"behavior": "ok", "reward": 0.0}],
            [{"behavior": "ok", "reward": 0.5}, {"behavior": "error"}],
        ]
    )
    outcomes = await run_groups(ctx, groups, SPEC, "train")
    types = slime_types(prefer_plain=True)
    flat = [to_sample(s, types) for g in group_samples(outcomes) for s in g]
    args = SimpleNamespace(agentrl_config_path=str(tmp_path / "config.json"))
    (tmp_path / "config.json").write_text(runtime_config().to_json())  # grpo, no std

    raw, rewards = post_process_rewards(args, flat)

    assert raw == [1.0, 1.0, 0.0, 0.5, 0.0]
    # Group 0: episodes 1.0 (two sequences) and 0.0 -> mean 0.5, not the per-sample 2/3.
    # Group 1: the failed episode counts in nothing, which leaves one task outcome, fewer
    # than minValidSamplesPerGroup (2): no advantage anywhere in it.
    assert rewards == pytest.approx([0.5, 0.5, -0.5, 0.0, 0.0])
    assert flat[4].remove_sample and flat[4].loss_mask == [0]

    zero = tmp_path / "zero.json"
    zero.write_text(runtime_config(failedEpisodes="zeroReward").to_json())
    _, counted = post_process_rewards(SimpleNamespace(agentrl_config_path=str(zero)), flat)
    # zeroReward: the failure is a 0 like any other -> group 1's mean is 0.25.
    assert counted == pytest.approx([0.5, 0.5, -0.5, 0.25, -0.25])


@pytest.mark.looptime
async def test_close_failures_do_not_fail_episodes_or_flood_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agentrl.bundle.rollout import episode

    episode._close_failures[0] = 0
    ctx, _, _ = context(fail_close=True)
    outcomes = await run_groups(ctx, inputs([[{"behavior": "ok"}] * 3]), SPEC, "train")
    assert all(o.failure is None for g in outcomes for o in g)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "closing the gateway session failed" in warnings[0].getMessage()
