"""HTTP agents' result callbacks, served on the agent port and relayed to the rollout.

An HTTP agent posts its result to `callback_url` (`agentrl.bundle.session.callback_url`):
the gateway's own URL, because the gateway is what agents reach, through its Service and
`spec.gateway.publicUrl` when they run outside the cluster. The rollout, which waits for
the result, runs in slime's rollout process on whatever node Ray placed it, on a port the
OS picked; it registers that listener once over the admin API (`PUT /admin/callbacks`),
and each callback for an open session is passed on to it: body, `Authorization` and
`Content-Type` as the agent sent them, and the listener's answer back to the agent. The
listener checks the session's callback token, so the relay holds no secret of its own.

    POST /agentrl/callback/{sid}   (agent port)  -> the listener's answer; 404 for a session
                                                   that is not open, 413 past
                                                   CALLBACK_MAX_BYTES, 503 before the rollout
                                                   registered, 502 when it cannot be reached
                                                   or answers 5xx (503 and 502 with
                                                   `Retry-After`: post again); 503 without
                                                   it for a session the gateway's stop
                                                   closed
    PUT  /admin/callbacks {"target": "http://host:port"}   (admin port, admin token)
                                                -> 200 {"callback_base": <gateway URL>}

A result refused for its size still reaches the rollout as news: an empty callback with the
agent's `Authorization` and `CALLBACK_REFUSED_HEADER`, so the listener fails that episode at
once (a bad result) instead of letting it wait out `timeoutSeconds` holding its slot.

Each callback is counted in `agentrl_gateway_callbacks_total{outcome}` (CALLBACK_OUTCOMES),
and each one the listener did not take is logged once, with its session id and why (never
its body or its token): a result lost on the way otherwise surfaced only as the episode's
`timeout`, whose log line cannot say that the result came. A callback read in full is
delivered whether or not the agent waits for the answer.

The gateway's stop closes every session before its agent port stops accepting (the close
cancels the sessions' model calls, which the port's shutdown would otherwise wait for), so
a result can still arrive for a session the stop closed. No episode can take it any more:
the rollout reads the episode's turns from the gateway once its result came, and those went
with the session. It is answered 503 without `Retry-After` (the gateway is going away: this
URL will not take it later either) and counted `stopping`, not `unknown_session`, whose log
line would say that its episode had ended. Nothing here waits: the stop stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from agentrl.api.constants import (
    CALLBACK_DELIVERED,
    CALLBACK_LISTENER_ERROR,
    CALLBACK_MAX_BYTES,
    CALLBACK_NO_LISTENER,
    CALLBACK_OUTCOMES,
    CALLBACK_PATH,
    CALLBACK_REFUSED,
    CALLBACK_REFUSED_HEADER,
    CALLBACK_STOPPING,
    CALLBACK_TOO_LARGE,
    CALLBACK_UNKNOWN_SESSION,
    CALLBACK_UNREACHABLE,
)
from agentrl.bundle.gateway.session_store import (
    SESSION_ID,
    SessionClosed,
    SessionStore,
    UnknownSession,
)
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.redact import describe_error

log = logging.getLogger("agentrl.gateway")

RELAY_TIMEOUT_S = 30.0  # the listener answers at once: it only resolves a future
RELAY_CONNECTIONS = 64
CLOSE_WAIT_S = 5.0  # for deliveries in flight when the gateway stops
RETRY_AFTER_S = 1  # a 503 or 502 to an agent: its result is wanted, post it again
LISTENER_MESSAGE_CHARS = 200  # of a listener's refusal, in the gateway's log line
_PASSED_ON = ("Authorization", "Content-Type")


def _error(status: int, message: str, retry: bool = False) -> web.Response:
    return web.Response(
        body=orjson.dumps({"error": message}),
        status=status,
        content_type="application/json",
        headers={"Retry-After": str(RETRY_AFTER_S)} if retry else None,
    )


def _shown(sid: str) -> str:
    """The session id for a log line: as is when it is one the gateway could have issued,
    else quoted, so that a stranger's path cannot write a line of its own into the log."""
    return sid if SESSION_ID.fullmatch(sid) else repr(sid[:130])


def _said(answer: Any) -> str:
    """What a listener's refusal says (its `{"error": ...}`), for the log; never the body of
    anything else."""
    if not isinstance(answer, bytes):
        return ""
    with contextlib.suppress(orjson.JSONDecodeError):
        doc = orjson.loads(answer)
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            return f": {doc['error'][:LISTENER_MESSAGE_CHARS]!r}"
    return ""


