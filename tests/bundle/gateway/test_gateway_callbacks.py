"""HTTP agents' result callbacks on the gateway's agent port, relayed to the rollout.

The gateway under test is the real one; the rollout side is the HTTP backend's own
listener (`CallbackListener`), registered over the admin API with `GatewayClient` as the
rollout does it. Agents post with aiohttp to the agent port: the port the gateway Service
exposes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from tests.support.process import free_port
from yarl import URL

from agentrl.api.constants import CALLBACK_MAX_BYTES, CALLBACK_OUTCOMES, CALLBACK_PATH
from agentrl.bundle.agents.base import AgentError
from agentrl.bundle.agents.http import CallbackListener
from agentrl.bundle.gateway import GatewayClient, GatewayServer
from agentrl.bundle.session import SessionError, callback_url

SID = "cb" + "0" * 46


@pytest.fixture
async def listener() -> AsyncIterator[CallbackListener]:
    listener = CallbackListener("127.0.0.1", 0, "127.0.0.1")
    await listener.start()
    yield listener
    await listener.stop()


@pytest.fixture
async def admin(gateway: GatewayServer) -> AsyncIterator[GatewayClient]:
    client = GatewayClient(f"http://127.0.0.1:{gateway.admin_port}", "admin-secret")
    yield client
    await client.aclose()


async def post(
    gateway: GatewayServer, sid: str, body: bytes, token: str | None = None
) -> tuple[int, Any]:
    """An agent's callback to the gateway's agent port."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            callback_url(f"http://127.0.0.1:{gateway.port}", sid), data=body, headers=headers
        ) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def test_a_callback_reaches_the_rollout_through_the_agent_port(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    # The answer is the base agents post under: how they reach the gateway.
    assert await admin.relay_callbacks_to(listener.url) == gateway.url
    await admin.relay_callbacks_to(listener.url)  # idempotent: the rollout may say it again
    await gateway.create_session(SID, {})
    token, fut = listener.expect(SID)
    assert await post(gateway, SID, b'{"rewards": [0.5]}', token) == (200, {"ok": True})
    assert fut.result() == {"rewards": [0.5]}


async def test_the_session_s_own_token_is_still_required(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    await admin.relay_callbacks_to(listener.url)
    await gateway.create_session(SID, {})
    token, fut = listener.expect(SID)
    other = "cc" + "0" * 46
    await gateway.create_session(other, {})
    other_token, _ = listener.expect(other)
    for wrong in (None, "nope", other_token):
        status, body = await post(gateway, SID, b'{"rewards": 1}', wrong)
        assert (status, body) == (401, {"error": "bad callback token"})
    assert not fut.done()
    assert (await post(gateway, SID, b"not json", token))[0] == 400


async def test_only_open_sessions_are_relayed(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    await admin.relay_callbacks_to(listener.url)
    token, fut = listener.expect(SID)  # the rollout waits, but the gateway never opened it
    assert await post(gateway, SID, b"{}", token) == (
        404,
        {"error": "unknown or finished session"},
    )
    await gateway.create_session(SID, {})
    await gateway.close_session(SID)  # the episode ended: a late callback is refused
    assert (await post(gateway, SID, b"{}", token))[0] == 404
    assert not fut.done()


async def test_before_the_rollout_registers_the_agent_is_told_to_try_again(
    gateway: GatewayServer,
) -> None:
    await gateway.create_session(SID, {})
    status, body = await post(gateway, SID, b"{}", "t")
    assert status == 503 and "try again" in body["error"]


async def test_an_unreachable_rollout_is_a_502_logged_without_the_token(
    gateway: GatewayServer, admin: GatewayClient, caplog: pytest.LogCaptureFixture
) -> None:
    gone = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    await admin.relay_callbacks_to(gone)
    await gateway.create_session(SID, {})
    with caplog.at_level(logging.WARNING, "agentrl.gateway"):
        status, body = await post(gateway, SID, b"{}", "secret-callback-token")
    assert status == 502 and "unreachable" in body["error"]
    assert (
        f"result callback of session {SID} not delivered (unreachable): the rollout's "
        f"listener at {gone} did not answer"
    ) in caplog.text
    assert "secret-callback-token" not in caplog.text


async def test_a_result_larger_than_a_model_request_passes_up_to_its_own_bound(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    """The agent port bounds model requests by maxRequestBytes (2 MiB by default); a result
    document has its own bound, the listener's."""
    await admin.relay_callbacks_to(listener.url)
    await gateway.create_session(SID, {})
    token, fut = listener.expect(SID)
    big = b'{"rewards": 1, "trace": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    assert len(big) > gateway.settings.spec.max_request_bytes
    assert (await post(gateway, SID, big, token))[0] == 200
    assert fut.result()["rewards"] == 1
    other = "cd" + "0" * 46
    await gateway.create_session(other, {})
    too_big = b'{"x": "' + b"x" * CALLBACK_MAX_BYTES + b'"}'
    assert (await post(gateway, other, too_big, token))[0] == 413


async def test_a_result_refused_for_its_size_fails_its_episode_at_once(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    """The gateway answered 413 and the rollout never heard of it: the episode waited out
    timeoutSeconds (900 s by default) holding its slot, then failed as `timeout`. It now
    fails at once as `bad_result`; a stranger's oversized post fails nobody's episode."""
    await admin.relay_callbacks_to(listener.url)
    await gateway.create_session(SID, {})
    token, fut = listener.expect(SID)
    too_big = b'{"x": "' + b"x" * CALLBACK_MAX_BYTES + b'"}'
    assert (await post(gateway, SID, too_big, "not-the-token"))[0] == 413
    assert not fut.done()
    assert (await post(gateway, SID, too_big, token))[0] == 413
    assert fut.done()  # told before the agent's 413
    err = fut.exception()
    assert isinstance(err, AgentError) and err.reason == "bad_result"
    assert f"over {CALLBACK_MAX_BYTES} bytes" in str(err)


@pytest.mark.parametrize(
    "target",
    ["ftp://127.0.0.1:1", "http://", "http://h:1/path", "http://u:p@h:1", "not a url", 7, None],
)
async def test_only_an_http_origin_is_taken_as_the_target(
    gateway: GatewayServer, admin: GatewayClient, target: Any
) -> None:
    with pytest.raises(SessionError, match="HTTP 400"):
        await admin.relay_callbacks_to(target)
    assert gateway.callbacks.target is None


async def test_registering_needs_the_admin_token(
    gateway: GatewayServer, listener: CallbackListener
) -> None:
    intruder = GatewayClient(f"http://127.0.0.1:{gateway.admin_port}", "wrong")
    try:
        with pytest.raises(SessionError, match="HTTP 401"):
            await intruder.relay_callbacks_to(listener.url)
    finally:
        await intruder.aclose()
    assert gateway.callbacks.target is None
    # Nor is the admin route on the agent port (the one a LoadBalancer exposes).
    async with (
        aiohttp.ClientSession() as http,
        http.put(
            f"http://127.0.0.1:{gateway.port}/admin/callbacks",
            json={"target": listener.url},
            headers={"Authorization": "Bearer admin-secret"},
        ) as resp,
    ):
        assert resp.status in (404, 405)
    assert gateway.callbacks.target is None


async def test_many_callbacks_at_once_each_reach_their_episode(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    await admin.relay_callbacks_to(listener.url)
    sids = [f"m{i:02d}" + "0" * 45 for i in range(32)]
    waits = {}
    for i, sid in enumerate(sids):
        await gateway.create_session(sid, {})
        waits[sid] = (listener.expect(sid), i)
    answers = await asyncio.gather(
        *(post(gateway, sid, b'{"rewards": %d}' % i, tok) for sid, ((tok, _), i) in waits.items())
    )
    assert {a[0] for a in answers} == {200}
    assert [fut.result()["rewards"] for (_, fut), _ in waits.values()] == list(range(32))


async def test_the_first_result_counts_and_later_ones_change_nothing(
    gateway: GatewayServer, admin: GatewayClient, listener: CallbackListener
) -> None:
    """docs/agents.md: a second callback (another reward, say) is ignored: 200 while the
    episode is still being closed, 404 once the rollout stopped listening or closed it."""
    await admin.relay_callbacks_to(listener.url)
    await gateway.create_session(SID, {})
    token, fut = listener.expect(SID)
    assert (await post(gateway, SID, b'{"rewards": 1}', token))[0] == 200
    assert (await post(gateway, SID, b'{"rewards": 0}', token))[0] == 200
    assert fut.result() == {"rewards": 1}
    listener.forget(SID)  # the backend's run() returned
    assert (await post(gateway, SID, b'{"rewards": 0}', token))[0] == 404
    await gateway.close_session(SID)
    assert (await post(gateway, SID, b'{"rewards": 0}', token))[0] == 404
    assert fut.result() == {"rewards": 1}


def gateway_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The gateway's lines about result callbacks (at whatever level caplog captured)."""
    lines = [r.getMessage() for r in caplog.records if r.name == "agentrl.gateway"]
    return [line for line in lines if "result callback of session" in line]


def outcomes(gateway: GatewayServer) -> dict[str, float]:
    """`agentrl_gateway_callbacks_total` by outcome, the ones that moved."""
    value = gateway.metrics.registry.get_sample_value
    counts = {
        o: value("agentrl_gateway_callbacks_total", {"outcome": o}) for o in CALLBACK_OUTCOMES
    }
    return {o: n for o, n in counts.items() if n}


@contextlib.asynccontextmanager
async def listener_answering(
    handle: Callable[[web.Request], Awaitable[web.Response]],
) -> AsyncIterator[str]:
    """A result listener of the test's own, answering every callback with `handle`; its URL."""
    app = web.Application()
    app.router.add_post(CALLBACK_PATH + "/{sid}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def failing_listener() -> AsyncIterator[str]:
    """A listener that fails every callback as aiohttp does on an exception (500, text)."""

    async def handle(_: web.Request) -> web.Response:
        raise RuntimeError("listener bug")

    async with listener_answering(handle) as url:
        yield url


async def post_answer(gateway: GatewayServer, sid: str, body: bytes, token: str) -> Any:
    """The gateway's whole answer to an agent's callback: (status, Retry-After, JSON)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            callback_url(f"http://127.0.0.1:{gateway.port}", sid), data=body, headers=headers
        ) as resp,
    ):
        return resp.status, resp.headers.get("Retry-After"), await resp.json(content_type=None)


async def test_every_callback_is_counted_by_outcome_and_each_lost_one_logged_once(
    gateway: GatewayServer,
    admin: GatewayClient,
    listener: CallbackListener,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A callback the gateway did not deliver was, for a 404, a 503 or a 413 whose news was
    lost, neither counted nor logged: the episode failed later as `timeout`, and nothing
    said that its result had come. Each is now counted by outcome (every series from 0) and
    logged once with its session id and why, never with the body or the token."""
    assert outcomes(gateway) == {}
    secret = "secret-callback-token"
    with caplog.at_level(logging.DEBUG, "agentrl.gateway"):
        await gateway.create_session(SID, {})
        assert (await post_answer(gateway, SID, b"{}", secret))[:2] == (503, "1")
        await admin.relay_callbacks_to(listener.url)
        token, _ = listener.expect(SID)
        assert (await post(gateway, SID, b'{"rewards": 1, "trace": "private"}', secret))[0] == 401
        assert (await post(gateway, SID, b'{"rewards": 1}', token))[0] == 200
        listener.forget(SID)
        await gateway.close_session(SID)
        assert (await post(gateway, SID, b'{"rewards": 1}', token))[0] == 404
        assert (await post(gateway, "never-opened", b"{}", token))[0] == 404
    assert outcomes(gateway) == {
        "no_listener": 1,
        "refused": 1,
        "delivered": 1,
        "unknown_session": 2,
    }
    lines = gateway_lines(caplog)
    # One per callback not taken, none for the delivered one; an id the gateway never opened
    # is no episode's, and anyone reaching a public gateway can post to one: debug level.
    assert len(lines) == 4
    assert [r.levelname for r in caplog.records if "never-opened" in r.getMessage()] == ["DEBUG"]
    no_listener, refused, closed, unknown = lines
    assert f"session {SID} not delivered (no_listener): no rollout has registered" in no_listener
    assert f"session {SID} refused by the rollout's listener: HTTP 401: 'bad callback token'" in (
        refused
    )
    assert f"session {SID} not delivered (unknown_session): its session is closed" in closed
    assert "session never-opened not delivered (unknown_session): no session has that id" in (
        unknown
    )
    for secret_part in (secret, token, "private"):
        assert secret_part not in caplog.text


async def test_a_failing_listener_is_a_502_the_agent_is_told_to_retry(
    gateway: GatewayServer,
    admin: GatewayClient,
    failing_listener: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The listener's 500 went back to the agent as it was, uncounted and unlogged, and an
    agent reads a 500 as its result being at fault: it is now a 502 with `Retry-After`."""
    await admin.relay_callbacks_to(failing_listener)
    await gateway.create_session(SID, {})
    with caplog.at_level(logging.WARNING, "agentrl.gateway"):
        status, retry, body = await post_answer(gateway, SID, b'{"rewards": 1}', "t")
    assert (status, retry) == (502, "1")
    assert body == {"error": "the rollout's result listener failed (HTTP 500); try again"}
    assert outcomes(gateway) == {"listener_error": 1}
    assert gateway_lines(caplog) == [
        f"gateway: result callback of session {SID} not delivered (listener_error): the "
        f"rollout's listener at {failing_listener} answered HTTP 500; the agent is told to "
        "try again"
    ]


async def test_an_unreachable_listener_is_counted_and_the_agent_told_when_to_retry(
    gateway: GatewayServer, admin: GatewayClient
) -> None:
    await admin.relay_callbacks_to(f"http://127.0.0.1:{free_port()}")
    await gateway.create_session(SID, {})
    status, retry, _ = await post_answer(gateway, SID, b"{}", "t")
    assert (status, retry) == (502, "1")
    assert outcomes(gateway) == {"unreachable": 1}


async def test_an_oversized_result_whose_news_is_lost_says_so(
    gateway: GatewayServer, admin: GatewayClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The 413's news to the rollout failed without a word (`contextlib.suppress`): the
    episode waited out its timeout and nobody could tell why."""
    gone = f"http://127.0.0.1:{free_port()}"
    await admin.relay_callbacks_to(gone)
    await gateway.create_session(SID, {})
    too_big = b'{"x": "' + b"x" * CALLBACK_MAX_BYTES + b'"}'
    with caplog.at_level(logging.WARNING, "agentrl.gateway"):
        assert (await post(gateway, SID, too_big, "t"))[0] == 413
    assert outcomes(gateway) == {"too_large": 1}
    (line,) = gateway_lines(caplog)
    assert f"session {SID} not delivered (too_large): the result document is over " in line
    assert "the rollout could not be told (ClientConnectorError" in line


async def test_a_stranger_s_session_id_cannot_write_a_log_line(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = URL(f"http://127.0.0.1:{gateway.port}{CALLBACK_PATH}/x%0Agateway:%20forged", encoded=True)
    with caplog.at_level(logging.DEBUG, "agentrl.gateway"):
        async with aiohttp.ClientSession() as http, http.post(url, data=b"{}") as resp:
            assert resp.status == 404
    (line,) = gateway_lines(caplog)
    assert "\n" not in line and "session 'x\\ngateway: forged' not delivered" in line


async def post_and_leave(gateway: GatewayServer) -> None:
    """Open the session and post its result as an agent that gives up after 0.1 s."""
    await gateway.create_session(SID, {})
    with pytest.raises(TimeoutError):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.1)) as http:
            await http.post(callback_url(gateway.url, SID), data=b'{"rewards": 1}')


async def test_a_result_is_delivered_and_counted_when_the_agent_stops_waiting(
    gateway: GatewayServer, admin: GatewayClient
) -> None:
    """The agent port cancels the handler of a client that went away, and with it the post
    to the listener: a result already read was cut short on its way, uncounted, unlogged."""
    received: list[bytes] = []
    answered = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)  # the agent's client gives up meanwhile
        received.append(await request.read())
        answered.set()
        return web.json_response({"ok": True})

    async with listener_answering(slow) as url:
        await admin.relay_callbacks_to(url)
        await post_and_leave(gateway)
        await asyncio.wait_for(answered.wait(), 5)
        for _ in range(50):  # the gateway counts once the listener's answer is in
            if outcomes(gateway):
                break
            await asyncio.sleep(0.02)
    assert received == [b'{"rewards": 1}']
    assert outcomes(gateway) == {"delivered": 1}


@pytest.mark.parametrize("case", [(CALLBACK_MAX_BYTES, "unreachable"), (4, "too_large")])
async def test_stopping_ends_every_delivery_in_flight_and_counts_it(
    case: tuple[int, str],
    gateway: GatewayServer,
    admin: GatewayClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A delivery whose agent left and whose listener does not answer outlives the agent's
    handler; the gateway's stop waits CLOSE_WAIT_S for it, then ends it itself, counted and
    logged once as ended by the stop, before closing the client it posts with. It was left
    to fail on the closed ClientSession, logged as a listener that did not answer and an
    agent told to post again, to a gateway that was gone."""
    from agentrl.bundle.gateway import callbacks

    bound, outcome = case
    monkeypatch.setattr(callbacks, "CLOSE_WAIT_S", 0.2)
    # Past the bound, the delivery is the news of a refused result (its outcome too_large).
    monkeypatch.setattr(gateway.callbacks, "_max_bytes", bound)
    reached, released = asyncio.Event(), asyncio.Event()

    async def hangs(_: web.Request) -> web.Response:
        reached.set()
        await released.wait()  # till the test ends: the listener's own stop waits for it
        return web.json_response({"ok": True})

    caplog.set_level(logging.INFO, logger="agentrl.gateway")
    async with listener_answering(hangs) as url:
        await admin.relay_callbacks_to(url)
        await post_and_leave(gateway)
        await asyncio.wait_for(reached.wait(), 5)
        (delivery,) = gateway.callbacks._deliveries
        await asyncio.wait_for(gateway.callbacks.close(), 2)
        released.set()  # the delivery is over by now; the listener's stop need not wait
        assert delivery.done()
        assert not gateway.callbacks._deliveries
        assert outcomes(gateway) == {outcome: 1}
        (line,) = gateway_lines(caplog)
        assert "the gateway stopped" in line and "rewards" not in line


async def test_a_result_arriving_while_the_gateway_stops_is_the_stop_s(
    gateway: GatewayServer,
    admin: GatewayClient,
    listener: CallbackListener,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stop closes every session, then stops the agent port: a result posted in between
    was answered 404 "unknown or finished session", counted `unknown_session` and logged as
    its session being closed because "the episode ended", though the stop had ended it. It
    is now the stop's: 503 without `Retry-After`, counted `stopping` and logged so, with
    nothing for the stop to wait on. A session closed before the stop is still a 404."""
    await admin.relay_callbacks_to(listener.url)
    await gateway.create_session(SID, {})
    token, fut = listener.expect(SID)
    ended = "ce" + "0" * 46
    await gateway.create_session(ended, {})
    await gateway.close_session(ended)
    answers = []
    agent_port = gateway._runners[0]  # the first served: the agent port
    cleanup = agent_port.cleanup

    async def posted_first() -> None:
        """Two results, after the sessions closed and before the agent port stops."""
        answers.append(await post_answer(gateway, SID, b'{"rewards": 1}', token))
        answers.append(await post_answer(gateway, ended, b'{"rewards": 1}', token))
        await cleanup()

    monkeypatch.setattr(agent_port, "cleanup", posted_first)
    with caplog.at_level(logging.WARNING, "agentrl.gateway"):
        await asyncio.wait_for(gateway.stop(), 10)
    assert answers == [
        (503, None, {"error": "the gateway is stopping"}),
        (404, None, {"error": "unknown or finished session"}),
    ]
    assert not fut.done()
    assert outcomes(gateway) == {"stopping": 1, "unknown_session": 1}
    stopping, closed = gateway_lines(caplog)
    assert stopping == (
        f"gateway: result callback of session {SID} not delivered (stopping): the gateway is "
        "stopping and closed its session (with its model calls' trace): no episode can take "
        "the result any more; the agent is told so, without Retry-After"
    )
    assert f"session {ended} not delivered (unknown_session): its session is closed" in closed
