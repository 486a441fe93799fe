"""The HTTP agent backend against a real agent server on 127.0.0.1 (aiohttp both ways).

The agent accepts the episode, then either calls back with its result, or never calls
back and answers the status poll, or refuses. Nothing here waits on the wall clock for
correctness: whichever of callback and poll comes first, the answer is the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import stamina
from aiohttp import web
from tests.support.process import free_port
from tests.support.retries import scheduled_retries

from agentrl.api.constants import CALLBACK_MAX_BYTES
from agentrl.api.models import HttpAgent
from agentrl.bundle.agents.base import AgentError, AgentRequest
from agentrl.bundle.agents.http import (
    SUBMIT_ATTEMPTS,
    CallbackListener,
    HttpAgentBackend,
    _retry_wait,
    _TryAgain,
    headers_from_env,
    retry_after_seconds,
)
from agentrl.bundle.rollout.batch import RolloutContext, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec
from agentrl.bundle.session import ContextFullCalls, QuiesceReport, SessionHandle, callback_url

SECRET = "sk-live-very-secret-value"


@dataclass
class Agent:
    mode: str = "callback"  # callback | quote-payload | quote-at-cut | poll | poll-html | refuse
    quoted: str = "callback_token"  # quote-at-cut: the `_rollout` token it quotes
    submitted: list[dict[str, Any]] = field(default_factory=list)
    api_keys: list[str | None] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    # Scripted answers (status, headers) to the next submits / deletes, before the mode's.
    submit_answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    delete_answers: list[int] = field(default_factory=list)

    async def submit(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.submitted.append(body)
        self.api_keys.append(request.headers.get("X-Api-Key"))
        if self.submit_answers:
            status, headers = self.submit_answers.pop(0)
            return web.json_response({"error": "scripted"}, status=status, headers=headers)
        if self.mode == "refuse":
            return web.json_response({"error": "bad payload"}, status=400)
        if self.mode == "callback":
            task = asyncio.create_task(self.call_back(body["_rollout"]))
            self.tasks.add(task)
        if self.mode == "wrong-token":  # posts its result with another token, twice
            info = {**body["_rollout"], "callback_token": "not-the-callback-token"}
            task = asyncio.create_task(self.call_back(info, status=401, times=2))
            self.tasks.add(task)
        if self.mode == "quote-payload":  # fails, quoting its payload (a validation error)
            doc = {"status_code": 500, "stop_reason": f"bad payload {body}"[:250]}
            task = asyncio.create_task(self.call_back(body["_rollout"], doc))
            self.tasks.add(task)
        if self.mode == "quote-at-cut":  # a long report with a token across the 300-char cut
            info = body["_rollout"]
            # "the agent reported a failure (status_code 500): " precedes the report; the
            # cut keeps 300 characters of the report itself, so each token starts 8 short.
            reason = "x" * (300 - 8) + info[self.quoted] + " and more"
            doc = {"status_code": 500, "stop_reason": reason}
            task = asyncio.create_task(self.call_back(info, doc))
            self.tasks.add(task)
        return web.json_response({"status": "accepted"}, status=202)

    async def call_back(
        self, info: dict[str, Any], doc: Any = None, status: int = 200, times: int = 1
    ) -> None:
        async with aiohttp.ClientSession() as http:
            for _ in range(times):
                async with http.post(
                    info["callback_url"],
                    json={"rewards": [0.0, 0.5]} if doc is None else doc,
                    headers={"Authorization": f"Bearer {info['callback_token']}"},
                ) as resp:
                    assert resp.status == status

    async def status(self, request: web.Request) -> web.Response:
        if self.mode == "poll":
            return web.json_response({"rewards": 0.25})
        if self.mode == "poll-html":  # a framework's error page, served with 200
            return web.Response(text="<html>oops</html>", content_type="text/html")
        return web.json_response({"status": "running"}, status=202)

    async def delete(self, request: web.Request) -> web.Response:
        self.deleted.append(request.match_info["sid"])
        status = self.delete_answers.pop(0) if self.delete_answers else 200
        return web.json_response({}, status=status)


@dataclass
class Rig:
    agent: Agent
    backend: HttpAgentBackend
    listener: CallbackListener


@asynccontextmanager
async def agent_at(
    app: web.Application, *, pool_size: int = 1, headers: dict[str, str] | None = None,
    **spec: Any,
) -> AsyncIterator[tuple[HttpAgentBackend, CallbackListener]]:  # fmt: skip
    """`app` served on 127.0.0.1 as the agent at `/episodes`, a callback listener, and a
    backend for it (`spec`: more HttpAgent fields); all closed at the end."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    listener = CallbackListener("127.0.0.1", 0, "127.0.0.1")
    await listener.start()
    backend = HttpAgentBackend(
        HttpAgent(url=f"http://127.0.0.1:{port}/episodes", **spec),
        headers=headers or {},
        listener=listener,
        pool_size=pool_size,
        callback_base=listener.url,
    )
    try:
        yield backend, listener
    finally:
        await backend.aclose()
        await listener.stop()
        await runner.cleanup()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    agent = Agent()
    app = web.Application()
    app.router.add_post("/episodes", agent.submit)
    app.router.add_get("/episodes/{sid}", agent.status)
    app.router.add_delete("/episodes/{sid}", agent.delete)
    async with agent_at(
        app, pool_size=4, headers={"X-Api-Key": SECRET}, pollIntervalSeconds=0.1
    ) as (backend, listener):
        yield Rig(agent, backend, listener)


