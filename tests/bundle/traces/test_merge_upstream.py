"""`merge_turns` against slime's own multi-turn merger, on the same turns.

slime 624b824 ships `slime/agent/trajectory.py`: its `_SampleBuilder` folds a chain of
turns, each prompt extending the last prompt + completion, into one training `Sample`
(tool results and headers between turns as loss_mask 0, each sampled completion as
loss_mask 1 with its logprobs, the first prompt stripped from the response region). On
such chains agentrl's merge must give the very same tokens, response_length, loss_mask and
rollout_log_probs, whatever the number of turns, the bridges (empty ones included) and the
finish reasons ("length": a turn cut without its stop token). The file runs as it is; only
`slime.utils.types.Sample` is stood in for (the plain twin with the same fields).

Where the two differ by design (a retry after an empty completion, the budget) docs/traces.md
has agentrl's rules; those cases are not generated here. Where slime realigns a drifted
response or merges an edited reply away (it then trains that turn nowhere), the tests at the
end run its `TrajectoryManager`, and agentcore-rl-toolkit 0.2.0's (which only forks, as
agentrl does), on a real template's turns and pin the outcomes.
"""

from __future__ import annotations

import importlib.util
import random
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agentcore_rl_toolkit.rollout_gateway import trace as toolkit_trace
from agentcore_rl_toolkit.rollout_gateway import trajectory as toolkit_trajectory
from tests.support.shared import UPSTREAM, require
from tests.support.stand_ins import stand_in
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway.tokenizer import build_renderer, load_tokenizer
from agentrl.bundle.rollout.types import PlainSample
from agentrl.bundle.traces import CONTEXT_FULL, Turn, merge_turns


@dataclass
class _Sample(PlainSample):
    """slime's `Sample` as trajectory.py builds it (it also passes `rollout_id`)."""

    rollout_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _trajectory(commit: str = "624b824") -> Any:
    path = require(
        UPSTREAM / "slime" / commit / "slime" / "agent" / "trajectory.py",
        f"slime {commit}'s snapshot",
    )
    fakes = {n: types.ModuleType(n) for n in ("slime", "slime.utils", "slime.utils.types")}
    fakes["slime.utils.types"].Sample = _Sample  # type: ignore[attr-defined]
    name = f"slime_{commit}_trajectory"
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


Step = tuple[Turn, list[dict[str, Any]], dict[str, Any]]  # a turn, its messages, its reply


def _managed(module: Any, steps: list[Step]) -> list[tuple[Any, ...]]:
    """(tokens, response_length, loss_mask, logprobs) of each sample a `TrajectoryManager`
    (slime's, or agentcore-rl-toolkit's, which has the same interface) makes of `steps`."""
    manager = module.TrajectoryManager()
    for turn, messages, response in steps:
        record = module.TurnRecord(
            list(turn.prompt_ids), list(turn.completion_ids), "stop", list(turn.logprobs or [])
        )
        manager.record_turn("s", turn=record, prompt_messages=messages, response_message=response)
    if module is toolkit_trajectory:
        rows = manager.get_trajectory("s", base_sample=toolkit_trace.BaseTrace())
        return [(r.token_ids, r.response_length, r.loss_mask, r.logprobs) for r in rows]
    samples = manager.get_trajectory("s", base_sample=_Sample(index=0, group_index=0))
    return [(s.tokens, s.response_length, s.loss_mask, s.rollout_log_probs) for s in samples]


