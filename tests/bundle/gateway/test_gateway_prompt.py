"""Prompt building in isolation (pure): chain selection, siblings, and every break reason."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.bundle.gateway.prompt import (
    Chain,
    PromptBuilder,
    fingerprint,
    record_turn,
    reply_fingerprint,
)
from agentrl.bundle.gateway.token_view import TokenView

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Weather in Paris?"}
# Within a tool cycle, so the qwen3 renderer (thinking on) may bridge instead of re-rendering.
TOOL = {"role": "tool", "tool_call_id": "c1", "content": "21C"}


def sample(tok: Any, text: str) -> list[int]:
    return [*tok.encode(text), tok.convert_tokens_to_ids("<|im_end|>")]


async def turn(
    builder: PromptBuilder, chains: list[Chain], messages: list[Any], reply: str, tok: Any
) -> Any:
    plan = await builder.build(chains, messages, None)
    record_turn(chains, plan, sample(tok, reply), reply_fingerprint({"content": reply}))
    return plan


async def test_siblings_with_one_prompt_are_told_apart_by_their_reply(
    renderer: Any, tok: Any
) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    first = await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    await turn(builder, chains, [SYSTEM, USER], "Rainy.", tok)  # an n>1 sibling / retry
    assert len(chains) == 2
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Rainy. "},
        TOOL,
    ]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason is None and plan.extends == 1
    prev = first.prompt_ids + sample(tok, "Rainy.")
    assert plan.prompt_ids[: len(prev)] == prev


async def test_unknown_reply_among_siblings_is_an_ambiguous_fork(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    await turn(builder, chains, [SYSTEM, USER], "Rainy.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Snowy."},
        TOOL,
    ]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason == "ambiguous_fork" and plan.extends is None
    assert plan.prompt_ids == renderer.render_ids(follow, add_generation_prompt=True)


async def test_a_single_chain_keeps_the_sampled_tokens_even_if_the_echo_differs(
    renderer: Any, tok: Any
) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    first = await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "(trimmed)"},
        TOOL,
    ]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason is None
    assert plan.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids


async def test_changed_tools_are_a_break(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    tools = [{"type": "function", "function": {"name": "f", "description": "", "parameters": {}}}]
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        TOOL,
    ]
    assert (await builder.build(chains, follow, tools)).break_reason == "tools_changed"


class LyingRenderer:
    """A renderer whose bridge breaks its contract: the gateway must not trust it."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def render_ids(self, *a: Any, **kw: Any) -> list[int]:
        return list(self.real.render_ids(*a, **kw))

    def bridge_to_next_turn(
        self, prompt: list[int], completion: list[int], new: Any, **kw: Any
    ) -> Any:
        class Out:
            token_ids = [*prompt, 0, *completion]

        return Out()


async def test_a_bridge_that_drifts_is_refused(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(LyingRenderer(renderer), cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        TOOL,
    ]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason == "bridge_mismatch"
    assert plan.prompt_ids == renderer.render_ids(follow, add_generation_prompt=True)


def test_fingerprints_ignore_key_order_and_reply_json_spacing() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    one = {"content": " hi ", "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}
    two = {"content": "hi", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}
    assert reply_fingerprint(one) == reply_fingerprint(two)


async def test_a_new_user_query_with_thinking_on_is_rerendered(renderer: Any, tok: Any) -> None:
    """qwen3 drops old reasoning at a new user query, so the bridge is refused (and counted)."""
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Why?"},
    ]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason == "bridge_refused"
    assert plan.prompt_ids == renderer.render_ids(follow, add_generation_prompt=True)


def test_token_view_is_a_read_only_int_sequence() -> None:
    ids = [5, 6, 7, 8]
    v = TokenView(ids, 3)
    ids.append(9)  # the shared list grows; the view does not
    assert len(v) == 3 and list(v) == [5, 6, 7] and v == [5, 6, 7] and v == (5, 6, 7)
    assert v != [5, 6, 7, 8]
    assert v != [5, 6, 8]
    assert (
        v[0] == 5
        and v[-1] == 7
        and v[1:] == [6, 7]
        and v[::-1] == [7, 6, 5]
        and v[:10] == [5, 6, 7]
    )
    with pytest.raises(IndexError):
        v[3]
    with pytest.raises(ValueError, match="length"):
        TokenView(ids, 6)


async def test_turns_of_a_conversation_share_one_growing_list(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    msgs: list[Any] = [SYSTEM, USER]
    views = []
    for i in range(4):
        plan = await builder.build(chains, msgs, None)
        views.append(
            record_turn(
                chains,
                plan,
                sample(tok, f"Call {i}."),
                reply_fingerprint({"content": f"Call {i}."}),
            )
        )
        msgs = [*msgs, {"role": "assistant", "content": f"Call {i}."}, TOOL]
    assert len({id(v._ids) for v in views}) == 1  # one list, not one per turn
    for a, b in itertools.pairwise(views):
        assert b[: len(a)] == list(a)  # each prompt extends the previous one


async def test_a_retried_turn_bridges_from_the_same_tip(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    second = [SYSTEM, USER, {"role": "assistant", "content": "Sunny."}, TOOL]
    first_try = await builder.build(chains, second, None)
    record_turn(chains, first_try, sample(tok, "Done."), reply_fingerprint({"content": "Done."}))
    retry = await builder.build(chains, second, None)  # the agent resends turn two
    assert retry.break_reason is None and retry.prompt_ids == first_try.prompt_ids
    view = record_turn(
        chains, retry, sample(tok, "Again."), reply_fingerprint({"content": "Again."})
    )
    assert view == first_try.prompt_ids  # a fork gets its own list, with the same prompt


@given(
    ids=st.lists(st.integers(0, 10**6), max_size=30),
    extra=st.lists(st.integers(0, 10**6), max_size=5),
    start=st.integers(-40, 40) | st.none(),
    stop=st.integers(-40, 40) | st.none(),
    step=st.sampled_from([None, 1, 2, 3, -1, -2]),
)
def test_token_view_slices_like_a_list(
    ids: list[int], extra: list[int], start: int | None, stop: int | None, step: int | None
) -> None:
    shared = [*ids, *extra]  # the view sees only its prefix of a longer shared list
    view = TokenView(shared, len(ids))
    assert view[start:stop:step] == ids[start:stop:step]
    assert view == ids and list(reversed(view)) == ids[::-1]
    for i in range(-len(ids), len(ids)):
        assert view[i] == ids[i]


async def test_a_truncated_turn_is_closed_by_the_bridge_not_rewritten(
    renderer: Any, tok: Any
) -> None:
    """A completion cut by max_new_tokens has no end-of-turn token; the next prompt keeps the
    sampled ids verbatim and the renderer adds the close as (untrained) prompt context."""
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    first = await builder.build(chains, [SYSTEM, USER], None)
    cut = tok.encode("Let me look that")  # no <|im_end|>: finish_reason "length"
    record_turn(chains, first, cut, reply_fingerprint({"content": "Let me look that"}))
    follow = [SYSTEM, USER, {"role": "assistant", "content": "Let me look that"}, TOOL]
    plan = await builder.build(chains, follow, None)
    prev = first.prompt_ids + cut
    assert plan.break_reason is None and plan.prompt_ids[: len(prev)] == prev
    assert plan.prompt_ids[len(prev)] == tok.convert_tokens_to_ids("<|im_end|>")