REQUEST = AgentRequest("sid-" + "x" * 40, {"task": 7, "_rollout": {"base_url": "http://gw/v1"}})


async def test_result_by_callback(rig: Rig) -> None:
    result = await rig.backend.run(REQUEST)
    assert result.reward == 0.5 and result.via == "callback"
    (body,) = rig.agent.submitted
    assert body["task"] == 7 and body["_rollout"]["base_url"] == "http://gw/v1"
    assert body["_rollout"]["callback_url"].endswith(f"/agentrl/callback/{REQUEST.session_id}")
    assert rig.agent.api_keys == [SECRET]
    assert rig.agent.deleted == []  # finished normally: nothing to stop


async def test_result_by_fallback_poll_when_no_callback_comes(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.agent.mode = "poll"
    with caplog.at_level(logging.WARNING, "agentrl.agents.http"):
        result = await rig.backend.run(REQUEST)
        assert result.reward == 0.25 and result.via == "poll"
        assert (await rig.backend.run(AgentRequest("sid-2", REQUEST.payload))).via == "poll"
    # Said once: results come late, and the callback URL agents cannot reach is named.
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"no agent has posted a result to {rig.listener.url}/agentrl/callback/" in line


async def test_a_status_get_answering_200_without_json_is_a_bad_result_at_once(
    rig: Rig,
) -> None:
    """docs/agents.md: a result that is not JSON is `bad_result`. A whole 200 answer to the
    status GET is the agent's result; it was taken for a failed poll, five in a row made an
    `agent_error` five poll intervals (150 s by default) later."""
    rig.agent.mode = "poll-html"
    with pytest.raises(AgentError) as err:
        await rig.backend.run(REQUEST)
    assert err.value.reason == "bad_result" and "not JSON" in str(err.value)
    assert rig.agent.deleted == [REQUEST.session_id]


async def test_refused_episode_is_an_agent_error_without_secrets(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.agent.mode = "refuse"
    with caplog.at_level(logging.DEBUG), pytest.raises(AgentError) as err:
        await rig.backend.run(REQUEST)
    assert err.value.reason == "agent_error" and "HTTP 400" in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in caplog.text
    assert rig.agent.deleted == [REQUEST.session_id]


async def test_a_submit_the_agent_did_not_process_is_sent_again(rig: Rig) -> None:
    rig.agent.submit_answers = [(503, {}), (429, {"Retry-After": "1"})]
    with stamina.set_testing(True, attempts=SUBMIT_ATTEMPTS), scheduled_retries() as retries:
        assert (await rig.backend.run(REQUEST)).reward == 0.5
    assert len(rig.agent.submitted) == 3
    assert [str(r.caused_by) for r in retries] == ["HTTP 503", "HTTP 429"]


@pytest.mark.parametrize("status", [500, 502, 504, 400])
async def test_a_submit_that_may_have_started_the_episode_is_not_sent_again(
    rig: Rig, status: int
) -> None:
    rig.agent.submit_answers = [(status, {})]
    with stamina.set_testing(True, attempts=SUBMIT_ATTEMPTS), pytest.raises(AgentError) as err:
        await rig.backend.run(REQUEST)
    assert len(rig.agent.submitted) == 1 and f"HTTP {status}" in str(err.value)
    assert rig.agent.deleted == [REQUEST.session_id]  # and its agent is told to stop


async def test_an_agent_refusing_every_time_fails_after_the_attempts(rig: Rig) -> None:
    rig.agent.submit_answers = [(503, {})] * SUBMIT_ATTEMPTS
    with stamina.set_testing(True, attempts=SUBMIT_ATTEMPTS), pytest.raises(AgentError) as err:
        await rig.backend.run(REQUEST)
    assert len(rig.agent.submitted) == SUBMIT_ATTEMPTS
    assert f"refused the episode {SUBMIT_ATTEMPTS} times: HTTP 503" in str(err.value)


async def test_a_refused_connection_is_tried_again_a_dropped_one_is_not() -> None:
    """Connection refused: nothing was sent. Dropped after the request: it may have run."""
    closed_port = free_port()
    dropped = 0

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal dropped
        await reader.readuntil(b"\r\n\r\n")
        dropped += 1
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    dropping_port = server.sockets[0].getsockname()[1]
    listener = CallbackListener("127.0.0.1", 0, "127.0.0.1")
    await listener.start()
    try:
        for port, attempts in ((closed_port, SUBMIT_ATTEMPTS), (dropping_port, 1)):
            spec = HttpAgent(url=f"http://127.0.0.1:{port}/episodes")
            be = HttpAgentBackend(
                spec, headers={}, listener=listener, pool_size=2, callback_base=listener.url
            )
            with (
                stamina.set_testing(True, attempts=SUBMIT_ATTEMPTS),
                scheduled_retries() as r,
                pytest.raises(AgentError),
            ):
                await be._submit({"_rollout": {}})
            assert len(r) == attempts - 1
            if be._session is not None:
                await be._session.close()
        assert dropped == 1
    finally:
        server.close()
        await listener.stop()


async def test_a_submit_that_found_no_free_connection_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """maxPoolConnections 1, and an agent slow to accept (it boots a sandbox first) holds
    the one connection: the next episode's submit never left, so it is not an agent that
    "may have started" it. It used to fail at once as agent_error, "not retried"."""
    monkeypatch.setattr("agentrl.bundle.agents.http.CONNECT_TIMEOUT_S", 0.2)
    release, holding = asyncio.Event(), asyncio.Event()
    received: list[str] = []

    async def slow_accept(request: web.Request) -> web.Response:
        received.append((await request.json())["_rollout"]["session_id"])
        holding.set()
        await release.wait()
        return web.json_response({}, status=202)

    app = web.Application()
    app.router.add_post("/episodes", slow_accept)
    async with agent_at(app) as (be, _):
        try:
            first = asyncio.create_task(be._submit({"_rollout": {"session_id": "a"}}))
            await holding.wait()  # the one connection is taken
            with (
                stamina.set_testing(True, attempts=SUBMIT_ATTEMPTS),
                scheduled_retries() as retries,
                pytest.raises(AgentError) as err,
            ):
                await be._submit({"_rollout": {"session_id": "b"}})
            assert received == ["a"]  # the second never reached the agent ...
            assert len(retries) == SUBMIT_ATTEMPTS - 1  # ... and was tried again
            assert "ConnectionTimeoutError" in str(err.value) and "may have" not in str(err.value)
            release.set()
            await first
            await be._submit({"_rollout": {"session_id": "c"}})  # a free connection: accepted
            assert received == ["a", "c"]
        finally:
            release.set()


async def test_an_agent_that_runs_the_episode_before_answering_is_told_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent that plays the whole episode inside the POST: past the request timeout
    (60 s) every episode failed as a bare "TimeoutError", a limit docs/agents.md did not
    state."""
    monkeypatch.setattr("agentrl.bundle.agents.http.REQUEST_TIMEOUT_S", 0.3)
    release = asyncio.Event()

    async def busy(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"rewards": 1.0})

    app = web.Application()
    app.router.add_post("/episodes", busy)
    async with agent_at(app) as (be, _):
        try:
            with pytest.raises(AgentError) as err:
                await be._submit({"_rollout": {}})
            assert err.value.reason == "agent_error"
            assert "did not answer the episode's submit within 0.3s" in str(err.value)
            assert "answer the POST at once (202)" in str(err.value)
        finally:
            release.set()


async def test_retries_of_many_episodes_are_spread_by_jitter(rig: Rig) -> None:
    """Five episodes refused together come back at different times (real stamina waits,
    under a second; what is checked is the waits it drew, not how long anything took)."""
    rig.agent.submit_answers = [(503, {})] * 5
    requests = [AgentRequest(f"sid-{i}-" + "x" * 40, REQUEST.payload) for i in range(5)]
    with scheduled_retries() as retries:
        results = await asyncio.gather(*(rig.backend.run(r) for r in requests))
    assert [r.reward for r in results] == [0.5] * 5
    waits = [r.wait_for for r in retries]
    assert len(waits) == 5 and len(set(waits)) == 5
    assert all(0.5 <= w <= 1.0 for w in waits)  # wait_initial + up to wait_jitter


def test_retry_after_is_honoured_within_a_cap() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("3600") == 30.0
    assert retry_after_seconds("Wed, 21 Oct 2026 07:28:00 GMT") is None  # backoff instead
    assert retry_after_seconds(None) is None and retry_after_seconds("-1") is None
    assert _retry_wait(_TryAgain("HTTP 429", 3.0)) == 3.0
    assert _retry_wait(_TryAgain("HTTP 503")) is True
    assert _retry_wait(AgentError("agent_error", "HTTP 500")) is False


async def test_stop_is_retried_while_the_agent_is_unavailable_and_never_raises(rig: Rig) -> None:
    rig.agent.delete_answers = [503, 200]
    with stamina.set_testing(True, attempts=3):
        await rig.backend.stop("abc")
    assert rig.agent.deleted == ["abc", "abc"]
    rig.agent.deleted.clear()
    rig.agent.delete_answers = [405]  # an agent that cannot stop episodes: fine, once
    with stamina.set_testing(True, attempts=3):
        await rig.backend.stop("abc")
    assert rig.agent.deleted == ["abc"]
    rig.agent.deleted.clear()
    rig.agent.delete_answers = [503, 503, 503]
    with stamina.set_testing(True, attempts=3):
        await rig.backend.stop("abc")  # gives up quietly
    assert rig.agent.deleted == ["abc"] * 3


async def test_timeout_stops_the_agent_and_late_callbacks_are_refused(rig: Rig) -> None:
    rig.agent.mode = "hang"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await rig.backend.run(REQUEST)
    assert rig.agent.deleted == [REQUEST.session_id]
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{rig.listener.port}/agentrl/callback/{REQUEST.session_id}"
        async with http.post(url, json={"rewards": 1}) as resp:
            assert resp.status == 404


async def test_an_episode_whose_result_was_refused_for_its_token_says_so_at_its_end(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent posted its result with another token: refused (401), the episode waited
    out its deadline, and its log said only `timeout`, nothing of the result that came."""
    rig.agent.mode = "wrong-token"
    with caplog.at_level(logging.WARNING, "agentrl.agents.http"), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await rig.backend.run(REQUEST)
    await asyncio.gather(*rig.agent.tasks)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "agentrl.agents.http"]
    assert line.startswith(
        f"episode {REQUEST.session_id}: ended without a result, but 2 result callback(s) for "
        "it came and were refused (HTTP 401)"
    )
    assert "not-the-callback-token" not in caplog.text
    assert rig.listener.forget(REQUEST.session_id) == 0  # nothing kept for a finished episode


async def test_callback_needs_the_episode_token(rig: Rig) -> None:
    _token, fut = rig.listener.expect("abc")
    url = callback_url(rig.listener.url, "abc")
    bad = {"Authorization": "Bearer no"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json={"rewards": 1}, headers=bad) as resp,
    ):
        assert resp.status == 401
    assert not fut.done()
    rig.listener.forget("abc")


