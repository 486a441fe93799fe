"""Session safety: duplicate ids, closed sessions, aborts on every worker, backpressure, scale."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from tests.support.process import free_port

from agentrl.bundle.gateway import GatewayClient, GatewayServer
from agentrl.bundle.session import ContextFullCalls, SessionError

from .gateway_helpers import N_WORKERS, Cluster, metric, settings_for, until

MESSAGES = [{"role": "user", "content": "What is 6*7?"}]


def admin(gateway: GatewayServer) -> GatewayClient:
    return GatewayClient(f"http://127.0.0.1:{gateway.admin_port}", "admin-secret")


async def chat(handle: Any, **kw: Any) -> Any:
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    return await c.chat.completions.create(model="m", messages=MESSAGES, **kw)  # type: ignore[arg-type]


async def test_duplicate_session_is_refused_in_process_and_over_http(
    gateway: GatewayServer,
) -> None:
    await gateway.create_session("dup", {})
    with pytest.raises(SessionError, match="already in use"):
        await gateway.create_session("dup", {})
    client = admin(gateway)
    try:
        with pytest.raises(SessionError, match="409"):
            await client.create_session("dup", {})
        await client.close_session("dup")
        with pytest.raises(SessionError, match="already in use"):  # closed ids stay taken
            await client.create_session("dup", {})
    finally:
        await client.aclose()


async def test_admin_client_round_trip_and_admin_auth(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    client = admin(gateway)
    try:
        handle = await client.create_session("via-http", {"max_new_tokens": 16})
        assert handle.base_url.endswith("/sessions/via-http/v1") and handle.token not in repr(
            handle
        )
        await chat(handle)
        turns = await client.get_turns("via-http")
        assert turns == list(await gateway.get_turns("via-http"))
        # The engine's meta_info.weight_version rides with each turn (the stub's "default").
        assert [t.weight_version for t in turns] == ["default"]
        await client.close_session("via-http")
        await client.close_session("via-http")  # idempotent
    finally:
        await client.aclose()
    intruder = GatewayClient(f"http://127.0.0.1:{gateway.admin_port}", "wrong")
    try:
        with pytest.raises(SessionError, match="401"):
            await intruder.create_session("x", {})
    finally:
        await intruder.aclose()


async def test_closed_session_refuses_late_requests(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("late", {})
    await gateway.close_session("late")
    with pytest.raises(openai.APIStatusError) as err:
        await chat(handle)
    assert err.value.status_code == 410
    assert cluster.all_requests() == []


def aborted_everywhere(cluster: Cluster, rid: str) -> bool:
    return all(rid in e.aborted for e in cluster.engines)


async def inflight_rid(cluster: Cluster) -> str:
    await until(lambda: any(e._live for e in cluster.engines), "request reached an engine")
    return next(rid for e in cluster.engines for rid in e._live)


async def test_close_session_aborts_its_request_on_every_worker(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=0.5)
    handle = await gateway.create_session("closing", {})
    call = asyncio.create_task(chat(handle))
    rid = await inflight_rid(cluster)
    await gateway.close_session("closing")
    await until(lambda: aborted_everywhere(cluster, rid), "abort on every worker")
    assert len(cluster.engines) == N_WORKERS
    with pytest.raises(openai.APIError):
        await call


async def test_client_disconnect_aborts_on_every_worker(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=0.5)
    handle = await gateway.create_session("gone", {})
    url = handle.base_url + "/chat/completions"
    headers = {"Authorization": f"Bearer {handle.token}"}
    async with aiohttp.ClientSession() as http:
        task = asyncio.create_task(http.post(url, json={"messages": MESSAGES}, headers=headers))
        rid = await inflight_rid(cluster)
        task.cancel()  # the agent goes away mid-generation
        with pytest.raises(asyncio.CancelledError):
            await task
    await until(lambda: aborted_everywhere(cluster, rid), "abort on every worker")
    assert await gateway.get_turns("gone") == []


@pytest.mark.gateway(request_timeout_s=0.3)
async def test_timeout_aborts_on_every_worker(gateway: GatewayServer, cluster: Cluster) -> None:
    cluster.set(token_delay_s=5.0)
    handle = await gateway.create_session("slow", {})
    with pytest.raises(openai.APIStatusError) as err:
        await chat(handle)
    assert err.value.status_code == 504
    rid = cluster.all_requests()[0]["rid"]
    await until(lambda: aborted_everywhere(cluster, rid), "abort on every worker")


async def test_engine_abort_is_recorded_and_reported(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """A weight update aborts running requests: the partial turn is kept, the agent gets 503."""
    cluster.set(token_delay_s=0.2)
    handle = await gateway.create_session("preempted", {})
    call = asyncio.create_task(chat(handle))
    rid = await inflight_rid(cluster)
    async with aiohttp.ClientSession() as http:
        for e in cluster.engines:
            await http.post(e.url + "/abort_request", json={"abort_all": True})
    with pytest.raises(openai.APIStatusError) as err:
        await call
    assert err.value.status_code == 503
    (turn,) = await gateway.get_turns("preempted")
    assert turn.finish_reason == "abort" and list(turn.completion_ids) == cluster.sampled(rid)


@pytest.mark.gateway(max_in_flight=2)
async def test_backpressure_answers_429_not_collapse(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=0.05)
    handles = [await gateway.create_session(f"bp{i}", {}) for i in range(8)]
    results = await asyncio.gather(*(chat(h) for h in handles), return_exceptions=True)
    limited = [r for r in results if isinstance(r, openai.RateLimitError)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    assert len(limited) + len(ok) == 8 and limited and ok
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="429") == len(
        limited
    )


async def test_turns_of_one_session_are_serialised(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=0.01)
    handle = await gateway.create_session("serial", {})
    live: list[int] = []
    seen: list[int] = []
    original = cluster.engines[0]._run

    async def watch(*args: Any) -> Any:
        live.append(1)
        seen.append(len(live))
        try:
            return await original(*args)
        finally:
            live.pop()

    for e in cluster.engines:
        e._run = watch  # type: ignore[method-assign]
    await asyncio.gather(*(chat(handle) for _ in range(4)))
    assert seen == [1, 1, 1, 1] and len(await gateway.get_turns("serial")) == 4


@pytest.mark.gateway(max_in_flight=1024)
async def test_256_concurrent_sessions(gateway: GatewayServer, cluster: Cluster) -> None:
    client = admin(gateway)
    try:
        handles = await asyncio.gather(
            *(client.create_session(f"c{i:03d}", {}) for i in range(256))
        )
        http = aiohttp.ClientSession()

        async def one(h: Any) -> int:
            body = {"messages": [{"role": "user", "content": f"task {h.session_id}"}]}
            async with http.post(
                h.base_url + "/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {h.token}"},
            ) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(one(h) for h in handles))
        await http.close()
        assert statuses == [200] * 256
        all_turns: list[Any] = await asyncio.gather(
            *(client.get_turns(h.session_id) for h in handles)
        )
        by_rid = {r["rid"]: r for r in cluster.all_requests()}
        assert len(by_rid) == 256
        for h, turns in zip(handles, all_turns, strict=True):
            (turn,) = turns
            rid = next(r for r in by_rid if r.startswith(h.session_id + "-"))
            assert list(turn.prompt_ids) == by_rid[rid]["input_ids"]
            assert list(turn.completion_ids) == cluster.sampled(rid)
        await asyncio.gather(*(client.close_session(h.session_id) for h in handles))
    finally:
        await client.aclose()


async def test_unknown_sampling_params_are_refused_at_create(gateway: GatewayServer) -> None:
    with pytest.raises(SessionError, match="max_tokens"):
        await gateway.create_session("typo", {"max_tokens": 10})
    client = admin(gateway)
    try:
        with pytest.raises(SessionError, match=r"400.*n must be 1"):
            await client.create_session("fanout", {"n": 4})
        await client.create_session("typo", {"max_new_tokens": 10})  # a refused id stays free
    finally:
        await client.aclose()


@pytest.mark.gateway(log_level="debug")
async def test_tokens_never_reach_the_logs(
    gateway: GatewayServer, cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handle = await gateway.create_session("logged", {})
    await chat(handle)
    cluster.set(fail_next=1)
    with pytest.raises(openai.APIError):
        await chat(handle)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "engine call failed" in text  # the failure is logged once, with its session id
    assert handle.token not in text and "admin-secret" not in text


async def test_quiet_by_default(gateway: GatewayServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    handle = await gateway.create_session("quiet", {})
    for _ in range(3):
        await chat(handle)
    assert [r for r in caplog.records if r.name.startswith(("agentrl", "aiohttp"))] == []


async def test_stop_aborts_what_is_running(cluster: Cluster, checkpoint: Any) -> None:
    server = GatewayServer(settings_for(cluster, checkpoint), cluster.metrics)
    await server.start()
    cluster.set(token_delay_s=0.5)
    handle = await server.create_session("shutdown", {})
    call = asyncio.create_task(chat(handle))
    rid = await inflight_rid(cluster)
    await server.stop()
    assert aborted_everywhere(cluster, rid)  # stop() waits for its aborts
    with pytest.raises(openai.APIError):
        await call


async def test_client_errors_are_session_errors() -> None:
    client = GatewayClient(f"http://127.0.0.1:{free_port()}", "t")  # nothing listens there
    try:
        with pytest.raises(SessionError, match="admin API"):
            await client.get_turns("x")
        with pytest.raises(SessionError, match="admin API"):
            await client.create_session("x", {})
    finally:
        await client.aclose()


async def test_turns_of_a_session_stay_on_one_worker(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """The session id is the router's routing key: later turns reuse the prefix cache."""
    handles = [await gateway.create_session(f"sticky{i}", {}) for i in range(6)]
    for _ in range(3):
        await asyncio.gather(*(chat(h) for h in handles))
    for h in handles:
        workers = {
            i
            for i, e in enumerate(cluster.engines)
            for r in e.requests
            if r["rid"].startswith(h.session_id + "-")
        }
        assert len(workers) == 1
    assert len({i for i, e in enumerate(cluster.engines) if e.requests}) > 1  # yet spread out


