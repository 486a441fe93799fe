"""HTTP agent backend: submit an episode, get its result by callback, poll as a backstop.

Protocol (docs/agents.md):
- submit: `POST <url>` with the episode payload (row metadata + `_rollout`, which carries
  the gateway URL and token, `callback_url` and `callback_token`); any 2xx accepts it.
- result: the agent `POST`s its result document to `callback_url` with
  `Authorization: Bearer <callback_token>`. The URL is the gateway's
  (`agentrl.bundle.session.callback_url`), which agents reach through its Service or
  `spec.gateway.publicUrl`; the gateway relays the document to the listener, which runs in
  the rollout process on a port of its node and is registered with the gateway at start.
- backstop: if no callback arrived after `pollIntervalSeconds`, `GET <url>/<session_id>`
  (200 = result, 202/404 = still running), again every interval, until the episode times out.
- stop: on failure, timeout or cancellation, `DELETE <url>/<session_id>` (best effort).

A submit starts an episode, so it is tried again only when the agent cannot have started
it: an answer that says "not processed" (408, 425, 429, 503; `Retry-After` honoured up to
30 s) or a connection that never opened. A 500, a dropped connection or a timeout after
the request went out fails the episode instead of running it twice into one gateway
session. Retries (submit, stop) go through stamina, with jitter, so a hundred episodes
refused together do not come back together. The status poll is a fixed cadence, not a
retry: nothing failed, the result is just not there yet.

Header values (API keys) come from env vars named in the runtime config and are never
logged or put in an error message: errors are described by type, HTTP status and message
(`redact.describe_error`), never by repr, which for aiohttp response errors lists the
request headers. Only our own exceptions, described that way, reach stamina (whose retry
log line carries the failure's repr).

Redirects are never followed: aiohttp drops only `Authorization`, `Cookie` and
`Proxy-Authorization` when a redirect changes the origin, so a secret header of another name
(`X-Api-Key`), and a 307's body (the session token, the callback token), would go wherever
the agent's answer points, e.g. `http://` when a proxy in front of the agent redirects to
the scheme it sees. A 3xx fails the episode and names where it pointed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import secrets
from collections.abc import Mapping
from typing import Any

import aiohttp
import stamina
from aiohttp import web
from yarl import URL

from agentrl.api.constants import CALLBACK_MAX_BYTES, CALLBACK_PATH, CALLBACK_REFUSED_HEADER
from agentrl.api.models import HttpAgent
from agentrl.bundle.agents.base import (
    AgentError,
    AgentRequest,
    AgentResult,
    PoolStats,
    parse_result,
    payload_secrets,
)
from agentrl.bundle.agents.pool import InUseGauge
from agentrl.bundle.failures import AGENT_ERROR, BAD_RESULT
from agentrl.bundle.redact import describe_error, redact_values
from agentrl.bundle.session import callback_url, secret_matches

log = logging.getLogger("agentrl.agents.http")

# Answers meaning the request was not processed (RFC 9110 s15.5.9, RFC 8470, RFC 6585,
# RFC 9110 s15.6.4): the episode did not start, so submitting again is safe.
NOT_STARTED_STATUS = frozenset({408, 425, 429, 503})
SUBMIT_ATTEMPTS = 3
SUBMIT_WAIT_INITIAL_S, SUBMIT_WAIT_MAX_S, SUBMIT_WAIT_JITTER_S = 0.5, 5.0, 0.5
RETRY_AFTER_CAP_S = 30.0
# DELETE is idempotent: any transient failure is tried again, within a bound (it runs
# while a cancelled batch waits).
STOP_ATTEMPTS, STOP_TIMEOUT_S, STOP_REQUEST_TIMEOUT_S = 3, 15.0, 5.0
MAX_POLL_ERRORS = 5  # consecutive failed status GETs before the episode fails
# Per request: the whole request, and getting a connection (a free one of the pool's
# `maxPoolConnections`, or a new TCP connection), which aiohttp bounds together as `connect`.
REQUEST_TIMEOUT_S, CONNECT_TIMEOUT_S = 60.0, 10.0


class _TryAgain(Exception):
    """A request that may be sent again; carries only a redacted description."""

    def __init__(self, what: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.retry_after = retry_after


def _retry_wait(exc: BaseException) -> bool | float:
    """stamina's hook: retry `_TryAgain`, after its `Retry-After` when the agent gave one."""
    if not isinstance(exc, _TryAgain):
        return False
    return exc.retry_after if exc.retry_after is not None else True


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` in seconds, capped; None for absent or HTTP-date forms."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    if seconds is None or seconds < 0:
        return None
    return min(seconds, RETRY_AFTER_CAP_S)


def headers_from_env(header_envs: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Header name -> value, read from the env vars the runtime config names."""
    headers: dict[str, str] = {}
    for name, var in header_envs.items():
        value = env.get(var)
        if not value:
            raise ValueError(
                f"agent.http.headers: header {name!r} expects its value in env var {var}, "
                "which is unset or empty; check the Secret it is mounted from"
            )
        headers[name] = value
    return headers


def _refuse(fut: asyncio.Future[Any], message: str) -> None:
    """Fail the episode waiting on `fut` with a result it cannot take (if it still waits)."""
    if not fut.done():
        refused = AgentError(BAD_RESULT, message)
        refused.via = "callback"
        fut.set_exception(refused)


class CallbackListener:
    """Receives agents' result documents: `POST /agentrl/callback/<session_id>`, relayed by
    the gateway (or posted directly, where agents reach this node)."""

    def __init__(self, host: str, port: int, advertise_host: str) -> None:
        self._host, self._port, self._advertise = host, port, advertise_host
        self._waiters: dict[str, tuple[str, asyncio.Future[Any]]] = {}
        # Callbacks refused for another token, by waiting episode: the episode goes on
        # waiting (a stranger must not end it), so its end says that a result came.
        self._wrong_token: dict[str, int] = {}
        self._runner: web.AppRunner | None = None
        self.port = port

    @property
    def url(self) -> str:
        """`http://<advertised host>:<port>`: where the gateway relays callbacks to."""
        return str(URL.build(scheme="http", host=self._advertise, port=self.port))

    async def start(self) -> None:
        app = web.Application(client_max_size=CALLBACK_MAX_BYTES)
        app.router.add_post(CALLBACK_PATH + "/{sid}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        if self._port == 0 and server is not None:  # an ephemeral port: read it back
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    def expect(self, sid: str) -> tuple[str, asyncio.Future[Any]]:
        """Register an episode: (its callback token, the future of its document)."""
        token = secrets.token_urlsafe(24)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[sid] = (token, fut)
        return token, fut

    def forget(self, sid: str) -> int:
        """Stop listening for `sid`; how many of its callbacks were refused for their token."""
        self._waiters.pop(sid, None)
        return self._wrong_token.pop(sid, 0)

    async def _handle(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        entry = self._waiters.get(sid)
        auth = request.headers.get("Authorization", "")
        if entry is None:
            return web.json_response({"error": "unknown or finished session"}, status=404)
        token, fut = entry
        if not secret_matches(auth, f"Bearer {token}"):
            self._wrong_token[sid] = self._wrong_token.get(sid, 0) + 1
            return web.json_response({"error": "bad callback token"}, status=401)
        # A result that cannot be taken fails its episode at once as `bad_result`, not as a
        # `timeout` after timeoutSeconds with the episode's slot held: the agent, told 4xx,
        # rarely sends it again.
        smaller = "post a smaller result document (keep large artifacts in the agent's storage)"
        refused = request.headers.get(CALLBACK_REFUSED_HEADER)  # the gateway refused its size
        if refused is not None:
            _refuse(fut, f"the result callback's body was {refused[:100]}, its bound: {smaller}")
            return web.json_response({"ok": True})
        try:
            doc = await request.json()
        except web.HTTPRequestEntityTooLarge:  # posted here directly, past the same bound
            over = f"over {CALLBACK_MAX_BYTES} bytes"
            _refuse(fut, f"the result callback's body was {over}, its bound: {smaller}")
            raise
        except ValueError:
            size = len(await request.read())
            _refuse(fut, f"the result callback's body ({size} bytes) is not JSON: post it as JSON")
            return web.json_response({"error": "body is not JSON"}, status=400)
        if not fut.done():
            fut.set_result(doc)
        return web.json_response({"ok": True})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class HttpAgentBackend:
    def __init__(
        self,
        spec: HttpAgent,
        *,
        headers: Mapping[str, str],
        listener: CallbackListener,
        pool_size: int,
        callback_base: str,
    ) -> None:
        """`callback_base`: the URL agents post results under: the gateway's, which relays
        to `listener`, or the listener's own where agents reach it."""
        self._spec = spec
        self._url = spec.url.rstrip("/")
        self._headers = dict(headers)
        self._listener = listener
        self._callback_base = callback_base
        self._pool_size = pool_size
        self._in_use = InUseGauge()
        self._session: aiohttp.ClientSession | None = None
        self._callbacks_seen = False
        self._poll_warned = False

    def callback_url(self, session_id: str) -> str:
        """Where the agent of episode `session_id` is told to post its result."""
        return callback_url(self._callback_base, session_id)

    def _request(self, method: str, url: str, **kwargs: Any) -> Any:
        """Every request to the agent, the session's secret headers with it; a redirect is
        answered, never followed (see the module's docstring)."""
        return self._client().request(method, url, allow_redirects=False, **kwargs)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._pool_size)
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, headers=self._headers
            )
        return self._session

    async def run(self, request: AgentRequest) -> AgentResult:
        sid = request.session_id
        token, fut = self._listener.expect(sid)
        payload = dict(request.payload)
        payload["_rollout"] = {
            **dict(payload.get("_rollout") or {}),
            "callback_url": self.callback_url(sid),
            "callback_token": token,
        }
        finished = False
        try:
            await self._submit(payload)
            doc, via = await self._await_result(sid, fut)
            finished = True
            try:
                result = parse_result(doc, (token, *payload_secrets(request.payload)))
            except AgentError as exc:
                exc.via = via  # a refused result came somehow too: the rehearsal says how
                raise
            return dataclasses.replace(result, via=via)
        except AgentError as exc:  # the agent's report may quote its payload
            exc.args = (redact_values(str(exc), token),)
            raise
        finally:
            wrong_token = self._listener.forget(sid)
            if not finished:
                if wrong_token:
                    # Else the episode's end (a `timeout`, most often) is all the log says,
                    # and nothing that the agent did post its result.
                    log.warning(
                        "episode %s: ended without a result, but %d result callback(s) for "
                        "it came and were refused (HTTP 401): not posted with "
                        "`Authorization: Bearer <_rollout.callback_token>`; the agent must "
                        "post its result with the episode's callback_token (not the gateway "
                        "session's api_key)",
                        sid,
                        wrong_token,
                    )
                await asyncio.shield(self.stop(sid))

    async def _submit(self, payload: Mapping[str, Any]) -> None:
        try:
            async for attempt in stamina.retry_context(
                on=_retry_wait,
                attempts=SUBMIT_ATTEMPTS,
                timeout=None,  # the episode deadline bounds it
                wait_initial=SUBMIT_WAIT_INITIAL_S,
                wait_max=SUBMIT_WAIT_MAX_S,
                wait_jitter=SUBMIT_WAIT_JITTER_S,
            ):
                with attempt:
                    await self._submit_once(payload)
                    return
        except _TryAgain as exc:
            raise AgentError(
                AGENT_ERROR, f"agent refused the episode {SUBMIT_ATTEMPTS} times: {exc}"
            ) from None

    async def _submit_once(self, payload: Mapping[str, Any]) -> None:
        try:
            with self._in_use.hold():
                async with self._request("POST", self._url, json=payload) as resp:
                    if resp.status < 300:
                        return
                    if resp.status in NOT_STARTED_STATUS:
                        wait = retry_after_seconds(resp.headers.get("Retry-After"))
                        raise _TryAgain(f"HTTP {resp.status}", wait)
                    if resp.status < 400:
                        where = _location(resp.url, resp.headers.get("Location"))
                        raise AgentError(
                            AGENT_ERROR,
                            f"agent answered the episode with HTTP {resp.status}, a redirect to "
                            f"{where}; redirects are not followed, so the agent's headers and "
                            "the session token reach agent.http.url only: set agent.http.url "
                            "to the endpoint itself",
                        )
        # Never connected, so nothing was sent: refused, or no connection within
        # CONNECT_TIMEOUT_S, which is also the wait for a free one of the pool's connections
        # (a burst of slow-to-accept episodes holds them all). ConnectionTimeoutError is a
        # TimeoutError too, hence before the clause below.
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise _TryAgain(describe_error(exc)) from None
        except TimeoutError:  # the request went out; the answer did not come in time
            raise AgentError(
                AGENT_ERROR,
                f"the agent did not answer the episode's submit within {REQUEST_TIMEOUT_S:g}s "
                "(not retried: the agent may have started the episode); answer the POST at "
                "once (202) and run the episode in the background",
            ) from None
        except aiohttp.ClientError as exc:
            raise AgentError(
                AGENT_ERROR,
                f"submit to agent failed: {describe_error(exc)} (not retried: the agent may "
                "have started the episode)",
            ) from None
        raise AgentError(AGENT_ERROR, f"agent refused the episode: HTTP {resp.status}")

    async def _await_result(self, sid: str, fut: asyncio.Future[Any]) -> tuple[Any, str]:
        """The result document, and whether it came by "callback" or by "poll"."""
        errors = 0
        while True:
            done, _ = await asyncio.wait({fut}, timeout=self._spec.poll_interval_seconds)
            if done:
                self._callbacks_seen = True
                return fut.result(), "callback"
            status, doc = await self._poll_once(sid)
            if status == 200:
                self._polled(sid)
                return doc, "poll"
            if 300 <= status < 400:
                raise AgentError(
                    AGENT_ERROR,
                    f"result poll answered HTTP {status}, a redirect, which is not followed "
                    "(the agent's headers reach agent.http.url only): serve GET "
                    "<agent.http.url>/<session id> at the same address",
                )
            errors = 0 if status in (202, 404) else errors + 1
            if errors >= MAX_POLL_ERRORS:
                # Status 0: no answer at all; `doc` then says what went wrong instead.
                last = f"HTTP {status}" if status else str(doc)
                raise AgentError(AGENT_ERROR, f"result poll failed {errors}x ({last})")

    def _polled(self, sid: str) -> None:
        """Said once: a result came by polling while no callback ever did."""
        if self._callbacks_seen or self._poll_warned:
            return
        self._poll_warned = True
        log.warning(
            "episode %s: the result came by polling %s after %gs, and no agent has posted a "
            "result to %s yet; if the agent posts results, it cannot reach that URL (an agent "
            "outside the cluster needs spec.gateway.publicUrl); every episode waits for the "
            "next poll meanwhile",
            sid,
            self._url,
            self._spec.poll_interval_seconds,
            self.callback_url("<session id>"),
        )

    async def _poll_once(self, sid: str) -> tuple[int, Any]:
        """(HTTP status, the result document when 200); (0, what failed) without an answer
        (a timeout, a dropped connection). A whole 200 answer that is not JSON is the agent's
        result, and not a usable one: `bad_result`, as a callback's would be."""
        try:
            with self._in_use.hold():
                async with self._request("GET", f"{self._url}/{sid}") as resp:
                    if resp.status != 200:
                        return resp.status, None
                    body = await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            what = describe_error(exc)
            log.debug("result poll for %s failed: %s", sid, what)
            return 0, what
        try:
            return 200, json.loads(body)
        except ValueError:
            raise AgentError(
                BAD_RESULT,
                f"the status GET answered 200 with {len(body)} bytes that are not JSON: serve "
                "the result document there, or 202/404 while the episode runs",
            ) from None

    async def stop(self, session_id: str) -> None:
        """`DELETE <url>/<session_id>`; idempotent, never raises (an agent that cannot stop
        episodes answers 404 or 405, which is fine)."""
        try:
            async for attempt in stamina.retry_context(
                on=_retry_wait,
                attempts=STOP_ATTEMPTS,
                timeout=STOP_TIMEOUT_S,
                wait_initial=SUBMIT_WAIT_INITIAL_S,
                wait_max=SUBMIT_WAIT_MAX_S,
                wait_jitter=SUBMIT_WAIT_JITTER_S,
            ):
                with attempt:
                    await self._delete_once(session_id)
        except _TryAgain as exc:
            log.debug("stopping agent session %s failed: %s", session_id, exc)

    async def _delete_once(self, sid: str) -> None:
        timeout = aiohttp.ClientTimeout(total=STOP_REQUEST_TIMEOUT_S)
        try:
            async with self._request("DELETE", f"{self._url}/{sid}", timeout=timeout) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise _TryAgain(f"HTTP {resp.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _TryAgain(describe_error(exc)) from None

    def pool_stats(self) -> PoolStats:
        return PoolStats(size=self._pool_size, in_use=self._in_use.value)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self._listener.stop()


def _location(base: URL, location: str | None) -> str:
    """Where a redirect points, without its query, fragment or user info (which may hold
    someone's token), resolved against the request's URL."""
    if not location:
        return "nowhere (no Location header)"
    try:
        url = base.join(URL(location))
        return str(url.with_user(None).with_query(None).with_fragment(None))[:200]
    except ValueError:
        return "an unparseable Location"


def header_env_values(header_envs: Mapping[str, str]) -> dict[str, str]:
    """`headers_from_env` against the real environment."""
    return headers_from_env(header_envs, os.environ)