OVER_BOUND = b'{"x": "' + b"x" * CALLBACK_MAX_BYTES + b'"}'


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        (b'{"rewards": 1.0', 400, "(15 bytes) is not JSON"),
        (b"\xff\xfe not utf-8 at all", 400, "(19 bytes) is not JSON"),
        (OVER_BOUND, 413, f"over {CALLBACK_MAX_BYTES} bytes, its bound: post a smaller"),
    ],
    ids=["not-json", "not-utf8", "over-bound"],
)
async def test_a_callback_that_cannot_be_taken_is_a_bad_result_at_once(
    rig: Rig, body: bytes, status: int, said: str
) -> None:
    """docs/agents.md: a result that is not JSON is `bad_result`. A callback bearing the
    episode's token is its result, as a status GET's 200 is; one that was not JSON got 400,
    and one past CALLBACK_MAX_BYTES aiohttp's 413, and the episode waited for another until
    timeoutSeconds (900 s by default), holding its slot, then failed as `timeout`."""
    token, fut = rig.listener.expect("abc")
    url = callback_url(rig.listener.url, "abc")
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=body, headers=auth) as resp,
    ):
        assert resp.status == status
    assert fut.done()
    err = fut.exception()
    assert isinstance(err, AgentError) and err.reason == "bad_result" and err.via == "callback"
    assert said in str(err), str(err)
    rig.listener.forget("abc")