async def test_quiesce_aborts_everything_on_every_worker_until_idle(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """Batch end: an abort by id that missed (it reached the engine before the request) is
    caught by abort-all on every worker, and the call returns once nothing runs."""
    cluster.set(token_delay_s=3600.0, miss_rid_aborts=True)
    handle = await gateway.create_session("stray", {})
    call = asyncio.create_task(chat(handle))
    rid = await inflight_rid(cluster)
    await gateway.close_session("stray")
    with pytest.raises(openai.APIError):
        await call  # the session is gone; its generation is not
    assert any(e._live for e in cluster.engines)
    client = admin(gateway)
    try:
        report = await client.quiesce_engines(30.0)
    finally:
        await client.aclose()
    assert report.idle and report.in_flight == 0 and report.engine_requests == 0
    assert report.workers == N_WORKERS
    assert all("*" in e.aborted for e in cluster.engines)
    assert all(rid in e.aborted for e in cluster.engines)  # the by-id abort came first
    assert not any(e._live for e in cluster.engines)
    assert rid in {r for e in cluster.engines for r in e.sampled}  # finished (aborted) there


async def test_quiesce_is_bounded_and_says_what_still_runs(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    cluster.set(token_delay_s=3600.0, miss_rid_aborts=True, miss_abort_all=True)
    handle = await gateway.create_session("stubborn", {})
    call = asyncio.create_task(chat(handle))
    await inflight_rid(cluster)
    report = await gateway.quiesce_engines(0.5)  # a short real bound; nothing timed
    assert not report.idle
    assert report.in_flight == 1 and report.engine_requests == 1
    cluster.set(miss_rid_aborts=False, miss_abort_all=False)
    await gateway.close_session("stubborn")
    with pytest.raises(openai.APIError):
        await call
    assert (await gateway.quiesce_engines(30.0)).idle


async def test_quiesce_needs_the_admin_token_and_a_bound(gateway: GatewayServer) -> None:
    url = f"http://127.0.0.1:{gateway.admin_port}/admin/engines/quiesce"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"timeout_s": 1}) as resp:
            assert resp.status == 401
        auth = {"Authorization": "Bearer admin-secret"}
        for bad in ({}, {"timeout_s": 0}, {"timeout_s": "5"}, {"timeout_s": 10_000}):
            async with http.post(url, json=bad, headers=auth) as resp:
                assert resp.status == 400, bad


