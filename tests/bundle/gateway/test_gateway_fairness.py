"""No single agent can stall the others: body limit, off-loop rendering, fair admission.

Ordering, never timing: "the small request finished while the large one was still being
rendered" is checked with task states, not clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import string
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from agentrl.bundle.gateway import GatewayServer, openai_api, render_pool, token_view
from agentrl.bundle.gateway.admission import Admission
from agentrl.bundle.gateway.chat import ApiError
from agentrl.bundle.gateway.engine import ENCODE_SLICE, generate_body
from agentrl.bundle.gateway.memory import LARGE_BYTES
from agentrl.bundle.gateway.render_pool import INLINE_RENDER_BYTES, RenderPool, WorkerConfig
from agentrl.bundle.traces import CONTEXT_FULL, Turn

from .gateway_helpers import (
    MESSAGES,
    TOOL_REPLY,
    TOOLS,
    Cluster,
    metric,
    scripted,
    settings_for,
    until,
)


def client(handle: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)


def words(n_bytes: int, seed: int = 1) -> str:
    """Text that tokenises to many tokens (random words: few merges apply)."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(500)]
    out: list[str] = []
    size = 0
    while size < n_bytes:
        w = rng.choice(vocab)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def pool(gateway: GatewayServer) -> RenderPool:
    assert gateway._pool is not None
    return gateway._pool


def rendering(gateway: GatewayServer) -> bool:
    """A started worker holds a job."""
    p = pool(gateway)
    return len(p.workers) == 1 and p.busy == 1


async def post(url: str, token: str, body: bytes, **headers: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=body, headers={"Authorization": f"Bearer {token}", **headers}) as r,
    ):
        return r.status, await r.json(content_type=None)


# ---- the body limit -------------------------------------------------------------------


@pytest.mark.gateway(max_request_bytes=64 * 1024)
async def test_a_body_over_the_limit_is_refused_unread_with_413(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("big-body", {})
    big = [{"role": "user", "content": "x" * (100 * 1024)}]
    with pytest.raises(openai.APIStatusError) as info:
        await client(handle).chat.completions.create(model="m", messages=big)  # type: ignore[arg-type]
    assert info.value.status_code == 413
    assert "maxRequestBytes" in str(info.value.message) and cluster.all_requests() == []

    async def chunks() -> Any:  # no Content-Length: aiohttp stops reading at the limit
        yield b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}]}'

    status, body = await post(handle.base_url[:-3] + "/v1/messages", handle.token, chunks())  # type: ignore[arg-type]
    assert status == 413 and body["type"] == "error"  # the Anthropic error shape
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="413") == 1
    # Under the limit is served as usual.
    await client(handle).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]


# ---- rendering off the event loop -------------------------------------------------------


