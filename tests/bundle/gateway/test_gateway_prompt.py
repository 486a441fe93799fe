"""Prompt building in isolation (pure): chain selection, siblings, and every break reason."""

from __future__ import annotations

import itertools
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.bundle.gateway.prompt import (
    Chain,
    PromptBuilder,
    PromptPlan,
    fingerprint,
    record_turn,
    reply_fingerprint,
)
from agentrl.bundle.gateway.token_view import History, TokenView
from agentrl.bundle.gateway.tokenizer import load_renderer
from agentrl.bundle.traces import Turn, merge_turns

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
    prev = first.prompt_ids.tolist() + sample(tok, "Rainy.")
    assert plan.prompt_ids[: len(prev)].tolist() == prev


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
    assert plan.prompt_ids.tolist() == renderer.render_ids(follow, add_generation_prompt=True)


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


async def test_a_bridge_that_drifts_is_refused_and_named_once(
    renderer: Any, tok: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A bridge that does not begin with the conversation's ids is never trained on: the
    full render is the prompt. Where that render holds the ids the merge extends the
    conversation, so it is no trace break (it was counted as `bridge_mismatch`); the
    renderer's bug is logged once, however many turns it spoils."""
    builder, chains = PromptBuilder(LyingRenderer(renderer), cumulative=True), []
    messages: list[Any] = [SYSTEM, USER]
    for i, reply in enumerate(("Sunny.", "Warm.", "Done.")):
        plan = await builder.build(chains, messages, None)
        assert plan.break_reason is None and (plan.extends is not None) == bool(i)
        assert plan.prompt_ids.tolist() == renderer.render_ids(messages, add_generation_prompt=True)
        record_turn(chains, plan, sample(tok, reply), reply_fingerprint({"content": reply}))
        messages = [*messages, {"role": "assistant", "content": reply}, TOOL]
    named = [r for r in caplog.records if "does not begin with" in r.getMessage()]
    assert len(named) == 1 and "LyingRenderer" in named[0].getMessage()


class DriftingLiar(LyingRenderer):
    """A lying bridge, and a full render that re-tokenises the reply it is given back."""

    def render_ids(self, messages: Any, *a: Any, **kw: Any) -> list[int]:
        ids = list(self.real.render_ids(messages, *a, **kw))
        return [ids[0], 0, *ids[1:]] if len(messages) > 2 else ids


async def test_a_bridge_that_drifts_where_the_full_render_drifts_is_a_break(
    renderer: Any, tok: Any
) -> None:
    builder, chains = PromptBuilder(DriftingLiar(renderer), cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    follow = [SYSTEM, USER, {"role": "assistant", "content": "Sunny."}, TOOL]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason == "bridge_mismatch"
    assert plan.prompt_ids.tolist() == DriftingLiar(renderer).render_ids(
        follow, add_generation_prompt=True
    )


def test_fingerprints_ignore_key_order_and_reply_json_spacing() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    one = {"content": " hi ", "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}
    two = {"content": "hi", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}
    assert reply_fingerprint(one) == reply_fingerprint(two)


async def test_a_new_user_query_with_thinking_on_is_rerendered(renderer: Any, tok: Any) -> None:
    """qwen3 drops old reasoning at a new user query, so the bridge is refused and the full
    render no longer holds the sampled ids (counted)."""
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "<think>\nok\n</think>\n\nSunny.", tok)
    follow = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Why?"},
    ]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason == "bridge_refused"
    assert plan.prompt_ids.tolist() == renderer.render_ids(follow, add_generation_prompt=True)


@pytest.mark.parametrize("family", ["qwen3", "default"])
async def test_a_refused_bridge_whose_full_render_holds_the_ids_is_no_break(
    checkpoint: Path, family: str
) -> None:
    """The chat-template family never bridges, and qwen3 refuses at a new user query; where
    the full render still holds the sampled ids (no reasoning to drop) the turn extends its
    conversation, as the merge sees it: no trace break. Every such turn was counted as
    `bridge_refused`, in cumulative mode on the chat-template family every turn."""
    tok, renderer = load_renderer(str(checkpoint), family)
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    messages: list[Any] = [SYSTEM, USER]
    turns = []
    for i in range(3):
        plan = await builder.build(chains, messages, None)
        assert plan.break_reason is None
        if turns:
            assert plan.extends is not None
            assert bridged(renderer, turns[-1], messages[-1:]) is None  # no bridge proven
        reply = f"The answer is 4{i}."
        completion = [
            *tok.encode(reply, add_special_tokens=False),
            tok.convert_tokens_to_ids("<|im_end|>"),
        ]
        record_turn(chains, plan, completion, reply_fingerprint({"content": reply}))
        turns.append(Turn(plan.prompt_ids.tolist(), completion, [-0.5] * len(completion), "stop"))
        messages = [
            *messages,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "And?"},
        ]
    (segment,) = merge_turns(turns)
    assert segment.num_turns == 3