# A Qwen3 tool cycle as an OpenAI-SDK agent runs it, rendered by the gateway in its default
# (full render) mode with the qwen3 renderer and a real byte-level BPE tokenizer.
_SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
_USER = {"role": "user", "content": "Weather in Paris?"}
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize("commit", ["fa3c990", "624b824"])
@pytest.mark.parametrize("sentences", [1, 250], ids=["short", "long"])
def test_a_reply_re_rendered_without_its_thinking_is_trained_as_sampled(
    tmp_path: Path, commit: str, sentences: int
) -> None:
    """Turn 1 thinks, then calls a tool; the agent echoes the call without the reasoning
    (many clients leave `reasoning_content` out of the history they send), so turn 2's full
    render no longer holds turn 1's sampled ids: it diverges where turn 1's response starts.

    agentrl trains each turn on the ids it was sampled on: turn 1 in its own segment, turn 2
    in one that starts at its own prompt (docs/traces.md, `edited_completion`). slime's
    `TrajectoryManager` (both pinned commits) forks the same way when turn 2's response is
    1024 tokens or more, and gives the very same samples; under that it *realigns*: it
    overwrites turn 1's response with turn 2's re-rendered prompt, loss mask 0, so turn 1's
    sampled tokens are trained nowhere. Run on the same turns, that is the only difference."""
    tok = load_tokenizer(str(write_checkpoint(tmp_path)))
    renderer = build_renderer(tok, "qwen3")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    answer = " ".join(["The answer is sunny."] * sentences)
    p1 = renderer.render_ids([_SYSTEM, _USER], tools=_TOOLS, add_generation_prompt=True)
    c1 = [*tok.encode(f"<think>\nLet me think about it step by step.\n</think>\n\n{_CALL}"), im_end]
    echo = {  # as such a client sends it back: arguments a JSON string, no reasoning
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 degrees"}
    p2 = renderer.render_ids(
        [_SYSTEM, _USER, echo, result], tools=_TOOLS, add_generation_prompt=True
    )
    c2 = [*tok.encode(f"<think>\nok\n</think>\n\n{answer}"), im_end]
    assert p2[: len(p1)] == p1 and p2[: len(p1) + len(c1)] != p1 + c1  # the thinking is gone
    assert (len(c2) >= 1024) == (sentences > 1)
    turns = [
        Turn(p1, c1, [-0.5] * len(c1), "stop"),
        Turn(p2, c2, [-0.25] * len(c2), "stop"),
    ]

    # The messages as slime's OpenAI adapter keeps them: arguments a dict, no wire ids.
    reply = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    }
    steps: list[Step] = [
        (turns[0], [_SYSTEM, _USER], reply),
        (turns[1], [_SYSTEM, _USER, reply, {"role": "tool", "content": result["content"]}],
         {"role": "assistant", "content": answer}),
    ]  # fmt: skip
    theirs = _managed(_trajectory(commit), steps)
    ours = [(s.tokens, s.response_length, s.loss_mask, s.logprobs) for s in merge_turns(turns)]

    assert ours == [
        (p1 + c1, len(c1), [1] * len(c1), [-0.5] * len(c1)),
        (p2 + c2, len(c2), [1] * len(c2), [-0.25] * len(c2)),
    ]
    assert _managed(toolkit_trajectory, steps) == ours  # the toolkit's manager only forks
    if len(c2) >= 1024:  # slime's fork threshold, on the incoming turn's response
        assert theirs == ours
    else:
        assert theirs == [
            (p2 + c2, len(p2) - len(p1) + len(c2),
             [0] * (len(p2) - len(p1)) + [1] * len(c2),
             [0.0] * (len(p2) - len(p1)) + [-0.25] * len(c2)),
        ]  # fmt: skip


@pytest.mark.parametrize("commit", ["fa3c990", "624b824"])
def test_a_reply_the_agent_edited_stays_trained_where_slime_demotes_it(
    tmp_path: Path, commit: str
) -> None:
    """The agent trims the reply it got before sending it back (here its last sentence).
    slime's `TrajectoryManager` (both pinned commits) merges the rewrite onto the turn that
    sampled it and demotes that turn to context: one sample, turn 2's; turn 1's sampled
    tokens are trained nowhere. agentrl keeps turn 1 trained, in its own segment, and turn 2
    the same as slime."""
    tok = load_tokenizer(str(write_checkpoint(tmp_path)))
    renderer = build_renderer(tok, "qwen3")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    said, kept = "The answer is 42. Let me think about it.", "The answer is 42."
    p1 = renderer.render_ids([_SYSTEM, _USER], add_generation_prompt=True)
    c1 = [*tok.encode(f"<think>\nok\n</think>\n\n{said}"), im_end]
    follow_up = {"role": "user", "content": "What is 6*7?"}
    edited = {"role": "assistant", "content": kept}
    p2 = renderer.render_ids([_SYSTEM, _USER, edited, follow_up], add_generation_prompt=True)
    c2 = [*tok.encode("<think>\nok\n</think>\n\n42"), im_end]
    turns = [Turn(p1, c1, [-0.5] * len(c1), "stop"), Turn(p2, c2, [-0.25] * len(c2), "stop")]

    steps: list[Step] = [
        (turns[0], [_SYSTEM, _USER], {"role": "assistant", "content": said}),
        (turns[1], [_SYSTEM, _USER, edited, follow_up], {"role": "assistant", "content": "42"}),
    ]
    ours = [(s.tokens, s.response_length, s.loss_mask, s.logprobs) for s in merge_turns(turns)]

    turn_2 = (p2 + c2, len(c2), [1] * len(c2), [-0.25] * len(c2))
    assert _managed(_trajectory(commit), steps) == [turn_2]
    assert ours == [(p1 + c1, len(c1), [1] * len(c1), [-0.5] * len(c1)), turn_2]
    assert _managed(toolkit_trajectory, steps) == ours  # the toolkit's manager only forks
