"""`merge_turns` against slime's own multi-turn merger, on the same turns.

slime 624b824 ships `slime/agent/trajectory.py`: its `_SampleBuilder` folds a chain of
turns, each prompt extending the last prompt + completion, into one training `Sample`
(tool results and headers between turns as loss_mask 0, each sampled completion as
loss_mask 1 with its logprobs, the first prompt stripped from the response region). On
such chains agentrl's merge must give the very same tokens, response_length, loss_mask and
rollout_log_probs, whatever the number of turns, the bridges (empty ones included) and the
finish reasons ("length": a turn cut without its stop token). The file runs as it is; only
`slime.utils.types.Sample` is stood in for (the plain twin with the same fields).

Where the two differ by design (a retry after an empty completion, drift healing, the
budget) docs/traces.md has agentrl's rules; those cases are not generated here.
"""

from __future__ import annotations

import importlib.util
import random
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.support.shared import UPSTREAM, require
from tests.support.stand_ins import stand_in

from agentrl.bundle.rollout.types import PlainSample
from agentrl.bundle.traces import CONTEXT_FULL, Turn, merge_turns


@dataclass
class _Sample(PlainSample):
    """slime's `Sample` as trajectory.py builds it (it also passes `rollout_id`)."""

    rollout_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _trajectory() -> Any:
    path = require(
        UPSTREAM / "slime" / "624b824" / "slime" / "agent" / "trajectory.py",
        "slime 624b824's snapshot",
    )
    fakes = {n: types.ModuleType(n) for n in ("slime", "slime.utils", "slime.utils.types")}
    fakes["slime.utils.types"].Sample = _Sample  # type: ignore[attr-defined]
    name = "slime_624b824_trajectory"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up while it executes
    with stand_in({**fakes, name: module}):
        spec.loader.exec_module(module)
    return module


def _upstream(module: Any, turns: list[Turn]) -> list[tuple[Any, ...]]:
    """slime's builders over `turns`, as `TrajectoryManager._split_chain_into_builders`
    runs them on one chain."""
    builders: list[Any] = []
    for t in turns:
        rec = module.TurnRecord(
            list(t.prompt_ids), list(t.completion_ids), t.finish_reason, list(t.logprobs or [])
        )
        kind = builders[-1].classify_token_drift(rec) if builders else module.DriftKind.FORK
        if kind is module.DriftKind.FORK:
            builders.append(module._SampleBuilder(1024))
            kind = module.DriftKind.CLEAN
        builders[-1].append_turn(rec, kind)
    samples = [
        b.to_sample(_Sample(index=0, group_index=0), {})
        for b in builders
        if b.has_trained_response()
    ]
    return [(s.tokens, s.response_length, s.loss_mask, s.rollout_log_probs) for s in samples]


def _chain(rng: random.Random) -> list[Turn]:
    prompt = [rng.randrange(1000) for _ in range(rng.randint(1, 6))]
    turns = []
    for _ in range(rng.randint(1, 5)):
        completion = [rng.randrange(1000) for _ in range(rng.randint(1, 5))]
        logprobs = [-rng.random() for _ in completion]
        turns.append(Turn(list(prompt), completion, logprobs, rng.choice(["stop", "length"])))
        bridge = [rng.randrange(1000) for _ in range(rng.randint(0, 3))]
        prompt = [*prompt, *completion, *bridge]
    return turns


@pytest.mark.parametrize("seed", range(4))
def test_chains_merge_as_slimes_own_trajectory_builder(seed: int) -> None:
    module = _trajectory()
    rng = random.Random(seed)
    for _ in range(250):
        turns = _chain(rng)
        ours = [(s.tokens, s.response_length, s.loss_mask, s.logprobs) for s in merge_turns(turns)]
        assert ours == _upstream(module, turns), [(t.prompt_ids, t.completion_ids) for t in turns]