async def _read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The body, or None past `limit` bytes. Read from the stream: the agent port's own
    `client_max_size` (spec.gateway.maxRequestBytes) bounds model requests, not results."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _target(value: Any) -> str | None:
    """`http(s)://host:port` with nothing after it, else None."""
    if not isinstance(value, str):
        return None
    try:
        url = URL(value)
    except ValueError:
        return None
    if url.scheme not in ("http", "https") or not url.host or url.path not in ("", "/"):
        return None
    if url.query_string or url.fragment or url.user is not None:
        return None
    return str(url.origin())


class CallbackRelay:
    """Receives callbacks on the agent port and passes them to the registered listener."""

    def __init__(
        self,
        store: SessionStore,
        agent_url: Callable[[], str],
        metrics: BundleMetrics,
        max_bytes: int = CALLBACK_MAX_BYTES,
    ) -> None:
        self._store = store
        self._agent_url = agent_url  # the gateway's URL as agents reach it
        self._max_bytes = max_bytes
        self.target: str | None = None
        self._http: aiohttp.ClientSession | None = None
        self._outcomes = {o: metrics.gateway_callbacks.labels(o) for o in CALLBACK_OUTCOMES}
        self._deliveries: set[asyncio.Future[web.Response]] = set()  # kept till they end
        self._closing = False
        # Sessions the gateway's stop closed (`stop_taking`): a result for one of them is
        # `stopping`, not `unknown_session`.
        self._closed_by_stop: frozenset[str] = frozenset()

    def add_routes(self, app: web.Application) -> None:
        """The agent-facing route (the gateway Service's port)."""
        app.router.add_post(CALLBACK_PATH + "/{sid}", self.relay)

    async def relay_callbacks_to(self, target: Any) -> str:
        """Pass callbacks to `target` from now on (the admin API's `PUT /admin/callbacks`);
        the base URL agents are to post them under."""
        checked = _target(target)
        if checked is None:
            raise ValueError(f"callback target {target!r} is not http(s)://host:port")
        if checked != self.target:
            log.info("gateway: relaying agents' result callbacks to %s", checked)
        self.target = checked
        return self._agent_url()

    def stop_taking(self, closed: Iterable[str]) -> None:
        """The gateway's stop closed these sessions (`SessionStore.close_all`), its agent port
        still accepting: a result for one of them is answered and counted as the stop's."""
        self._closed_by_stop = frozenset(closed)

    async def relay(self, request: web.Request) -> web.StreamResponse:
        sid = request.match_info["sid"]
        if sid in self._closed_by_stop:
            why = (
                "the gateway is stopping and closed its session (with its model calls' "
                "trace): no episode can take the result any more; the agent is told so, "
                "without Retry-After"
            )
            return self._lost(CALLBACK_STOPPING, sid, why, 503, "the gateway is stopping")
        try:
            self._store.get(sid)
        except SessionClosed:
            why = "its session is closed (the episode ended: its result came, or it failed)"
            return self._lost(
                CALLBACK_UNKNOWN_SESSION, sid, why, 404, "unknown or finished session"
            )
        except UnknownSession:
            # No episode of ours: anyone who reaches a public gateway can post to made-up
            # ids, so this is counted and logged at debug level, never a warning per post.
            why = "no session has that id (an id this gateway never opened)"
            return self._lost(
                CALLBACK_UNKNOWN_SESSION, sid, why, 404, "unknown or finished session",
                level=logging.DEBUG,
            )  # fmt: skip
        if self.target is None:
            why = "no rollout has registered a result listener yet; the agent is told to try again"
            message = "no rollout is receiving results yet; try again"
            return self._lost(CALLBACK_NO_LISTENER, sid, why, 503, message, retry=True)
        body = await _read_at_most(request, self._max_bytes)
        headers = {h: request.headers[h] for h in _PASSED_ON if h in request.headers}
        # Read, it is delivered (and counted) even if the agent stops waiting for the answer:
        # the agent port cancels the handler of a client that went away, which cut the post
        # to the listener short, uncounted and unlogged.
        delivery = asyncio.ensure_future(self._deliver(sid, body, headers))
        self._deliveries.add(delivery)
        delivery.add_done_callback(self._deliveries.discard)
        return await asyncio.shield(delivery)

    async def _deliver(self, sid: str, body: bytes | None, headers: dict[str, str]) -> web.Response:
        """Pass a callback read in full (None: past the bound) to the listener; the agent's
        answer."""
        if body is None:
            refused = f"over {self._max_bytes} bytes"
            headers[CALLBACK_REFUSED_HEADER] = refused
            try:  # news only: the agent's answer is 413
                told = await self._pass_on(sid, b"", headers)
            except asyncio.CancelledError:
                if self._closing:  # `close()` ended it: counted and logged, then cancelled
                    why = f"the result document is {refused}; {self._stopped()}"
                    self._lost(CALLBACK_TOO_LARGE, sid, why, 413, "result document too large")
                raise
            except (aiohttp.ClientError, TimeoutError) as exc:
                news = f"the rollout could not be told ({describe_error(exc)})"
            else:
                news = f"the rollout was told (its listener answered HTTP {told.status})"
            why = f"the result document is {refused}; {news}"
            return self._lost(CALLBACK_TOO_LARGE, sid, why, 413, f"result document {refused}")
        try:
            resp = await self._pass_on(sid, body, headers)
        except asyncio.CancelledError:
            if self._closing:  # `close()` ended it: counted and logged, then cancelled
                self._lost(CALLBACK_UNREACHABLE, sid, self._stopped(), 502, "the gateway stopped")
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Never the repr: it would list the request headers (the callback token).
            why = (
                f"the rollout's listener at {self.target} did not answer ({describe_error(exc)}); "
                "the agent is told to try again, and the rollout polls the agent meanwhile"
            )
            message = "the rollout's result listener is unreachable; try again"
            return self._lost(CALLBACK_UNREACHABLE, sid, why, 502, message, retry=True)
        if resp.status >= 500:
            # The listener's own failure, not the agent's: a 502 that says to post again,
            # rather than a 500 the agent may take for its result being bad.
            why = (
                f"the rollout's listener at {self.target} answered HTTP {resp.status}"
                f"{_said(resp.body)}; the agent is told to try again"
            )
            message = f"the rollout's result listener failed (HTTP {resp.status}); try again"
            return self._lost(CALLBACK_LISTENER_ERROR, sid, why, 502, message, retry=True)
        if resp.status >= 300:
            # Relayed as it is: the listener's word (another episode's token, not JSON, the
            # episode no longer waiting) is the agent's to read.
            self._outcomes[CALLBACK_REFUSED].inc()
            log.warning(
                "gateway: result callback of session %s refused by the rollout's listener: "
                "HTTP %d%s",
                _shown(sid),
                resp.status,
                _said(resp.body),
            )
            return resp
        self._outcomes[CALLBACK_DELIVERED].inc()
        return resp

    def _stopped(self) -> str:
        return (
            f"the gateway stopped before the rollout's listener at {self.target} answered "
            f"(after {CLOSE_WAIT_S:g} s)"
        )

    def _lost(
        self,
        outcome: str,
        sid: str,
        why: str,
        status: int,
        message: str,
        *,
        retry: bool = False,
        level: int = logging.WARNING,
    ) -> web.Response:
        """A callback no listener took: counted, logged once (session id and why), and the
        agent's answer."""
        self._outcomes[outcome].inc()
        log.log(
            level,
            "gateway: result callback of session %s not delivered (%s): %s",
            _shown(sid),
            outcome,
            why,
        )
        return _error(status, message, retry)

    async def _pass_on(self, sid: str, body: bytes, headers: dict[str, str]) -> web.Response:
        """Post to the registered listener; its answer, for the agent."""
        async with self._client().post(
            f"{self.target}{CALLBACK_PATH}/{sid}", data=body, headers=headers
        ) as resp:
            answer = await resp.read()
            kind = resp.headers.get("Content-Type", "application/json")
            return web.Response(body=answer, status=resp.status, headers={"Content-Type": kind})

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=RELAY_CONNECTIONS),
                timeout=aiohttp.ClientTimeout(total=RELAY_TIMEOUT_S, sock_connect=10),
            )
        return self._http

    async def close(self) -> None:
        """Stop relaying: deliveries in flight get CLOSE_WAIT_S to arrive, and those still
        on their way then are ended here (each counted and logged once, by `_deliver`) before
        the client they post with is closed; left running, they would post on a closed
        ClientSession, pending tasks the event loop destroys unlogged."""
        self._closing = True
        pending = set(self._deliveries)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=CLOSE_WAIT_S)
        for delivery in pending:
            delivery.cancel()
        if pending:
            await asyncio.wait(pending)  # each cancelled one has counted itself
        if self._http is not None:
            await self._http.close()
