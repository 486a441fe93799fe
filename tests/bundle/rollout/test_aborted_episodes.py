"""An episode whose every model call the engine aborted, and what eval reads of an episode.

The gateway answers an engine-aborted generation 503 and keeps the partial completion, which
the merge masks (`aborted`): the agent never saw it. An agent that got only 503s and still
reported a reward earned it on no model output, so it must not shape its group's
advantages: it is a failed episode (`no_turns`: no completion ever reached the agent), as
slime's own rollout never scores an aborted sample (`generate_and_rm` returns it before the
reward model):
https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/rollout/sglang_rollout.py#L270-L283
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentrl.bundle.rewards import post_process_rewards
from agentrl.bundle.rollout.batch import RolloutContext, group_samples, run_groups
from agentrl.bundle.rollout.driver import eval_batch
from agentrl.bundle.rollout.episode import (
    EpisodeInput,
    EpisodeOutcome,
    EpisodeSpec,
    _no_turns_message,
)
from agentrl.bundle.rollout.types import Status, slime_types, to_sample
from agentrl.bundle.session import CONTEXT_LIMIT, ContextFullCalls

from .doubles import FakeGateway, StubAgent, runtime_config, stub_runtime

SPEC = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 64}, 64, timeout_s=30.0, model_id="m")


def group(*metas: dict[str, object]) -> list[list[EpisodeInput]]:
    return [[EpisodeInput("p", m, None, group_index=0, index=i) for i, m in enumerate(metas)]]


@pytest.mark.looptime
async def test_an_episode_whose_every_call_was_aborted_fails_and_shapes_no_advantage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It used to be a task outcome: its last (masked) sequence with its reward 1, counted in
    the group's mean, which moved both siblings' advantages (mean 2/3 instead of 1/2)."""
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(4))
    metas = (
        {"behavior": "ok", "reward": 1.0},
        {"behavior": "ok", "reward": 0.0},
        {"behavior": "all_aborted", "reward": 1.0},
    )
    outcomes = await run_groups(ctx, group(*metas), SPEC, "train")

    ok, zero, aborted = outcomes[0]
    assert aborted.failure == "no_turns" and aborted.reward == 0.0
    assert "the engine aborted every model call of the agent (2" in aborted.message
    (stand_in,) = aborted.samples  # one slot, loss mask 0, the reason for the post-process
    assert stand_in.status is Status.FAILED and stand_in.loss_mask == [0]
    assert stand_in.remove_sample and stand_in.metadata["episode_error"] == "no_turns"
    counters = ctx.recorder.take().counters
    assert counters[("failed_sessions", ("train", "no_turns"))] == 1
    lines = [r.getMessage() for r in caplog.records if aborted.session_id in r.getMessage()]
    assert len(lines) == 1 and "reason=no_turns" in lines[0] and "aborted" in lines[0]
    assert not gateway.open

    flat = [
        to_sample(s, slime_types(prefer_plain=True)) for g in group_samples(outcomes) for s in g
    ]
    config = tmp_path / "config.json"
    config.write_text(runtime_config().to_json())  # failedEpisodes: exclude (the default)
    _, rewards = post_process_rewards(SimpleNamespace(agentrl_config_path=str(config)), flat)
    # Mean over the two task outcomes (1/2), not over three rewards (2/3); none for it.
    assert rewards == pytest.approx([0.5, -0.5, 0.0])
    assert ok.failure is None and zero.failure is None


@pytest.mark.looptime
async def test_one_completion_that_reached_the_agent_keeps_the_episode_a_task_outcome() -> None:
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(4))
    ((retried,),) = await run_groups(ctx, group({"behavior": "aborted_retry"}), SPEC, "train")
    assert retried.failure is None and retried.reward == 1.0


def test_the_message_names_aborted_and_context_full_calls_together() -> None:
    full = ContextFullCalls(calls=1, prompt_tokens=40, context_length=32, limit=CONTEXT_LIMIT)
    message = _no_turns_message(full, aborted=2)
    assert message.startswith("the engine aborted 2 model call(s) of the agent (answered 503)")
    assert "every other model call (1) had a prompt that filled the model's context" in message
    assert _no_turns_message(full).startswith("every model call (1) had a prompt")
    assert _no_turns_message(None) == "the agent finished without calling the model"


async def _eval(
    tmp_path: Path, rows: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps({"prompt": "q", "metadata": r}) + "\n" for r in rows))
    config = runtime_config(eval_sets=[{"name": "e", "path": str(path), "samplesPerPrompt": 1}])
    with stub_runtime(FakeGateway()) as runtime:
        out = await eval_batch(runtime, config, 3, slime_types(prefer_plain=True))
    return out.data, out.metrics


async def test_an_eval_episode_whose_every_call_was_aborted_counts_as_failed(
    tmp_path: Path,
) -> None:
    """It used to be scored: its reward 1 in eval/e (1.0 here instead of 0.0)."""
    rows = [{"behavior": "ok", "reward": 0.0}, {"behavior": "all_aborted", "reward": 1.0}]
    data, metrics = await _eval(tmp_path, rows)
    assert data["e"]["rewards"] == [0.0]
    assert metrics["eval/e/failed_ratio"] == 0.5 and metrics["eval/e/episodes"] == 2


async def test_an_eval_episodes_truncated_flag_counts_the_sequences_slime_is_not_handed(
    tmp_path: Path,
) -> None:
    """An episode's one truncated sequence (a length-cut answer without logprobs) trains
    nothing and is left out of its samples, beside the retry that trains: eval said the
    episode was not truncated, as if it had been handed the other sequences only."""
    data, _ = await _eval(tmp_path, [{"behavior": "masked_truncated"}, {"behavior": "ok"}])
    assert len(data["e"]["samples"]) == 2  # the retry's sequence and the other episode's
    assert data["e"]["truncated"] == [True, False]


def test_the_rehearsals_truncated_counts_a_clipped_sequence_that_trains_nothing() -> None:
    """A sequence clipped at maxResponseLength whose logprobs were unusable is left out of
    the samples beside one that trains, and ended with no `length` turn: the rehearsal's
    episode said `truncated: no`."""
    from agentrl.bundle.rehearse.observe import Seen
    from agentrl.bundle.rehearse.run import _episode
    from agentrl.bundle.rollout.episode import segment_samples
    from agentrl.bundle.traces import Turn, merge_turns_with_stats

    turns = [Turn([1, 2, 3], [40, 41, 42], None, "stop"), Turn([1, 2, 3], [50], [-0.3], "stop")]
    segments, stats = merge_turns_with_stats(turns, max_response_len=2)
    assert [s.truncated for s in segments] == [True, False]
    inp = EpisodeInput("p", {}, None, group_index=0, index=0)
    samples = segment_samples(inp, segments, "sid", 1.0, 0)
    assert len(samples) == 1  # the clipped one trains nothing: left out
    outcome = EpisodeOutcome("sid", samples, 1.0, None, merge=stats, truncated=True)
    tools = SimpleNamespace(failures=lambda turns: (0, []))
    report = _episode(outcome, Seen(turns=turns), tools, None, None)  # type: ignore[arg-type]
    assert report.truncated