def test_a_call_refused_for_a_full_context_truncates_as_slimes_trajectory_marks_it() -> None:
    """slime's adapter answers a prompt that fills the context without the engine and still
    records the call (`call_sglang_generate`: no output, finish reason "length"), and its
    `TrajectoryManager` marks the conversation's sample `truncated`. The gateway's trace holds
    the call as a CONTEXT_FULL turn (its ids: the conversation it continued): the segment is
    truncated too, with the same trained tokens. By design it adds none of the refused
    prompt's tokens, where slime appends them untrained up to the context (docs/traces.md)."""
    module = _trajectory()
    manager = module.TrajectoryManager()
    question = [{"role": "user", "content": "q"}]
    answer = {"role": "assistant", "content": "a"}
    first = module.TurnRecord([1, 2, 3, 10], [11, 12], "stop", [-0.5, -0.25])
    manager.record_turn("s", turn=first, prompt_messages=question, response_message=answer)
    refused = module.TurnRecord([1, 2, 3, 10, 11, 12, 20, 21, 22], [], "length")
    manager.record_turn(
        "s",
        turn=refused,
        prompt_messages=[*question, answer, {"role": "user", "content": "a long tool result"}],
        response_message={"role": "assistant", "content": ""},
    )
    (theirs,) = manager.get_trajectory(
        "s", base_sample=_Sample(index=0, group_index=0), max_sample_tokens=8
    )
    trace = [Turn(first.prompt_ids, first.output_ids, first.output_log_probs, first.finish_reason),
             Turn([1, 2, 3, 10, 11, 12], (), None, CONTEXT_FULL)]  # fmt: skip
    (ours,) = merge_turns(trace)

    assert theirs.metadata["truncated"] is True and ours.truncated

    def trained(tokens: list[int], length: int, mask: list[int]) -> list[int]:
        return [t for t, m in zip(tokens[len(tokens) - length :], mask, strict=True) if m]

    assert trained(theirs.tokens, theirs.response_length, theirs.loss_mask) == [11, 12]
    assert trained(ours.tokens, ours.response_length, ours.loss_mask) == [11, 12]
    assert ours.tokens == [1, 2, 3, 10, 11, 12] and theirs.tokens == [1, 2, 3, 10, 11, 12, 20, 21]


def test_the_sub_agent_cut_by_the_context_is_truncated_as_slimes_trajectory_marks_it() -> None:
    """Two sub-agents (their own system prompts) in one session: A calls, B calls, then A's
    next call fills the context. slime's `TrajectoryManager` files the refused call under
    A's conversation and marks A's sample `truncated`, B's not. agentrl marked B's (the
    latest sampled turn's); the gateway's trace now names the conversation it continued."""
    module = _trajectory()
    manager = module.TrajectoryManager()
    a = [{"role": "system", "content": "A"}, {"role": "user", "content": "qa"}]
    b = [{"role": "system", "content": "B"}, {"role": "user", "content": "qb"}]
    reply = {"role": "assistant", "content": "r"}
    ta = module.TurnRecord([1, 10], [11], "stop", [-0.5])
    tb = module.TurnRecord([1, 50], [51], "stop", [-0.5])
    cut = module.TurnRecord([1, 10, 11, 12, 13], [], "length")
    manager.record_turn("s", turn=ta, prompt_messages=a, response_message=reply)
    manager.record_turn("s", turn=tb, prompt_messages=b, response_message=reply)
    manager.record_turn(
        "s",
        turn=cut,
        prompt_messages=[*a, reply, {"role": "user", "content": "a long tool result"}],
        response_message={"role": "assistant", "content": ""},
    )
    theirs = manager.get_trajectory("s", base_sample=_Sample(index=0, group_index=0))
    trace = [Turn(t.prompt_ids, t.output_ids, t.output_log_probs, t.finish_reason)
             for t in (ta, tb)] + [Turn([1, 10, 11], (), None, CONTEXT_FULL)]  # fmt: skip
    ours = merge_turns(trace)

    def truncated_by_first_prompt(samples: list[Any], flag: Any) -> dict[int, bool]:
        return {s.tokens[1]: flag(s) for s in samples}

    expected = {10: True, 50: False}
    assert truncated_by_first_prompt(theirs, lambda s: s.metadata["truncated"]) == expected
    assert truncated_by_first_prompt(ours, lambda s: s.truncated) == expected
