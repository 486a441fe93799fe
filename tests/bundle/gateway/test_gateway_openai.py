"""The OpenAI front end with the official `openai` SDK, and the exactness of the traces."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from tests.support.sglang_stub import stub_logprob

from agentrl.bundle.gateway import GatewayServer

from .gateway_helpers import MESSAGES, TOOL_REPLY, TOOLS, Cluster, metric, scripted


def client(gateway: GatewayServer, handle: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)


async def test_chat_completion_records_exactly_what_the_engine_sampled(
    gateway: GatewayServer, cluster: Cluster, renderer: Any
) -> None:
    handle = await gateway.create_session("s-exact", {"temperature": 1.0})
    reply = await client(gateway, handle).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.choices[0].message.role == "assistant"
    turns = await gateway.get_turns("s-exact")
    assert len(turns) == 1
    (sent,) = cluster.all_requests()
    assert sent["return_logprob"] is True and sent["rid"].startswith("s-exact-")
    assert (
        list(turns[0].prompt_ids)
        == sent["input_ids"]
        == renderer.render_ids(MESSAGES, add_generation_prompt=True)
    )
    sampled = cluster.sampled(sent["rid"])
    assert list(turns[0].completion_ids) == sampled
    assert list(turns[0].logprobs or []) == [stub_logprob(t, i) for i, t in enumerate(sampled)]
    assert turns[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == len(sampled)
    assert metric(cluster, "agentrl_generated_tokens_total") == len(sampled)
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="200") == 1


async def test_session_sampling_params_reach_the_engine(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session(
        "s-params", {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 64}
    )
    await client(gateway, handle).chat.completions.create(
        model="m", messages=MESSAGES, max_tokens=32, temperature=0.1
    )  # type: ignore[arg-type]
    params = cluster.all_requests()[0]["sampling_params"]
    assert params["temperature"] == 0.7 and params["top_p"] == 0.9  # the trainer's policy wins
    assert params["max_new_tokens"] == 32  # the smaller budget
    assert params["no_stop_trim"] is True and params["skip_special_tokens"] is False
    assert 2 in params["stop_token_ids"]  # <|im_end|>


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_calls_and_reasoning_are_parsed(
    gateway: GatewayServer, cluster: Cluster, tok: Any, stream: bool
) -> None:
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    handle = await gateway.create_session(f"s-tools-{stream}", {})
    c = client(gateway, handle)
    args: dict[str, Any] = {
        "model": "m",
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "auto",
    }
    if not stream:
        msg = (await c.chat.completions.create(**args)).choices[0]
        assert msg.finish_reason == "tool_calls"
        calls = msg.message.tool_calls or []
        assert [(tc.function.name, tc.function.arguments) for tc in calls] == [
            ("get_weather", '{"city":"Paris"}')
        ]  # type: ignore[union-attr]
        assert msg.message.content == "Let me check."
        assert (
            msg.message.model_extra
            and msg.message.model_extra["reasoning_content"] == "I should look it up."
        )
        return
    chunks = [
        ch
        async for ch in await c.chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True}
        )
    ]
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert "".join(d.content or "" for d in deltas) == "Let me check."
    calls = [tc for d in deltas for tc in d.tool_calls or []]
    assert [tc.function.name for tc in calls] == ["get_weather"]  # type: ignore[union-attr]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(
        cluster.sampled(cluster.all_requests()[0]["rid"])
    )


async def test_tool_choice_none_keeps_the_call_as_text(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    handle = await gateway.create_session("s-none", {})
    reply = await client(gateway, handle).chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, tool_choice="none"
    )  # type: ignore[arg-type]
    assert reply.choices[0].message.tool_calls is None
    assert "get_weather" in (reply.choices[0].message.content or "")


async def test_wrong_token_is_401_and_unknown_session_404(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("s-auth", {})
    bad = openai.AsyncOpenAI(base_url=handle.base_url, api_key="not-the-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await bad.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    other = openai.AsyncOpenAI(
        base_url=gateway.session_url("nope"), api_key=handle.token, max_retries=0
    )
    with pytest.raises(openai.NotFoundError):
        await other.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert cluster.all_requests() == []
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="401") == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": MESSAGES, "temperature": 9}, "temperature"),
        ({"messages": MESSAGES, "tools": [{"type": "web"}]}, "tools[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0]",
        ),
        ({"messages": MESSAGES, "n": 2}, "n"),
    ],
)
async def test_bad_requests_name_the_field(
    gateway: GatewayServer, cluster: Cluster, body: dict[str, Any], param: str
) -> None:
    handle = await gateway.create_session("s-bad", {})
    with pytest.raises(openai.BadRequestError) as err:
        await client(gateway, handle).chat.completions.create(model="m", **body)
    assert isinstance(err.value.body, dict) and err.value.body["param"] == param
    assert param in err.value.body["message"]
    assert cluster.all_requests() == []


async def test_engine_failure_is_a_502_and_counted(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(fail_next=1)
    handle = await gateway.create_session("s-fail", {})
    with pytest.raises(openai.InternalServerError) as err:
        await client(gateway, handle).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert err.value.status_code == 502
    assert await gateway.get_turns("s-fail") == []
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="502") == 1


async def test_a_matched_stop_string_is_cut_from_the_content_not_the_trace(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    text_ids = tok.encode("The answer is 42. END")

    def until_stop(prompt: list[int], params: dict[str, Any]) -> list[int]:
        return text_ids

    cluster.set(responder=until_stop)
    handle = await gateway.create_session("s-stop", {})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    reply = await c.chat.completions.create(model="m", messages=MESSAGES, stop=["END"])  # type: ignore[arg-type]
    assert cluster.all_requests()[0]["sampling_params"]["stop"] == ["END"]
    (turn,) = await gateway.get_turns("s-stop")
    assert list(turn.completion_ids) == text_ids
    assert reply.choices[0].message.content == "The answer is 42. "


async def test_logprobs_are_the_sampled_ones(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    handle = await gateway.create_session("s-lp", {})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    reply = await c.chat.completions.create(model="m", messages=MESSAGES, logprobs=True)  # type: ignore[arg-type]
    sampled = cluster.sampled(cluster.all_requests()[0]["rid"])
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [(x.token, x.logprob) for x in content] == [
        (tok.decode([t]), stub_logprob(t, i)) for i, t in enumerate(sampled)
    ]
    with pytest.raises(openai.BadRequestError, match="response_format"):
        await c.chat.completions.create(
            model="m", messages=MESSAGES, response_format={"type": "json_object"}
        )  # type: ignore[arg-type]


async def test_legacy_functions_are_refused_not_dropped(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """The deprecated `functions` / `function_call` used to be ignored: the model never saw
    the functions the agent offered, and the agent waited for calls that could not come."""
    handle = await gateway.create_session("s-functions", {})
    fn = {"name": "get_weather", "parameters": {"type": "object"}}
    for extra in ({"functions": [fn]}, {"function_call": "auto"}):
        with pytest.raises(openai.BadRequestError) as err:
            await client(gateway, handle).chat.completions.create(
                model="m", messages=MESSAGES, **extra
            )  # type: ignore[call-overload]
        assert "tools" in err.value.message
    assert cluster.all_requests() == []
