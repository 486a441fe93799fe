"""Cumulative token mode: next prompt = previous prompt + sampled completion + bridge; history
rewrites fall back to a full render and are counted as trace breaks."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.traces import merge_turns

from .gateway_helpers import TOOL_REPLY, TOOLS, Cluster, metric, scripted

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


async def ask(handle: Any, messages: list[Any], **kw: Any) -> Any:
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    return (await c.chat.completions.create(model="m", messages=messages, **kw)).choices[0].message


def echo(msg: Any) -> dict[str, Any]:
    """The assistant message as an agent would send it back (re-serialised, not token-exact)."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [tc.model_dump() for tc in msg.tool_calls]
    return out


@pytest.mark.gateway(cumulative_token_mode=True)
async def test_next_prompt_extends_the_sampled_tokens(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    handle = await gateway.create_session("cum", {})
    history: list[Any] = [SYSTEM, {"role": "user", "content": "Weather in Paris?"}]
    first = await ask(handle, history, tools=TOOLS)
    call_id = first.tool_calls[0].id
    history += [echo(first), {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]
    await ask(handle, history, tools=TOOLS)
    t1, t2 = await gateway.get_turns("cum")
    prev = list(t1.prompt_ids) + list(t1.completion_ids)
    assert list(t2.prompt_ids[: len(prev)]) == prev  # the sampled ids, verbatim
    bridge = tok.decode(list(t2.prompt_ids[len(prev) :]))
    assert "<tool_response>\nsunny\n</tool_response>" in bridge and bridge.endswith(
        "<|im_start|>assistant\n"
    )
    assert metric(cluster, "agentrl_trace_breaks_total", reason="history_rewrite") == 0


@pytest.mark.gateway(cumulative_token_mode=True)
async def test_history_rewrite_falls_back_and_records_a_break(
    gateway: GatewayServer, cluster: Cluster, renderer: Any
) -> None:
    handle = await gateway.create_session("rewrite", {})
    first = await ask(handle, [SYSTEM, {"role": "user", "content": "Question one"}])
    edited = [
        SYSTEM,
        {"role": "user", "content": "Question one, edited"},
        echo(first),
        {"role": "user", "content": "and?"},
    ]
    await ask(handle, edited)
    _, t2 = await gateway.get_turns("rewrite")
    assert list(t2.prompt_ids) == renderer.render_ids(
        edited, add_generation_prompt=True
    )  # full render
    assert metric(cluster, "agentrl_trace_breaks_total", reason="history_rewrite") == 1


async def test_identical_retries_are_not_breaks(gateway: GatewayServer, cluster: Cluster) -> None:
    handle = await gateway.create_session("retry", {})
    msgs = [SYSTEM, {"role": "user", "content": "same"}]
    await ask(handle, msgs)
    await ask(handle, msgs)
    t1, t2 = await gateway.get_turns("retry")
    assert t1.prompt_ids == t2.prompt_ids
    # Every reason's series exists at 0 from the start (so rate() sees a one-off break).
    assert metric(cluster, "agentrl_trace_breaks_total", reason="history_rewrite") == 0


async def test_full_render_mode_detects_retokenization_drift(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    """Without cumulative mode, a re-render that does not reproduce the sampled ids is counted."""
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    pieces = tok.encode("Paris")
    cluster.set(
        responder=lambda p, params: [*(tok.encode("P") + tok.encode("aris")), im_end]
    )  # non-canonical split
    assert tok.encode("P") + tok.encode("aris") != pieces
    handle = await gateway.create_session("drift", {})
    first = await ask(handle, [SYSTEM, {"role": "user", "content": "Capital of France?"}])
    assert first.content == "Paris"
    await ask(
        handle,
        [
            SYSTEM,
            {"role": "user", "content": "Capital of France?"},
            echo(first),
            {"role": "user", "content": "Sure?"},
        ],
    )
    assert metric(cluster, "agentrl_trace_breaks_total", reason="retokenize_drift") == 1


@pytest.mark.gateway(cumulative_token_mode=True)
async def test_an_agent_loop_merges_into_one_exact_training_sequence(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    """The contract with the rollout: a tool-using episode through the gateway merges into one
    segment whose trainable tokens are exactly what the engine sampled, with its logprobs."""
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    handle = await gateway.create_session("episode", {"max_new_tokens": 256})
    history: list[Any] = [SYSTEM, {"role": "user", "content": "Weather in Paris?"}]
    for i in range(4):
        reply = await ask(handle, history, tools=TOOLS)
        call = reply.tool_calls[0]
        history += [echo(reply), {"role": "tool", "tool_call_id": call.id, "content": f"{i}C"}]
    turns = await gateway.get_turns("episode")
    (segment,) = merge_turns(turns)
    assert segment.num_turns == 4
    assert segment.tokens == list(turns[-1].prompt_ids) + list(turns[-1].completion_ids)
    response = segment.tokens[-segment.response_length :]
    trained = [t for t, m in zip(response, segment.loss_mask, strict=True) if m]
    assert trained == [t for turn in turns for t in turn.completion_ids]
    sampled_lp = [lp for turn in turns for lp in turn.logprobs or []]
    assert [
        lp for lp, m in zip(segment.logprobs, segment.loss_mask, strict=True) if m
    ] == sampled_lp
    assert metric(cluster, "agentrl_trace_breaks_total", reason="history_rewrite") == 0