def bridged(renderer: Any, turn: Turn, new: list[Any]) -> Any:
    return renderer.bridge_to_next_turn(
        list(turn.prompt_ids), list(turn.completion_ids), new, tools=None
    )


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
        prompt, completion = record_turn(
            chains, plan, sample(tok, f"Call {i}."), reply_fingerprint({"content": f"Call {i}."})
        )
        assert completion.tolist() == sample(tok, f"Call {i}.")  # a view on the same ids
        views += [prompt, completion]
        msgs = [*msgs, {"role": "assistant", "content": f"Call {i}."}, TOOL]
    assert len({id(v._ids) for v in views}) == 1  # one history, not one per turn
    history = views[0]._ids
    assert isinstance(history, History) and history.parent is None
    assert type(history.own) is array  # packed: 4 bytes a token, whatever the vocabulary
    for a, b in itertools.pairwise(views[::2]):
        assert b[: len(a)] == list(a)  # each prompt extends the previous one


async def test_a_retried_turn_bridges_from_the_same_tip(renderer: Any, tok: Any) -> None:
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    second = [SYSTEM, USER, {"role": "assistant", "content": "Sunny."}, TOOL]
    first_try = await builder.build(chains, second, None)
    record_turn(chains, first_try, sample(tok, "Done."), reply_fingerprint({"content": "Done."}))
    retry = await builder.build(chains, second, None)  # the agent resends turn two
    assert retry.break_reason is None and retry.prompt_ids == first_try.prompt_ids
    view, _ = record_turn(
        chains, retry, sample(tok, "Again."), reply_fingerprint({"content": "Again."})
    )
    assert view == first_try.prompt_ids  # a fork gets its own list, with the same prompt


@given(
    parts=st.tuples(
        st.lists(st.integers(0, 10**6), max_size=5),  # before the view
        st.lists(st.integers(0, 10**6), max_size=30),  # the view
        st.lists(st.integers(0, 10**6), max_size=5),  # after it
    ),
    start=st.integers(-40, 40) | st.none(),
    stop=st.integers(-40, 40) | st.none(),
    step=st.sampled_from([None, 1, 2, 3, -1, -2]),
    packed=st.booleans(),
)
def test_token_view_slices_like_a_list(
    parts: tuple[list[int], list[int], list[int]],
    start: int | None,
    stop: int | None,
    step: int | None,
    packed: bool,
) -> None:
    before, ids, extra = parts
    whole = [*before, *ids, *extra]  # the view sees its window of a longer shared sequence
    shared: Any = array("i", whole) if packed else whole
    view = TokenView(shared, len(ids), len(before))
    got = view[start:stop:step]
    assert type(got) is list and got == ids[start:stop:step]
    assert view == ids and list(reversed(view)) == ids[::-1] and view.tolist() == ids
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
    prev = first.prompt_ids.tolist() + cut
    assert plan.break_reason is None and plan.prompt_ids[: len(prev)].tolist() == prev
    assert plan.prompt_ids[len(prev)] == tok.convert_tokens_to_ids("<|im_end|>")