async def test_an_agent_failure_quoting_its_payload_carries_no_callback_token(rig: Rig) -> None:
    """The agent's failure report (its `stop_reason`, as agentcore-rl-toolkit saves str(exc))
    may quote the payload it got, callback token included: the token stayed in the
    episode's failure message, which is logged."""
    rig.agent.mode = "quote-payload"
    with pytest.raises(AgentError) as err:
        await rig.backend.run(REQUEST)
    (body,) = rig.agent.submitted
    token = body["_rollout"]["callback_token"]
    assert len(token) >= 24
    assert err.value.reason == "agent_error" and "bad payload" in str(err.value)
    assert token not in str(err.value) and "'callback_token': '<redacted>'" in str(err.value)


@pytest.mark.parametrize("quoted", ["callback_token", "api_key"])
async def test_a_token_across_the_cut_of_a_long_failure_report_leaves_no_prefix(
    rig: Rig, quoted: str
) -> None:
    """The agent's report is cut to 300 characters for the log line: redacted after the cut,
    a token straddling it lost its tail, no longer matched, and its first characters stayed
    in the logged failure message. Redacted first, then cut, nothing of it is left (the
    callback token, and the gateway session's, `api_key`, which the rollout redacts)."""
    rig.agent.mode, rig.agent.quoted = "quote-at-cut", quoted
    session_token = "gateway-session-token-" + "s" * 24
    request = AgentRequest(REQUEST.session_id, {"_rollout": {"api_key": session_token}})
    with pytest.raises(AgentError) as err:
        await rig.backend.run(request)
    (body,) = rig.agent.submitted
    token, message = body["_rollout"][quoted], str(err.value)
    assert len(token) >= 24 and err.value.reason == "agent_error" and "x" * 200 in message
    assert token[:8] not in message, message[-60:]
    assert message.endswith("x" * 292 + "<redacte")  # the cut now runs through the marker


