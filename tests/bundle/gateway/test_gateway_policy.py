"""What the trainer learns from stays exact: the sampling policy, odd logprobs, odd replies.

With the official `openai` and `anthropic` SDKs against the gateway and the stub engines:
- a sampling parameter the session does not set and that would change the distribution is
  refused when the agent sends a non-neutral value (neutral values are ignored);
- logprobs SGLang serialises as null (NaN/inf) still give a recorded turn, masked and
  counted by the merge;
- a completion the renderer's tool-call parser chokes on is still recorded and answered.
"""

from __future__ import annotations

import math
from typing import Any

import anthropic
import openai
import pytest

from agentrl.bundle.gateway import GatewayClient, GatewayServer
from agentrl.bundle.gateway.tokenizer import build_renderer
from agentrl.bundle.traces import merge_turns_with_stats

from .gateway_helpers import MESSAGES, TOOLS, Cluster, metric, scripted


def oai(handle: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)


def claude(handle: Any) -> anthropic.AsyncAnthropic:
    base = handle.base_url.removesuffix("/v1")
    return anthropic.AsyncAnthropic(base_url=base, auth_token=handle.token, max_retries=0)


# ---- sampling policy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": -1.0}, "presence_penalty"),
        ({"temperature": 0.2}, "temperature"),  # the session below leaves it unset
        ({"extra_body": {"top_k": 20}}, "top_k"),  # SGLang/vLLM extension
        ({"extra_body": {"repetition_penalty": 1.1}}, "repetition_penalty"),
        ({"extra_body": {"min_p": 0.05}}, "min_p"),
        ({"logit_bias": {"17": 5}}, "logit_bias"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_openai_distribution_changing_params_the_session_does_not_set_are_refused(
    gateway: GatewayServer, cluster: Cluster, kwargs: dict[str, Any], param: str, stream: bool
) -> None:
    handle = await gateway.create_session(f"p-{param}-{stream}", {"max_new_tokens": 32})
    with pytest.raises(openai.BadRequestError) as err:
        await oai(handle).chat.completions.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=stream,
            **kwargs,
        )
    body = err.value.body
    assert isinstance(body, dict) and body["param"] == param
    assert param in body["message"] and "distribution" in body["message"]
    assert cluster.all_requests() == []  # refused before any engine call
    assert await gateway.get_turns(handle.session_id) == []