@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 10**6),  # which earlier history to fork from
            st.integers(0, 10**6),  # where to cut it
            st.lists(st.integers(0, 2**31 - 1), max_size=12),  # the new history's own ids
            st.lists(st.integers(0, 2**31 - 1), max_size=6),  # appended to a random one later
        ),
        max_size=12,
    )
)
def test_forked_histories_read_like_the_lists_they_stand_for(
    steps: list[tuple[int, int, list[int], list[int]]],
) -> None:
    histories = [History(array("i", [7, 8, 9]))]
    models = [[7, 8, 9]]
    for pick, cut, own, more in steps:
        i = pick % len(histories)
        at = cut % (len(models[i]) + 1)
        histories.append(History(array("i", own), histories[i], at))
        models.append(models[i][:at] + own)
        j = (pick // 7) % len(histories)  # any history may grow; its children do not see it
        histories[j].extend(more)
        models[j] += more
    for h, m in zip(histories, models, strict=True):
        assert len(h) == len(m) and h.tolist() == m and list(h) == m
        assert h[1:-1].tolist() == m[1:-1] and [h[k] for k in range(-len(m), len(m))] == m + m
        for keep in range(len(m) + 1):  # what another prompt shares with it
            other = [*m[:keep], -1]
            limit = len(m) - keep // 2
            assert h.shared_with(array("i", other), limit) == min(keep, limit)


def test_repeated_prompts_fork_from_the_same_place() -> None:
    """A retried prompt (or a sibling) forks off the history its first try lives in: the
    chain of parents stays two deep, however many times it is sent."""
    chains: list[Chain] = []
    for n in range(200):
        plan = PromptPlan(array("i", [1, 2, 3, 4]), [b"m"], b"t", None, None)
        record_turn(chains, plan, [500 + n], b"r%d" % n)
    for chain in chains:
        depth, node = 0, chain.history
        while node.parent is not None:
            depth, node = depth + 1, node.parent
        assert depth <= 1


def test_a_re_rendered_turn_shares_what_it_has_in_common() -> None:
    """Full renders re-tokenise earlier replies: each turn's prompt stops extending the last
    one at the previous completion. A 60-turn conversation then kept 60 growing copies."""
    chains: list[Chain] = []
    prompt, kept = [1, 2, 3], 0
    for n in range(60):
        extends = len(chains) - 1 if chains else None
        plan = PromptPlan(array("i", prompt), [b"m"] * (n + 1), b"t", extends, None)
        completion = [500 + n, 600 + n]
        view, sampled = record_turn(chains, plan, completion, b"r%d" % n)
        assert view == prompt and sampled == completion
        # The next render spells the completion differently, then adds a new message.
        prompt = [*prompt, 700 + n, 800 + n, 900 + n]
    histories = {id(c.history): c.history for c in chains}
    for h in list(histories.values()):
        node = h.parent
        while node is not None:
            histories[id(node)] = node
            node = node.parent
    kept = sum(len(h.own) for h in histories.values())
    assert kept <= 3 + 60 * (3 + 2)  # each turn's own ids only, not 60 copies
    assert len(chains[-1].history) == len(prompt) - 3 + 2


async def prefilled(
    builder: PromptBuilder, chains: list[Chain], messages: list[Any], reply: str, tok: Any
) -> Any:
    """A turn whose last message is the start of the reply (Anthropic's prefill)."""
    plan = await builder.build(chains, messages, None, continue_final=True)
    record_turn(chains, plan, sample(tok, reply), reply_fingerprint({"content": reply}))
    return plan


@pytest.mark.parametrize("echo", ["Sunny.", "Sure. Sunny."])
async def test_an_echo_without_a_siblings_prefill_extends_the_sibling_that_said_it(
    renderer: Any, tok: Any, echo: str
) -> None:
    """Two siblings with one history: the model answered "Sunny.", and, prefilled with
    "Sure.", continued " Sunny.". An echo of "Sunny." is the first one's reply; the
    prefilled one's continuation matches it too (an agent may drop its own prefill), and
    the later sibling was taken: the next prompt held "Sure." that the agent never sent.
    The echo "Sure. Sunny." is the prefilled turn's."""
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    plain = await turn(builder, chains, [SYSTEM, USER], "Sunny.", tok)
    asked = [SYSTEM, USER, {"role": "assistant", "content": "Sure."}]
    prefill = await prefilled(builder, chains, asked, " Sunny.", tok)
    assert len(chains) == 2 and chains[1].prefill == "Sure."
    follow = [SYSTEM, USER, {"role": "assistant", "content": echo}, TOOL]
    plan = await builder.build(chains, follow, None)
    said = (plain, "Sunny.") if echo == "Sunny." else (prefill, " Sunny.")
    prev = said[0].prompt_ids.tolist() + sample(tok, said[1])
    assert plan.break_reason is None and plan.extends == (0 if echo == "Sunny." else 1)
    assert plan.prompt_ids[: len(prev)].tolist() == prev


async def test_an_echo_lacking_both_siblings_prefills_is_an_ambiguous_fork(
    renderer: Any, tok: Any
) -> None:
    """Two prefilled siblings ("Sure." and "Yes.") continued the same way; an echo of the
    continuation alone matches neither reply as the model saw it: guessing would put one
    prefill's ids under a conversation that may have held the other."""
    builder, chains = PromptBuilder(renderer, cumulative=True), []
    for start in ("Sure.", "Yes."):
        asked = [SYSTEM, USER, {"role": "assistant", "content": start}]
        await prefilled(builder, chains, asked, " Sunny.", tok)
    follow = [SYSTEM, USER, {"role": "assistant", "content": "Sunny."}, TOOL]
    plan = await builder.build(chains, follow, None)
    assert plan.break_reason == "ambiguous_fork" and plan.extends is None
