"""Prompt building in isolation (pure): chain selection, siblings, and every break reason."""

from __future__ import annotations

from typing import Any

from agentrl.bundle.gateway.prompt import (
    Chain,
    PromptBuilder,
    fingerprint,
    record_turn,
    reply_fingerprint,
)

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Weather in Paris?"}
# Within a tool cycle, so the qwen3 renderer (thinking on) may bridge instead of re-rendering.
TOOL = {"role": "tool", "tool_call_id": "c1", "content": "21C"}


def sample(tok: Any, text: str) -> list[int]:
    return [*tok.encode(text), tok.convert_tokens_to_ids("<|im_end|>")]


def turn(
    builder: PromptBuilder, chains: list[Chain], messages: list[Any], reply: str, tok: Any
) -> Any:
    plan = builder.build(chains, messages, None)
    record_turn(chains, plan, sample(tok, reply), reply_fingerprint({"content": reply}))
    return plan


def test_siblings_with_one_prompt_are_told_apart_by_their_reply(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    first = turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    turn(builder, chains, [SYSTEM, USER], "Rainy.", tok)  # an n>1 sibling / retry
    assert len(chains) == 2
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Rainy. "},
        TOOL,
    ]
    plan = builder.build(chains, follow, None)
    assert plan.break_reason is None and plan.extends == 1
    prev = first.prompt_ids + sample(tok, "Rainy.")
    assert plan.prompt_ids[: len(prev)] == prev


def test_unknown_reply_among_siblings_is_an_ambiguous_fork(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    turn(builder, chains, [SYSTEM, USER], "Rainy.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Snowy."},
        TOOL,
    ]
    plan = builder.build(chains, follow, None)
    assert plan.break_reason == "ambiguous_fork" and plan.extends is None
    assert plan.prompt_ids == renderer.render_ids(follow, add_generation_prompt=True)


def test_a_single_chain_keeps_the_sampled_tokens_even_if_the_echo_differs(
    renderer: Any, tok: Any
) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    first = turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "(trimmed)"},
        TOOL,
    ]
    plan = builder.build(chains, follow, None)
    assert plan.break_reason is None
    assert plan.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids


def test_changed_tools_are_a_break(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    tools = [{"type": "function", "function": {"name": "f", "description": "", "parameters": {}}}]
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        TOOL,
    ]
    assert builder.build(chains, follow, tools).break_reason == "tools_changed"


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


def test_a_bridge_that_drifts_is_refused(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(LyingRenderer(renderer), cumulative=True), []
    turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        TOOL,
    ]
    plan = builder.build(chains, follow, None)
    assert plan.break_reason == "bridge_mismatch"
    assert plan.prompt_ids == renderer.render_ids(follow, add_generation_prompt=True)


def test_fingerprints_ignore_key_order_and_reply_json_spacing() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    one = {"content": " hi ", "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}
    two = {"content": "hi", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}
    assert reply_fingerprint(one) == reply_fingerprint(two)


def test_a_new_user_query_with_thinking_on_is_rerendered(renderer: Any, tok: Any) -> None:
    """qwen3 drops old reasoning at a new user query, so the bridge is refused (and counted)."""
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Why?"},
    ]
    plan = builder.build(chains, follow, None)
    assert plan.break_reason == "bridge_refused"
    assert plan.prompt_ids == renderer.render_ids(follow, add_generation_prompt=True)