async def test_openai_neutral_values_are_ignored_and_session_values_win(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("p-neutral", {"max_new_tokens": 32})
    await oai(handle).chat.completions.create(
        model="m",
        messages=MESSAGES,  # type: ignore[arg-type]
        frequency_penalty=0,
        presence_penalty=0.0,
        temperature=1.0,
        top_p=1,
        extra_body={"top_k": -1, "min_p": 0, "repetition_penalty": 1.0},
    )
    sent = cluster.all_requests()[0]["sampling_params"]
    for key in ("frequency_penalty", "presence_penalty", "top_k", "min_p", "repetition_penalty"):
        assert key not in sent  # SGLang's defaults apply: the distribution is untouched
    trainer = {"temperature": 0.8, "frequency_penalty": 0.3, "max_new_tokens": 32}
    handle = await gateway.create_session("p-session", trainer)
    await oai(handle).chat.completions.create(
        model="m",
        messages=MESSAGES,  # type: ignore[arg-type]
        frequency_penalty=1.5,
        temperature=0.1,
    )
    (req,) = [r for r in cluster.all_requests() if r["rid"].startswith("p-session-")]
    sent = req["sampling_params"]
    assert sent["frequency_penalty"] == 0.3 and sent["temperature"] == 0.8  # the trainer's


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_top_k_is_refused_unless_the_session_sets_it(
    gateway: GatewayServer, cluster: Cluster, stream: bool
) -> None:
    handle = await gateway.create_session(f"a-topk-{stream}", {"max_new_tokens": 32})
    args: dict[str, Any] = {"model": "m", "max_tokens": 32, "messages": MESSAGES[1:]}
    top_k = {"extra_body": {"top_k": 5}}  # this SDK release dropped the keyword; the API has it
    with pytest.raises(anthropic.BadRequestError) as err:
        if stream:
            async with claude(handle).messages.stream(**args, **top_k) as events:
                await events.get_final_message()
        else:
            await claude(handle).messages.create(**args, **top_k)
    assert err.value.status_code == 400 and "top_k" in str(err.value)
    assert "distribution" in str(err.value)
    assert cluster.all_requests() == []
    await claude(handle).messages.create(**args)  # no top_k: fine
    assert "top_k" not in cluster.all_requests()[0]["sampling_params"]

    trainer = await gateway.create_session(f"a-topk-set-{stream}", {"top_k": 40})
    await claude(trainer).messages.create(**args, **top_k)
    (sent,) = [r for r in cluster.all_requests() if r["rid"].startswith(trainer.session_id)]
    assert sent["sampling_params"]["top_k"] == 40


# ---- null logprobs --------------------------------------------------------------------


async def test_null_logprobs_give_a_recorded_turn_that_the_merge_masks(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(null_logprobs=True)
    handle = await gateway.create_session("nan-lp", {"max_new_tokens": 32})
    reply = await oai(handle).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.choices[0].finish_reason == "stop"
    sampled = cluster.sampled(cluster.all_requests()[0]["rid"])
    (turn,) = await gateway.get_turns("nan-lp")
    assert list(turn.completion_ids) == sampled
    assert turn.logprobs is not None and all(math.isnan(x) for x in turn.logprobs)
    # Over the admin API too (JSON has no NaN: they travel as null), then merged.
    client = GatewayClient(f"http://127.0.0.1:{gateway.admin_port}", "admin-secret")
    try:
        remote = await client.get_turns("nan-lp")
    finally:
        await client.aclose()
    for turns in ([turn], remote):
        (segment,), stats = merge_turns_with_stats(turns, 256)
        assert stats.masked_turns == 1 and stats.masked_tokens == len(sampled)
        assert segment.loss_mask == [0] * len(sampled)
        assert segment.logprobs == [0.0] * len(sampled)
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="200") == 1


# ---- completions the parser rejects ---------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_completion_the_tool_call_parser_rejects_is_recorded_and_answered(
    gateway: GatewayServer,
    cluster: Cluster,
    tok: Any,
    stream: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The renderer's parser raises (as json.loads does on absurdly nested tool-call JSON,
    # depending on the interpreter's recursion limit, so the failure is injected here).
    # Text follows the call, so a stream re-parses the complete call while still generating.
    def choke(*_: Any, **__: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    # The gateway's renderer (qwen3, settings_for) is built at start: patch its class.
    monkeypatch.setattr(type(build_renderer(tok, "qwen3")), "parse_response", choke)
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    text = f"<tool_call>\n{call}\n</tool_call>" + " The answer is 42." * 40
    cluster.set(responder=scripted(tok, text), incremental_stream=True)
    handle = await gateway.create_session(f"choke-{stream}", {"max_new_tokens": 4000})
    c = oai(handle)
    args: dict[str, Any] = {"model": "m", "messages": MESSAGES, "tools": TOOLS}
    if stream:
        chunks = [ch async for ch in await c.chat.completions.create(**args, stream=True)]
        content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    else:
        content = (await c.chat.completions.create(**args)).choices[0].message.content or ""
    assert content.startswith("<tool_call>") and "get_weather" in content  # the text, as sampled
    sampled = cluster.sampled(cluster.all_requests()[0]["rid"])
    (turn,) = await gateway.get_turns(handle.session_id)
    assert list(turn.completion_ids) == sampled and len(sampled) > 100


async def test_a_tool_call_with_arguments_json_cannot_carry_stays_text(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    call = '{"name": "get_weather", "arguments": {"city": 123456789012345678901234567890}}'
    cluster.set(responder=scripted(tok, f"<tool_call>\n{call}\n</tool_call>"))
    handle = await gateway.create_session("bigint", {"max_new_tokens": 256})
    reply = await oai(handle).chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)  # type: ignore[arg-type]
    message = reply.choices[0].message
    assert message.tool_calls is None and "123456789012345678901234567890" in (
        message.content or ""
    )
    (turn,) = await gateway.get_turns("bigint")
    assert list(turn.completion_ids) == cluster.sampled(cluster.all_requests()[0]["rid"])