def test_header_values_come_from_env_and_missing_ones_are_named() -> None:
    envs = {"X-Api-Key": "AGENTRL_HTTP_HEADER_0"}
    assert headers_from_env(envs, {"AGENTRL_HTTP_HEADER_0": SECRET}) == {"X-Api-Key": SECRET}
    with pytest.raises(ValueError, match=r"X-Api-Key.*AGENTRL_HTTP_HEADER_0"):
        headers_from_env(envs, {})


class NoSessions:
    """The gateway side of an episode, reduced to what `run_groups` needs here."""

    async def create_session(self, session_id: str, sampling_params: Any) -> SessionHandle:
        return SessionHandle(session_id, f"http://gw.test/sessions/{session_id}/v1", "tok")

    async def get_turns(self, session_id: str) -> list[Any]:
        return []

    async def context_full(self, session_id: str) -> ContextFullCalls:
        return ContextFullCalls()

    async def close_session(self, session_id: str) -> None:
        pass

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        return QuiesceReport(idle=True, in_flight=0, engine_requests=0, workers=0)


async def raw_agent(post_answer: bytes, get_answer: bytes) -> asyncio.Server:
    """An 'agent' speaking raw HTTP, so it can answer what aiohttp's server never would."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        await reader.readexactly(length)
        writer.write(post_answer if head.startswith(b"POST") else get_answer)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


MALFORMED = b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n{}"
ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


@pytest.mark.looptime
@pytest.mark.parametrize("case", ["redirect_loop", "malformed_submit", "malformed_poll"])
async def test_failures_from_odd_responses_never_log_the_secret_header(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's response errors keep the request's headers in their repr: a failure is
    described by type, status and message only, in the error and in every log line."""
    runner: web.AppRunner | None = None
    server: asyncio.Server | None = None
    if case == "redirect_loop":  # 307 to itself: answered, never followed
        app = web.Application()

        async def again(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(str(request.url))

        app.router.add_post("/episodes", again)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    else:
        server = await raw_agent(MALFORMED if case == "malformed_submit" else ACCEPTED, MALFORMED)
        port = server.sockets[0].getsockname()[1]
    listener = CallbackListener("127.0.0.1", 0, "127.0.0.1")
    await listener.start()
    spec = HttpAgent(url=f"http://127.0.0.1:{port}/episodes", pollIntervalSeconds=0.1)
    backend = HttpAgentBackend(
        spec,
        headers={"X-Api-Key": SECRET},
        listener=listener,
        pool_size=2,
        callback_base=listener.url,
    )
    ctx = RolloutContext(NoSessions(), backend, asyncio.Semaphore(1))
    episode = EpisodeSpec({"max_new_tokens": 8}, 8, 60.0, "m")
    try:
        with caplog.at_level(logging.DEBUG):
            ((outcome,),) = await run_groups(
                ctx, [[EpisodeInput("p", {}, None, 0, 0)]], episode, "train"
            )
    finally:
        await backend.aclose()
        if runner is not None:
            await runner.cleanup()
        if server is not None:
            server.close()
    assert outcome.failure == "agent_error"
    expected = {
        "redirect_loop": "HTTP 307, a redirect to http://127.0.0.1:",
        "malformed_submit": "ClientResponseError: HTTP 400",
        # What failed, described (it said "HTTP 0": no HTTP status was ever answered).
        "malformed_poll": "result poll failed 5x (ClientResponseError: HTTP 400",
    }[case]
    assert expected in outcome.message
    failure_lines = [r.getMessage() for r in caplog.records if outcome.session_id in r.getMessage()]
    assert any(expected in line for line in failure_lines)  # the batch's one failure line
    if case == "malformed_poll":
        assert "ClientResponseError: HTTP 400" in caplog.text  # the debug lines, described
    assert SECRET not in outcome.message and SECRET not in caplog.text


@dataclass
class Elsewhere:
    """A server at another origin than the agent's, noting what reaches it."""

    seen: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    async def note(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, dict(request.headers), await request.read()))
        return web.json_response({"rewards": 1.0})