async def test_admin_client_errors_never_carry_the_admin_token() -> None:
    """An aiohttp response error's repr lists the request headers (here the admin token)."""

    async def malformed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(malformed, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = GatewayClient(f"http://127.0.0.1:{port}", "admin-token-secret-value")
    try:
        with pytest.raises(SessionError) as err:
            await client.create_session("x", {})
    finally:
        await client.aclose()
        server.close()
    assert "ClientResponseError: HTTP 400" in str(err.value)
    assert "admin-token-secret-value" not in str(err.value)


class FlakyAdmin:
    """An admin API that hangs up on its first `drops` connections, then answers."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await reader.readuntil(b"\r\n\r\n")
        if self.connections <= self.drops:
            writer.close()  # no answer: a gateway restarting, a dropped keep-alive
            return
        body = b'{"turns": []}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        writer.close()

    async def __aenter__(self) -> GatewayClient:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.client = GatewayClient(f"http://127.0.0.1:{port}", "admin-token-secret-value")
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        assert self.server is not None
        self.server.close()


async def test_idempotent_admin_calls_retry_with_stamina(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    flaky = FlakyAdmin(drops=3)
    async with flaky as client:
        assert await client.get_turns("s") == []  # dropped, then served
    retries = [r for r in caplog.records if r.name == "stamina"]
    assert retries  # stamina retried (aiohttp also reconnects once itself for GET/DELETE)
    logged = " ".join(repr(vars(r)) for r in retries)
    assert "admin-token-secret-value" not in logged  # what it retried was described safely
    flaky = FlakyAdmin(drops=100)
    async with flaky as client:
        with pytest.raises(SessionError, match="admin API DELETE"):
            await client.close_session("s")
    assert flaky.connections <= 2 * 3  # bounded: three attempts (each reconnected once)


async def test_opening_a_session_is_never_retried() -> None:
    flaky = FlakyAdmin(drops=1)
    async with flaky as client:
        with pytest.raises(SessionError, match="admin API POST /admin/sessions"):
            await client.create_session("s", {})
    assert flaky.connections == 1  # a retry could find its own id taken (409)


async def test_the_agent_port_serves_no_admin_api_and_the_admin_port_no_agent_api(
    gateway: GatewayServer,
) -> None:
    """The gateway Service (maybe a LoadBalancer) targets the agent port only: the admin API
    must not answer there, even with the right token; the admin listener serves no agent
    routes, so a session token is no use on it either."""
    assert gateway.admin_port not in (0, gateway.port)
    handle = await admin(gateway).create_session("split", {})
    token = {"Authorization": "Bearer admin-secret"}
    agent = f"http://127.0.0.1:{gateway.port}"
    admin_api = f"http://127.0.0.1:{gateway.admin_port}"
    async with aiohttp.ClientSession() as http:
        for method, path in (("POST", "/admin/sessions"), ("GET", "/admin/sessions/split/turns"),
                             ("DELETE", "/admin/sessions/split"),
                             ("POST", "/admin/engines/quiesce")):  # fmt: skip
            async with http.request(method, agent + path, headers=token, json={}) as resp:
                assert resp.status == 404, (method, path)
        chat_path = "/sessions/split/v1/chat/completions"
        bearer = {"Authorization": f"Bearer {handle.token}"}
        async with http.post(admin_api + chat_path, headers=bearer, json={}) as resp:
            assert resp.status == 404
        for base in (agent, admin_api):  # both answer the kubelet's health probe
            async with http.get(base + "/health") as resp:
                assert resp.status == 200
    assert await gateway.get_turns("split") == []  # the refused calls changed nothing


async def test_a_session_counts_what_its_calls_were_answered(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """The rehearsal reads this: did the agent call its URL at all, and what was it told."""
    handle = await gateway.create_session("answers", {})
    session = gateway.store.get("answers")
    assert session.answers == {} and session.refusals == {}
    await chat(handle)
    stranger = openai.AsyncOpenAI(base_url=handle.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await stranger.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    cluster.set(fail_next=1, fail_status=400)  # the engine refuses the input: a failed turn
    with pytest.raises(openai.BadRequestError):
        await chat(handle, stream=True)
    assert session.answers == {200: 1, 401: 1, 400: 1}
    assert session.refusals == {"400": 1} and "engine refused" in session.last_refusal


@pytest.mark.parametrize(
    ("limit", "read"),
    [(None, None), ("context", "context"), ("kv_cache", "kv_cache"), ("pool", None)],
    ids=["older-gateway", "context", "kv_cache", "unknown-word"],
)
async def test_the_client_reads_which_limit_a_full_context_met_when_the_gateway_says(
    limit: str | None, read: str | None
) -> None:
    """`limit` in the admin API's context_full answer is optional: a gateway of an older
    release (no such key) or a word this release does not know reads as unknown (None), so
    the episode's failure names both fixes, never a KeyError."""
    payload: dict[str, object] = {"calls": 2, "prompt_tokens": 17, "context_length": 16}
    if limit is not None:
        payload["limit"] = limit
    body = orjson.dumps(payload)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    client = GatewayClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", "t")
    try:
        full = await client.context_full("s")
    finally:
        await client.aclose()
        server.close()
    assert full == ContextFullCalls(2, 17, 16, read)  # type: ignore[arg-type]
