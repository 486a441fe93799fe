"""Long streamed generations: keep-alive comments while the engine works, in-band errors once
the stream has started, and engine input errors passed on as 400."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from tests.support.sglang_stub import stub_logprob

from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.gateway.streaming import DeltaTracker

from .gateway_helpers import MESSAGES, Cluster, metric, scripted, until


@pytest.mark.gateway(stream_keepalive_s=0.05)
async def test_slow_stream_sends_keepalives_then_the_answer(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=0.05)
    handle = await gateway.create_session("ka", {})
    headers = {"Authorization": f"Bearer {handle.token}"}
    async with aiohttp.ClientSession() as http:
        body = {"messages": MESSAGES, "stream": True}
        async with http.post(
            handle.base_url + "/chat/completions", json=body, headers=headers
        ) as r:
            raw = await r.read()
    assert r.status == 200 and raw.startswith(b": keep-alive\n\n")
    assert raw.endswith(b"data: [DONE]\n\n") and b'"finish_reason":"stop"' in raw
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    chunks = [
        ch
        async for ch in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    ]  # type: ignore[call-overload]
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.gateway(stream_keepalive_s=0.05)
async def test_error_after_the_stream_started_is_sent_in_band(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=0.1)
    handle = await gateway.create_session("inband", {})

    async def preempt() -> None:  # a weight update aborts everything mid-stream
        await until(lambda: any(e._live for e in cluster.engines), "generation started")
        await asyncio.sleep(0.15)
        async with aiohttp.ClientSession() as http:
            for e in cluster.engines:
                await http.post(e.url + "/abort_request", json={"abort_all": True})

    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    aborter = asyncio.create_task(preempt())
    with pytest.raises(openai.APIError, match="aborted"):
        async for _ in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[call-overload]
            pass
    await aborter
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="503") == 1

    a = anthropic.AsyncAnthropic(
        base_url=handle.base_url.removesuffix("/v1"), auth_token=handle.token, max_retries=0
    )
    aborter = asyncio.create_task(preempt())
    with pytest.raises(anthropic.APIStatusError, match="aborted"):
        async with a.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "x"}]
        ) as s:
            await s.get_final_message()
    await aborter


async def test_engine_input_error_is_a_400(gateway: GatewayServer, cluster: Cluster) -> None:
    cluster.set(fail_next=1, fail_status=400)
    handle = await gateway.create_session("too-long", {})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="refused"):
        await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]


LONG = (
    "<think>\nFirst I recall the capital cities of Europe one by one, carefully.\n</think>\n\n"
    "The capital of France is Paris, which sits on the Seine and has been the capital for a long "
    "time; its population is about two million people in the city proper."
)


@pytest.mark.parametrize("incremental", [False, True])
async def test_stream_delivers_deltas_as_they_are_sampled(
    gateway: GatewayServer, cluster: Cluster, tok: Any, incremental: bool
) -> None:
    # Slow enough, and in chunks small enough, that the answer goes out in several flushes.
    cluster.set(responder=scripted(tok, LONG), token_delay_s=0.01, incremental_stream=incremental)
    handle = await gateway.create_session(
        f"live-{incremental}", {"max_new_tokens": 1024, "stream_interval": 2}
    )
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    stream = await c.chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[call-overload]
    deltas = [ch.choices[0].delta async for ch in stream if ch.choices]
    content = [d.content for d in deltas if d.content]
    reasoning = [
        d.model_extra.get("reasoning_content")
        for d in deltas
        if d.model_extra and d.model_extra.get("reasoning_content")
    ]
    assert len(content) > 1 and len(reasoning) > 1  # it really streamed, in pieces
    assert (
        "".join(reasoning) == "First I recall the capital cities of Europe one by one, carefully."
    )
    assert "".join(content) == LONG.split("</think>\n\n")[1]
    (sent,) = cluster.all_requests()
    assert sent["stream"] is True
    (turn,) = await gateway.get_turns(handle.session_id)
    assert list(turn.completion_ids) == cluster.sampled(sent["rid"])  # the trace is exact
    assert list(turn.logprobs or []) == [
        stub_logprob(t, i) for i, t in enumerate(turn.completion_ids)
    ]


async def test_anthropic_stream_opens_thinking_then_text_blocks(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    cluster.set(responder=scripted(tok, LONG), token_delay_s=0.01)
    handle = await gateway.create_session("live-a", {"max_new_tokens": 1024, "stream_interval": 2})
    a = anthropic.AsyncAnthropic(
        base_url=handle.base_url.removesuffix("/v1"), auth_token=handle.token, max_retries=0
    )
    kinds: list[str] = []
    async with a.messages.stream(
        model="m", max_tokens=512, messages=[{"role": "user", "content": "Capital of France?"}]
    ) as s:
        async for event in s:
            if event.type == "content_block_delta":
                kinds.append(event.delta.type)
        msg = await s.get_final_message()
    assert kinds.count("thinking_delta") > 1 and kinds.count("text_delta") > 1
    assert kinds.index("text_delta") > max(i for i, k in enumerate(kinds) if k == "thinking_delta")
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[1].text == LONG.split("</think>\n\n")[1]  # type: ignore[union-attr]
    assert msg.stop_reason == "end_turn"


def test_delta_tracker_never_takes_back_what_it_sent() -> None:
    t = DeltaTracker()
    assert t.update("\nI sh", "") == []  # held back: could still be the start of a tag
    first = t.update("\nI should look it up and then answer", "")
    assert first == [("reasoning", "I should look it up")]
    assert t.update("I should look it up and then answer.", "Paris", final=True) == [
        ("reasoning", " and then answer."),
        ("content", "Paris"),
    ]
    t2 = DeltaTracker()
    t2.update("", "Hello there, this is a longer content text")
    assert t2.update("", "Completely different", final=True) == []  # cannot retract: stop


@pytest.mark.gateway(stream_keepalive_s=0.05)
async def test_client_leaving_mid_stream_aborts_on_every_worker(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    cluster.set(responder=scripted(tok, LONG), token_delay_s=0.05)
    handle = await gateway.create_session("leaver", {"max_new_tokens": 1024})
    headers = {"Authorization": f"Bearer {handle.token}"}
    body = {"messages": MESSAGES, "stream": True}
    async with (
        aiohttp.ClientSession() as http,
        http.post(handle.base_url + "/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status == 200
        await r.content.readany()  # the stream is flowing; now the agent dies
    rid = cluster.all_requests()[0]["rid"]
    await until(lambda: all(rid in e.aborted for e in cluster.engines), "abort on every worker")
    await until(
        lambda: metric(cluster, "agentrl_gateway_requests_total", api="openai", code="499") == 1,
        "counted",
    )
    assert await gateway.get_turns("leaver") == []