@pytest.mark.parametrize("cumulative", [False, True])
async def test_large_prompts_render_in_a_worker_process_to_the_same_ids(
    cluster: Cluster, checkpoint: Any, renderer: Any, tok: Any, cumulative: bool
) -> None:
    cluster.set(responder=scripted(tok, TOOL_REPLY))
    gateway = GatewayServer(
        settings_for(cluster, checkpoint, render_workers=1, cumulative_token_mode=cumulative),
        cluster.metrics,
    )
    await gateway.start()
    try:
        handle = await gateway.create_session("pooled", {})
        c = client(handle)
        history: list[Any] = [
            {"role": "system", "content": words(3 * INLINE_RENDER_BYTES)},
            {"role": "user", "content": "Weather in Paris?"},
        ]
        first = await c.chat.completions.create(model="m", messages=history, tools=TOOLS)  # type: ignore[arg-type]
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        history += [
            {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
            # A large tool result: in cumulative mode the bridge itself is large work.
            {"role": "tool", "tool_call_id": call.id, "content": words(2 * INLINE_RENDER_BYTES)},
        ]
        await c.chat.completions.create(model="m", messages=history, tools=TOOLS)  # type: ignore[arg-type]
        assert (pool(gateway).jobs, pool(gateway).started) == (2, 1)
        turns = await gateway.get_turns("pooled")
        sent = cluster.all_requests()
        assert [list(t.prompt_ids) for t in turns] == [r["input_ids"] for r in sent]
        assert sent[0]["input_ids"] == renderer.render_ids(
            history[:2], tools=TOOLS, add_generation_prompt=True
        )
        second = list(turns[1].prompt_ids)
        parsed = openai_api.parse_request({"messages": history, "tools": TOOLS}).messages
        if cumulative:  # the sampled ids, verbatim, then the bridge the renderer gives inline
            prev = [*turns[0].prompt_ids, *turns[0].completion_ids]
            inline = renderer.bridge_to_next_turn(
                list(turns[0].prompt_ids), list(turns[0].completion_ids), parsed[3:], tools=TOOLS
            )
            assert second[: len(prev)] == prev and second == list(inline.token_ids)
        else:
            assert second == renderer.render_ids(parsed, tools=TOOLS, add_generation_prompt=True)
        assert metric(cluster, "agentrl_trace_breaks_total", reason="bridge_refused") == 0
    finally:
        await gateway.stop()
    assert not pool(gateway).workers  # stopped with the gateway


@pytest.mark.gateway(render_workers=1)
async def test_other_sessions_are_served_while_a_large_prompt_renders(
    gateway: GatewayServer,
) -> None:
    hog = await gateway.create_session("hog", {})
    other = await gateway.create_session("other", {})
    big = [{"role": "user", "content": words(LARGE_BYTES + 1000)}]  # seconds of rendering
    task = asyncio.create_task(client(hog).chat.completions.create(model="m", messages=big))  # type: ignore[arg-type]
    await until(lambda: rendering(gateway), "the large prompt is in the worker", 60)
    # It renders on CPU nothing else wants: the loop, woken, preempts it at once.
    (worker,) = pool(gateway).workers
    assert os.sched_getscheduler(worker.proc.pid) == os.SCHED_IDLE
    for _ in range(3):  # the event loop is free: these finish while the worker renders
        await client(other).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert not task.done()
    reply = await task
    assert reply.usage is not None and reply.usage.prompt_tokens > 100_000
    # A large request hands its memory back to the OS afterwards (glibc keeps it otherwise).
    releaser = gateway.frontend.releaser if gateway.frontend is not None else None
    assert releaser is not None
    await until(lambda: releaser.runs == 1, "memory released", 30)


@pytest.mark.gateway(render_workers=1)
async def test_a_client_that_hangs_up_frees_its_worker(gateway: GatewayServer) -> None:
    handle = await gateway.create_session("quitter", {})
    big = [{"role": "user", "content": words(1_000_000)}]
    task = asyncio.create_task(client(handle).chat.completions.create(model="m", messages=big))  # type: ignore[arg-type]
    await until(lambda: rendering(gateway), "the large prompt is in the worker", 60)
    (worker,) = pool(gateway).workers
    task.cancel()  # the SDK closes the connection; the handler is cancelled
    await until(lambda: worker.proc.returncode is not None, "the worker was stopped", 30)
    await until(lambda: pool(gateway).busy == 0, "the slot is free", 30)
    medium = [{"role": "user", "content": words(2 * INLINE_RENDER_BYTES)}]
    await client(handle).chat.completions.create(model="m", messages=medium)  # type: ignore[arg-type]
    assert pool(gateway).started == 2  # a fresh worker took over


@pytest.mark.gateway(render_workers=1)
async def test_a_worker_that_dies_fails_one_request_with_503(gateway: GatewayServer) -> None:
    handle = await gateway.create_session("crash", {})
    big = [{"role": "user", "content": words(1_000_000)}]
    task = asyncio.create_task(client(handle).chat.completions.create(model="m", messages=big))  # type: ignore[arg-type]
    await until(lambda: rendering(gateway), "the large prompt is in the worker", 60)
    (worker,) = pool(gateway).workers
    os.kill(worker.proc.pid, signal.SIGKILL)  # e.g. the kernel's OOM killer
    with pytest.raises(openai.APIStatusError) as info:
        await task
    assert info.value.status_code == 503 and "renderer exited" in str(info.value.message)
    medium = [{"role": "user", "content": words(2 * INLINE_RENDER_BYTES)}]
    await client(handle).chat.completions.create(model="m", messages=medium)  # type: ignore[arg-type]


async def test_closing_waits_for_an_idle_worker_that_was_too_slow_to_exit(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker runs at idle priority: on a saturated CPU it may not exit within the grace
    period after its stdin closes. Closing then killed it but never waited for it, so the
    process stayed a zombie and its stdout pipe outlived the event loop (a
    PytestUnraisableExceptionWarning, "Event loop is closed", wherever it was collected)."""
    monkeypatch.setattr(render_pool, "WORKER_EXIT_TIMEOUT_S", 0.2)
    workers = RenderPool(WorkerConfig(str(checkpoint), "qwen3", None, None), 1)
    medium = [{"role": "user", "content": words(2 * INLINE_RENDER_BYTES)}]
    head, _ = await workers.call({"op": "render", "messages": medium, "tools": None})
    assert head.get("ok")
    (worker,) = workers.workers  # idle now
    os.kill(worker.proc.pid, signal.SIGSTOP)  # a worker the CPU gives no time to exit
    try:
        await workers.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.proc.pid, signal.SIGCONT)
    assert worker.proc.returncode == -signal.SIGKILL  # killed after the grace period, and reaped
    transport = worker.proc._transport  # type: ignore[attr-defined]
    assert transport.is_closing()  # every pipe closed: nothing left for the collector


@pytest.mark.gateway(render_workers=1)
async def test_without_workers_prompts_render_inline_with_one_warning(
    gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(render_pool.sys, "executable", "/nonexistent/python")
    handle = await gateway.create_session("inline", {})
    medium = [{"role": "user", "content": words(2 * INLINE_RENDER_BYTES)}]
    for _ in range(2):
        await client(handle).chat.completions.create(model="m", messages=medium)  # type: ignore[arg-type]
    warnings = [r for r in caplog.records if "render workers cannot start" in r.getMessage()]
    assert len(warnings) == 1 and pool(gateway).down is not None


@pytest.mark.gateway(context_length=64)
async def test_a_prompt_over_the_model_context_never_reaches_the_engine(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """Refused before it becomes a Python list (a worker renders it), answered as slime's
    adapter does: finish reason `length`, nothing sampled, no ids recorded (the trace holds
    the call as a CONTEXT_FULL turn)."""
    handle = await gateway.create_session("long", {})
    long = [{"role": "user", "content": words(2_000)}]
    out = await client(handle).chat.completions.create(model="m", messages=long)  # type: ignore[arg-type]
    assert out.choices[0].finish_reason == "length" and out.choices[0].message.content == ""
    assert cluster.all_requests() == [] and gateway.store.get("long").turns == []
    assert await gateway.get_turns("long") == [Turn((), (), None, CONTEXT_FULL)]
    session = gateway.store.get("long")  # the session remembers that its context was full
    assert session.answers == {200: 1} and session.context_full == 1 and not session.refusals
    # Counting answers any length: Claude Code asks before compacting what no longer fits.
    count = {"model": "m", "messages": long}
    status, body = await post(handle.base_url[:-3] + "/v1/messages/count_tokens", handle.token,
                              orjson.dumps(count))  # fmt: skip
    assert status == 200 and body["input_tokens"] > 64


async def test_an_engine_that_reports_float_token_ids_is_a_502_and_records_nothing(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("floats", {})
    cluster.set(responder=lambda prompt, params: [17, 18])
    for e in cluster.engines:  # an engine or router bug: ids that are not integers
        real = e._body
        e._body = lambda *a, _real=real: float_ids(_real(*a))  # type: ignore[method-assign]
    with pytest.raises(openai.APIStatusError) as info:
        await client(handle).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.status_code == 502 and "not integers" in str(info.value.message)
    assert await gateway.get_turns("floats") == []


def float_ids(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["meta_info"]
    if meta.get("output_token_logprobs"):
        meta["output_token_logprobs"] = [
            [lp, float(t), x] for lp, t, x in meta["output_token_logprobs"]
        ]
    body["output_ids"] = [float(t) for t in body["output_ids"]]
    return body


# ---- fair admission ---------------------------------------------------------------------


@pytest.mark.gateway(max_in_flight=4)
async def test_one_sessions_flood_never_pushes_another_session_into_429(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    gate = asyncio.Event()
    cluster.set(gate=gate)  # generations wait: requests stay in flight
    flood = await gateway.create_session("flood", {})
    calm = await gateway.create_session("calm", {})
    c = client(flood)
    floods = [
        asyncio.create_task(c.chat.completions.create(model="m", messages=MESSAGES))  # type: ignore[arg-type]
        for _ in range(8)
    ]
    await until(lambda: gateway_in_flight(gateway) == 4, "the flood fills the gateway")
    calm_task = asyncio.create_task(
        client(calm).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    )
    await until(lambda: calm_task.done() or admitted(gateway, "calm"), "calm is admitted")
    gate.set()
    assert (await calm_task).choices[0].message is not None
    results = await asyncio.gather(*floods, return_exceptions=True)
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    assert len(refused) == 5  # 4 when full, then one displaced to make room for calm
    assert all(r.response.headers.get("retry-after") == "1" for r in refused)
    assert sum(not isinstance(r, BaseException) for r in results) == 3


def gateway_in_flight(gateway: GatewayServer) -> int:
    assert gateway.frontend is not None
    return gateway.frontend.admission.total


def admitted(gateway: GatewayServer, sid: str) -> bool:
    assert gateway.frontend is not None
    return gateway.frontend.admission.held(sid) > 0


async def test_admission_displaces_the_heaviest_sessions_newest_waiting_request() -> None:
    adm = Admission(limit=4)
    a = [adm.admit("a") for _ in range(3)]
    b = adm.admit("b")
    await a[0].turn()  # a's first runs; the rest of a's wait in order
    with pytest.raises(ApiError) as info:
        adm.admit("a")  # full, and a holds the most: a's own request is refused
    assert info.value.status == 429
    c = adm.admit("c")  # full, c holds none: a's newest waiting request makes room
    with pytest.raises(ApiError, match="queued while other sessions wait"):
        await a[2].turn()
    assert (adm.total, adm.held("a"), adm.held("c"), adm.displaced) == (4, 2, 1, 1)
    d = adm.admit("d")  # a still holds 2 (one running, one waiting): its waiting one goes
    with pytest.raises(ApiError, match="queued while other sessions wait"):
        await a[1].turn()
    with pytest.raises(ApiError, match="this session holds 0"):
        adm.admit("e")  # everyone holds one: nobody is heavier, the newcomer waits its turn
    assert (adm.held("a"), adm.held("b"), adm.held("c"), adm.held("d")) == (1, 1, 1, 1)
    a[0].release()
    f = adm.admit("f")  # a slot is free: admitted at once
    for t in (a[1], a[2], b, c, d, f):
        t.release()
    assert adm.total == 0 and adm.held("a") == 0


async def test_admission_is_fifo_per_session_and_survives_cancelled_waiters() -> None:
    adm = Admission(limit=10)
    first, second, third = (adm.admit("s") for _ in range(3))
    await first.turn()
    waiting = asyncio.create_task(second.turn())
    await asyncio.sleep(0)
    waiting.cancel()  # the agent hung up while queued
    with pytest.raises(asyncio.CancelledError):
        await waiting
    second.release()
    first.release()
    await asyncio.wait_for(third.turn(), 5)  # the lock passes over the cancelled one
    third.release()
    assert adm.total == 0


@pytest.mark.gateway(max_in_flight=2)
async def test_refused_and_displaced_requests_are_counted_as_429(
    gateway: GatewayServer, cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    gate = asyncio.Event()
    cluster.set(gate=gate)
    handle = await gateway.create_session("busy", {})
    c = client(handle)
    tasks = [
        asyncio.create_task(c.chat.completions.create(model="m", messages=MESSAGES))  # type: ignore[arg-type]
        for _ in range(3)
    ]
    await until(lambda: any(t.done() for t in tasks), "one is refused")
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(r, openai.RateLimitError) for r in results) == 1
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="429") == 1


@pytest.mark.parametrize("n", [0, 1, ENCODE_SLICE, ENCODE_SLICE + 1, 3 * ENCODE_SLICE + 5])
@pytest.mark.parametrize("kind", ["list", "array", "view", "history"])
async def test_a_long_prompt_is_encoded_in_slices_with_the_loop_served_between(
    n: int, kind: str
) -> None:
    """The /generate body of a huge prompt is the same JSON as one encode would give, and
    other sessions' tasks run between its slices (one encode of two million ids would hold
    the event loop for tens of milliseconds)."""
    ids = [(i * 7919) % 150_000 for i in range(n)]
    packed = token_view.ids_of(ids)
    prompt: Any = {
        "list": ids,
        "array": packed,
        "view": token_view.TokenView(packed, n),
        "history": token_view.History(packed),
    }[kind]
    params = {"max_new_tokens": 16, "temperature": 1.0}
    ran = 0
    stop = asyncio.Event()

    async def other_session() -> None:
        nonlocal ran
        while not stop.is_set():
            ran += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_session())
    await asyncio.sleep(0)  # it has started
    before = ran
    body = await generate_body(prompt, params, "rid-1", stream=True)
    during = ran - before
    stop.set()
    await other
    assert orjson.loads(body) == {
        "rid": "rid-1",
        "input_ids": ids,
        "return_logprob": True,
        "sampling_params": params,
        "stream": True,
    }
    slices = -(-n // ENCODE_SLICE)
    assert during >= max(0, slices - 1)
