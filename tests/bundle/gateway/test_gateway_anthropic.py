"""The Anthropic front end with the official `anthropic` SDK (as Claude Code talks to us)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.gateway.render_pool import INLINE_RENDER_BYTES
from agentrl.bundle.traces import merge_turns

from .gateway_helpers import TOOL_REPLY, Cluster, metric, scripted

TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def client(handle: Any, **kw: Any) -> anthropic.AsyncAnthropic:
    # The Anthropic SDK appends /v1/messages itself; Claude Code sends the token as a Bearer.
    base = handle.base_url.removesuffix("/v1")
    return anthropic.AsyncAnthropic(base_url=base, auth_token=handle.token, max_retries=0, **kw)


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_with_thinking_and_tool_use(
    gateway: GatewayServer, cluster: Cluster, tok: Any, stream: bool
) -> None:
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    handle = await gateway.create_session(f"a-tools-{stream}", {})
    args: dict[str, Any] = {
        "model": "m",
        "max_tokens": 256,
        "system": [
            {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": TOOLS,
    }
    c = client(handle)
    if stream:
        async with c.messages.stream(**args) as s:
            msg = await s.get_final_message()
    else:
        msg = await c.messages.create(**args)
    kinds = [b.type for b in msg.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert msg.content[0].thinking == "I should look it up."  # type: ignore[union-attr]
    assert msg.content[1].text == "Let me check."  # type: ignore[union-attr]
    assert (msg.content[2].name, msg.content[2].input) == ("get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert msg.stop_reason == "tool_use"
    (turn,) = await gateway.get_turns(handle.session_id)
    rid = cluster.all_requests()[0]["rid"]
    assert list(turn.completion_ids) == cluster.sampled(rid) and msg.usage.output_tokens == len(
        turn.completion_ids
    )


async def test_tool_result_round_trip_and_max_tokens(
    gateway: GatewayServer, cluster: Cluster, renderer: Any
) -> None:
    handle = await gateway.create_session("a-loop", {})
    c = client(handle, api_key=None)
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look it up", "signature": ""},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
        },
    ]
    msg = await c.messages.create(model="m", max_tokens=2, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 2
    expected = renderer.render_ids(
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "look it up",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "toolu_1",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "toolu_1"},
        ],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in TOOLS
        ],
        add_generation_prompt=True,
    )
    assert cluster.all_requests()[0]["input_ids"] == expected


async def test_errors_are_anthropic_shaped(gateway: GatewayServer, cluster: Cluster) -> None:
    handle = await gateway.create_session("a-err", {})
    with pytest.raises(anthropic.BadRequestError) as err:
        await client(handle).messages.create(
            model="m", max_tokens=0, messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "max_tokens" in err.value.body["error"]["message"]  # type: ignore[index]
    bad = anthropic.AsyncAnthropic(
        base_url=handle.base_url.removesuffix("/v1"), api_key="wrong", max_retries=0
    )
    with pytest.raises(anthropic.AuthenticationError):
        await bad.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert metric(cluster, "agentrl_gateway_requests_total", api="anthropic", code="401") == 1
    assert cluster.all_requests() == []


async def test_count_tokens_is_the_rendered_prompt_length(
    gateway: GatewayServer, cluster: Cluster, renderer: Any
) -> None:
    handle = await gateway.create_session("a-count", {})
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    counted = await client(handle).messages.count_tokens(model="m", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            },
        }
        for t in TOOLS
    ]
    assert counted.input_tokens == len(
        renderer.render_ids(messages, tools=tools, add_generation_prompt=True)
    )
    assert cluster.all_requests() == []  # counting never reaches the engine


async def test_models_lists_the_served_model(gateway: GatewayServer) -> None:
    handle = await gateway.create_session("a-models", {})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    assert [m.id async for m in c.models.list()] == ["default"]  # spec.agent.modelId's default
    bad = openai.AsyncOpenAI(base_url=handle.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await bad.models.list()


@pytest.mark.gateway(model_id="qwen3-agent")
async def test_models_lists_the_model_id_the_agent_is_told(gateway: GatewayServer) -> None:
    handle = await gateway.create_session("a-models-id", {})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    assert [m.id async for m in c.models.list()] == ["qwen3-agent"]
    reply = await c.chat.completions.create(model="", messages=[{"role": "user", "content": "hi"}])
    assert reply.model == "qwen3-agent"  # echoed when the agent names no model


async def test_stop_sequence_and_tool_choice_none(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    ids = tok.encode("Paris. DONE and more")
    cluster.set(responder=lambda prompt, params: ids)
    handle = await gateway.create_session("a-stop", {})
    msg = await client(handle).messages.create(
        model="m",
        max_tokens=64,
        stop_sequences=["DONE"],
        messages=[{"role": "user", "content": "Capital?"}],
    )
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "DONE")
    assert msg.content[0].text == "Paris. "  # type: ignore[union-attr]
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    msg = await client(handle).messages.create(
        model="m",
        max_tokens=64,
        tools=TOOLS,
        tool_choice={"type": "none"},  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Weather?"}],
    )
    assert [b.type for b in msg.content] == ["thinking", "text"] and msg.stop_reason == "end_turn"
    assert "get_weather" in msg.content[1].text  # type: ignore[union-attr]


PREFILL = [
    {"role": "user", "content": "Capital of France?"},
    {"role": "assistant", "content": "The capital is"},  # the start of the reply (prefill)
]


def continued(renderer: Any, tok: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The conversation rendered up to the end of its last (assistant) message's text: the
    closed turn without its `<|im_end|>\\n`, which the model then continues."""
    ids = renderer.render_ids(messages, add_generation_prompt=False)
    assert ids[-2:] == [tok.convert_tokens_to_ids("<|im_end|>"), *tok.encode("\n")]
    return ids[:-2]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_final_assistant_message_is_continued_not_closed(
    gateway: GatewayServer, cluster: Cluster, tok: Any, renderer: Any, stream: bool
) -> None:
    """Anthropic's prefill: the model continues the last assistant message, and the answer is
    only what it added. It used to be rendered as a finished turn followed by a new assistant
    turn, so the model never saw its reply as started."""
    cluster.set(responder=scripted(tok, " Paris."))
    handle = await gateway.create_session(f"a-prefill-{stream}", {})
    c = client(handle)
    args: dict[str, Any] = {"model": "m", "max_tokens": 32, "messages": PREFILL}
    if stream:
        async with c.messages.stream(**args) as s:
            msg = await s.get_final_message()
    else:
        msg = await c.messages.create(**args)
    sent = cluster.all_requests()[0]["input_ids"]
    assert sent == continued(renderer, tok, PREFILL)
    assert tok.decode(sent).endswith("The capital is")
    assert [(b.type, b.text) for b in msg.content] == [("text", "Paris.")]  # type: ignore[union-attr]
    counted = await c.messages.count_tokens(model="m", messages=PREFILL)  # type: ignore[arg-type]
    assert counted.input_tokens == len(sent)