@pytest.mark.parametrize("step", ["submit", "poll", "stop"])
async def test_a_redirect_never_carries_the_secret_header_or_the_session_token_elsewhere(
    step: str,
) -> None:
    """aiohttp follows redirects and drops only Authorization, Cookie and Proxy-Authorization
    when the origin changes: a secret header of another name (X-Api-Key), and a 307's body
    (the session token, the callback token) went to whatever the agent's answer named, such
    as http:// when a proxy in front of the agent redirects to its own scheme."""
    other = Elsewhere()
    other_app = web.Application()
    other_app.router.add_route("*", "/{tail:.*}", other.note)
    other_runner = web.AppRunner(other_app)
    await other_runner.setup()
    other_site = web.TCPSite(other_runner, "127.0.0.1", 0)
    await other_site.start()
    other_port = other_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    # "localhost" is another origin than "127.0.0.1", on the same machine.
    away = f"http://localhost:{other_port}/episodes"

    async def redirect(request: web.Request) -> web.Response:
        sid = request.match_info.get("sid")
        raise web.HTTPTemporaryRedirect(f"{away}/{sid}" if sid else away)

    async def accept(request: web.Request) -> web.Response:
        return web.json_response({"status": "accepted"}, status=202)

    app = web.Application()
    app.router.add_post("/episodes", redirect if step == "submit" else accept)
    app.router.add_get("/episodes/{sid}", redirect)
    app.router.add_delete("/episodes/{sid}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    listener = CallbackListener("127.0.0.1", 0, "127.0.0.1")
    await listener.start()
    backend = HttpAgentBackend(
        HttpAgent(url=f"http://127.0.0.1:{port}/episodes", pollIntervalSeconds=0.1),
        headers={"X-Api-Key": SECRET},
        listener=listener,
        pool_size=2,
        callback_base=listener.url,
    )
    token = "gateway-session-token-" + "t" * 20
    request = AgentRequest(REQUEST.session_id, {"_rollout": {"api_key": token}})
    try:
        if step == "stop":
            await backend.stop(REQUEST.session_id)
        else:
            with pytest.raises(AgentError) as err:
                await asyncio.wait_for(backend.run(request), 10)
            assert "HTTP 307" in str(err.value)
            if step == "submit":  # the message says where it pointed and what to do
                assert f"localhost:{other_port}/episodes" in str(err.value)
                assert "agent.http.url" in str(err.value)
    finally:
        await backend.aclose()
        await runner.cleanup()
        await other_runner.cleanup()
    assert other.seen == []  # nothing at all went to the other origin


@pytest.mark.parametrize(
    "authorization", [b"Bearer \xff\xfe\xfd", b"Bearer caf\xe9", "Bearer tökén".encode()]
)
async def test_a_callback_with_undecodable_credentials_is_401_not_500(
    rig: Rig, authorization: bytes
) -> None:
    """Header bytes that are not ASCII reach the handler as surrogates, which cannot be
    encoded: the listener answered 500 (an exception in its handler), the gateway's own
    APIs 401. The episode still waits for its real result."""
    sid = "sid-undecodable"
    _, fut = rig.listener.expect(sid)
    host, port = "127.0.0.1", rig.listener.port
    reader, writer = await asyncio.open_connection(host, port)
    body = b'{"rewards": 1.0}'
    writer.write(
        b"POST " + callback_url("", sid).encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: " + authorization + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    assert status_line.split()[1] == b"401", status_line
    assert not fut.done()
    rig.listener.forget(sid)
