"""Long streamed generations: keep-alive comments while the engine works, in-band errors once
the stream has started, and engine input errors passed on as 400."""

from __future__ import annotations

import asyncio

import aiohttp
import anthropic
import openai
import pytest

from agentrl.bundle.gateway import GatewayServer

from .gateway_helpers import MESSAGES, Cluster, metric, until


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