@pytest.mark.gateway(cumulative_token_mode=True)
async def test_the_turn_after_a_prefill_extends_what_the_model_saw(
    gateway: GatewayServer, cluster: Cluster, tok: Any, renderer: Any
) -> None:
    """The agent echoes the prefill and its continuation as one message; the next prompt is
    still the prefilled prompt + the sampled ids (no trace break)."""
    cluster.set(
        responder=scripted(
            tok,
            "<tool_call>\n" + '{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}\n</tool_call>',
        )
    )
    handle = await gateway.create_session("a-prefill-next", {})
    c = client(handle)
    prefill = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking."},
    ]
    msg = await c.messages.create(model="m", max_tokens=64, messages=prefill, tools=TOOLS)  # type: ignore[arg-type]
    (call,) = [b for b in msg.content if b.type == "tool_use"]
    cluster.set(responder=scripted(tok, "Sunny."))
    follow = [
        prefill[0],
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    await c.messages.create(model="m", max_tokens=64, messages=follow, tools=TOOLS)  # type: ignore[arg-type]
    first, second = await gateway.get_turns(handle.session_id)
    seen = [*first.prompt_ids, *first.completion_ids]
    assert list(second.prompt_ids)[: len(seen)] == seen
    assert metric(cluster, "agentrl_trace_breaks_total", reason="bridge_refused") == 0
    assert metric(cluster, "agentrl_trace_breaks_total", reason="history_rewrite") == 0


TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.gateway(cumulative_token_mode=True)
async def test_a_reply_cut_at_max_tokens_then_continued_is_one_conversation(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    """The agent's answer stops at max_tokens; it continues it as a prefill, and the model
    calls a tool. The echo of prefill + continuation is the prefilled turn's reply, not the
    cut one's: the turn after the tool result extends what the model saw and sampled (one
    segment). Both earlier turns fit that echo's history and neither reply matched it
    whole, so the turn was an `ambiguous_fork`, rendered in full, and its own segment."""
    handle = await gateway.create_session("a-cut-continued", {})
    c = client(handle)
    question = {"role": "user", "content": "Weather in Paris?"}
    cluster.set(responder=scripted(tok, "Let me check the weather."))
    cut = await c.messages.create(model="m", max_tokens=3, messages=[question], tools=TOOLS)  # type: ignore[arg-type]
    assert cut.stop_reason == "max_tokens"
    (begun,) = [b.text for b in cut.content if b.type == "text"]
    cluster.set(responder=scripted(tok, TOOL_CALL))
    prefill = [question, {"role": "assistant", "content": begun}]
    msg = await c.messages.create(model="m", max_tokens=64, messages=prefill, tools=TOOLS)  # type: ignore[arg-type]
    (call,) = [b for b in msg.content if b.type == "tool_use"]
    cluster.set(responder=scripted(tok, "Sunny."))
    follow = [
        question,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": begun},
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    await c.messages.create(model="m", max_tokens=64, messages=follow, tools=TOOLS)  # type: ignore[arg-type]
    first, second, third = await gateway.get_turns(handle.session_id)
    assert first.finish_reason == "length"
    seen = [*second.prompt_ids, *second.completion_ids]
    assert list(third.prompt_ids)[: len(seen)] == seen
    assert metric(cluster, "agentrl_trace_breaks_total", reason="ambiguous_fork") == 0
    segments = merge_turns([first, second, third])
    assert [s.num_turns for s in segments] == [1, 2]


async def test_a_final_assistant_tool_use_without_its_result_is_refused(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("a-prefill-tool", {})
    with pytest.raises(anthropic.BadRequestError) as err:
        await client(handle).messages.create(
            model="m",
            max_tokens=8,
            tools=TOOLS,  # type: ignore[arg-type]
            messages=[
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}
                    ],
                },
            ],
        )
    assert "tool_result" in err.value.body["error"]["message"]  # type: ignore[index]
    assert cluster.all_requests() == []


@pytest.mark.gateway(render_workers=1)
async def test_a_large_prefill_renders_in_a_worker_to_the_same_ids(
    gateway: GatewayServer, cluster: Cluster, tok: Any, renderer: Any
) -> None:
    cluster.set(responder=scripted(tok, " Paris."))
    handle = await gateway.create_session("a-prefill-pooled", {})
    system = "lorem ipsum " * (INLINE_RENDER_BYTES // 4)  # over the inline limit: a worker
    await client(handle).messages.create(
        model="m",
        max_tokens=32,
        system=system,
        messages=PREFILL,  # type: ignore[arg-type]
    )
    assert gateway._pool is not None and gateway._pool.jobs == 1  # rendered by a worker
    expected = continued(renderer, tok, [{"role": "system", "content": system}, *PREFILL])
    assert cluster.all_requests()[0]["input_ids"] == expected


async def test_structured_output_is_refused_like_openai_response_format(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """`output_config.format` asks for constrained decoding, as OpenAI's `response_format`
    does (refused there): it used to be dropped without a word, and the agent got free text
    where it expected JSON of its schema. `output_config.effort` alone is still served."""
    handle = await gateway.create_session("a-format", {})
    c = client(handle)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    with pytest.raises(anthropic.BadRequestError) as err:
        await c.messages.create(
            model="m",
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            output_config={"format": {"type": "json_schema", "schema": schema}},
        )
    assert "output_config.format" in err.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as err:
        await c.messages.create(
            model="m",
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"output_format": {"type": "json_schema", "schema": schema}},  # older beta
        )
    assert "output_format" in err.value.body["error"]["message"]  # type: ignore[index]
    assert cluster.all_requests() == []
    await c.messages.create(
        model="m",
        max_tokens=8,
        messages=[{"role": "user", "content": "x"}],
        output_config={"effort": "high", "format": None},
    )
