"""The gateway's HTTP frontend: per-session OpenAI and Anthropic endpoints, /health, and the
admin API's app (served on a listener of its own by `server.GatewayServer`).

aiohttp with `handler_cancellation=True`, so a client that disconnects cancels its handler,
which aborts the engine request on every worker. One agent cannot stall the others:
- a request body is bounded (`spec.gateway.maxRequestBytes`; 413 past it, refused from its
  Content-Length before a byte is read) and must arrive within `body_timeout_s` (408), read
  before admission so that a slow one holds no slot (at most `READS_PER_SESSION` per session);
- connections are bounded (`connections`: header and idle deadlines, a cap on open ones);
- admission is bounded (`maxInFlight`) and fair per session (`admission`): past the bound
  requests get 429 at once, and a flood only ever pushes back its own session;
- large prompts are rendered off the event loop (`render_pool`).
Malformed input gets a 4xx in the API's error shape, never a 500. No access log; the bearer
tokens never reach a log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentrl.bundle.gateway import anthropic_api, openai_api
from agentrl.bundle.gateway.admin import AdminApi
from agentrl.bundle.gateway.admission import Admission, Ticket, busy
from agentrl.bundle.gateway.callbacks import CallbackRelay
from agentrl.bundle.gateway.chat import (
    CONTEXT_LENGTH_EXCEEDED,
    ApiError,
    ChatRequest,
    ModelOutput,
    context_refusal,
    merge_sampling,
)
from agentrl.bundle.gateway.http1 import CONNECT_TIMEOUT_S
from agentrl.bundle.gateway.memory import LARGE_BYTES, Releaser
from agentrl.bundle.gateway.session_store import (
    Session,
    SessionClosed,
    SessionStore,
    UnknownSession,
)
from agentrl.bundle.gateway.sglang import EngineError
from agentrl.bundle.gateway.streaming import LiveStream, stream_turn
from agentrl.bundle.gateway.turns import OnTokens, TurnRunner
from agentrl.bundle.metrics import BundleMetrics, gateway_code
from agentrl.bundle.session import QuiesceReport

log = logging.getLogger("agentrl.gateway")
READS_PER_SESSION = 8  # bodies one session may be sending at once (its turns run one by one)
FRONTS: dict[str, ModuleType] = {"openai": openai_api, "anthropic": anthropic_api}


def bearer(request: web.Request) -> str | None:
    """The token an agent presents: `Authorization: Bearer` (OpenAI, Claude Code) or `x-api-key`."""
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def too_large(size: int | None, limit: int) -> ApiError:
    what = f"{size} bytes" if size is not None else "the body"
    return ApiError(
        413,
        f"body: {what} is over the gateway's limit of {limit} bytes (spec.gateway."
        "maxRequestBytes); shorten the conversation or raise the limit",
        param="body",
    )


async def read_json(request: web.Request, limit: int, timeout_s: float) -> Any:
    """The request's JSON body, at most `limit` bytes (413 past it, 400 if not JSON), all of
    it within `timeout_s` (408 past it: a client that trickles its body holds a connection,
    never more)."""
    size = request.content_length
    if size is not None and size > limit:
        raise too_large(size, limit)  # refused unread: a huge body costs nothing
    try:  # without a Content-Length (chunked), aiohttp stops reading at client_max_size
        if request.content.is_eof():  # it came with the headers: nothing to wait for
            raw = await request.read()
        else:
            async with asyncio.timeout(timeout_s):
                raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise too_large(None, limit) from exc
    except TimeoutError as exc:
        raise ApiError(
            408,
            f"body: not received within {timeout_s:g} s (GatewaySettings.body_timeout_s)",
            param="body",
        ) from exc
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"body: invalid JSON ({exc})"[:300], param="body") from exc


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


class Frontend:
    """The request path shared by both APIs: auth, admission, parse, run, respond, count."""

    def __init__(
        self,
        store: SessionStore,
        runner: TurnRunner,
        metrics: BundleMetrics,
        *,
        max_in_flight: int,
        max_request_bytes: int,
        model: str,
        keepalive_s: float,
        body_timeout_s: float,
    ) -> None:
        self.store = store
        self.runner = runner
        self.metrics = metrics
        self.body_timeout_s = body_timeout_s
        self.reading: Counter[str] = Counter()  # session -> bodies being read
        self._series: dict[tuple[str, str], tuple[Any, Any]] = {}  # (api, code) -> metrics
        self.admission = Admission(max_in_flight)
        self.releaser = Releaser()
        self.max_request_bytes = max_request_bytes
        self.model = model
        self.keepalive_s = keepalive_s

    @property
    def in_flight(self) -> int:
        return self.admission.total

    async def openai(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "openai", self.serve)

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "anthropic", self.serve)

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        """`POST .../v1/messages/count_tokens` (Claude Code sizes its context with it)."""
        return await self.handle(request, "anthropic", self.count)

    async def models(self, request: web.Request) -> web.Response:
        """`GET .../v1/models`: the model id the agent was told (spec.agent.modelId)."""
        try:
            self.session(request)
        except ApiError as err:
            return json_response(openai_api.error_body(err), err.status)
        model = {"id": self.model, "object": "model", "created": 0, "owned_by": "agentrl"}
        return json_response({"object": "list", "data": [model]})

    async def handle(self, request: web.Request, api: str, serve: Serve) -> web.StreamResponse:
        front = FRONTS[api]
        start = time.perf_counter()
        status = 500
        ticket: Ticket | None = None
        session: Session | None = None
        try:
            session = self.lookup(request)
            self.authorize(session, request)  # before admission: strangers take no slot
            size = request.content_length
            if size is not None and size > self.max_request_bytes:
                raise too_large(size, self.max_request_bytes)  # nor do oversized bodies
            body = await self.read_body(request, session)  # a slow body takes no slot either
            ticket = self.admission.admit(session.sid)
            resp, status = await serve(request, front, session, body, ticket)
            return resp
        except ApiError as err:
            status = err.status
            headers = {"Retry-After": "1"} if status == 429 else None
            return web.Response(
                body=orjson.dumps(front.error_body(err)),
                status=status,
                content_type="application/json",
                headers=headers,
            )
        except asyncio.CancelledError:
            status = 499  # the client went away (or the session was closed); nothing to answer
            raise
        finally:
            if session is not None:
                session.answered(status)
                if ticket is not None:
                    ticket.release()
                    if (request.content_length or 0) >= LARGE_BYTES:
                        session.large = True
                        self.releaser.soon()
            self.tally(api, status, time.perf_counter() - start)

    async def read_body(self, request: web.Request, session: Session) -> Any:
        """The body, read before admission (so a client that trickles it holds no slot), at
        most `READS_PER_SESSION` at once per session (so the bodies a flood has in memory
        stay bounded; the rest get 429 unread)."""
        sid = session.sid
        if self.reading[sid] >= READS_PER_SESSION:
            raise busy(
                f"this session is already sending {READS_PER_SESSION} request bodies; "
                "retry when one of its requests is answered"
            )
        self.reading[sid] += 1
        try:
            return await read_json(request, self.max_request_bytes, self.body_timeout_s)
        finally:
            self.reading[sid] -= 1
            if not self.reading[sid]:
                del self.reading[sid]

    def tally(self, api: str, status: int, seconds: float) -> None:
        """The request in `agentrl_gateway_requests_total` and `_request_seconds`; the
        labelled series are looked up once each (a `labels()` call costs microseconds). A
        status the gateway does not answer with counts as `other` (`gateway_code`)."""
        code = gateway_code(status)
        series = self._series.get((api, code))
        if series is None:
            series = self._series[api, code] = (
                self.metrics.gateway_requests.labels(api, code),
                self.metrics.gateway_request_seconds.labels(api),
            )
        series[0].inc()
        series[1].observe(seconds)

    def session(self, request: web.Request) -> Session:
        """The open session named in the path, if the request carries its token."""
        session = self.lookup(request)
        self.authorize(session, request)
        return session

    def lookup(self, request: web.Request) -> Session:
        """The open session named in the path (404 unknown, 410 closed)."""
        try:
            return self.store.get(request.match_info["sid"])
        except SessionClosed as exc:
            raise ApiError(410, str(exc)) from exc
        except UnknownSession as exc:
            raise ApiError(404, str(exc), kind="not_found_error") from exc

    @staticmethod
    def authorize(session: Session, request: web.Request) -> None:
        if not session.check_token(bearer(request)):
            raise ApiError(401, "invalid or missing session token", kind="authentication_error")

    async def count(
        self, request: web.Request, front: ModuleType, session: Session, body: Any, ticket: Ticket
    ) -> Served:
        if isinstance(body, dict):
            body = {"max_tokens": 1, **body}  # not part of a count request
        req = anthropic_api.parse_request(body)
        await ticket.turn()
        tokens = await self.runner.builder.count(
            req.messages, req.tools, continue_final=req.continue_final
        )
        return served(json_response({"input_tokens": tokens}))

    async def serve(
        self, request: web.Request, front: ModuleType, session: Session, body: Any, ticket: Ticket
    ) -> Served:
        req: ChatRequest = front.parse_request(body)
        merge_sampling(req.sampling, session.sampling_params)  # refusals before any stream
        model = req.model or self.model
        task = asyncio.current_task()
        assert task is not None
        session.tasks.add(task)  # close_session cancels it, which aborts the generation
        try:
            await ticket.turn()  # the session's earlier requests first
            if req.stream:
                writer = front.StreamWriter(model, req.include_usage)
                runner = self.runner
                live = LiveStream(
                    request,
                    writer,
                    runner.renderer,
                    req,
                    tokenizer=runner.tokenizer,
                    stop_ids=runner.stop_ids,
                )
                turn = asyncio.get_running_loop().create_task(
                    self.run_turn(session, req, live.on_tokens)
                )
                return await stream_turn(live, turn, self.keepalive_s)
            out = await self.run_turn(session, req)
        finally:
            session.tasks.discard(task)
        return served(json_response(front.response(out, model)))

    async def run_turn(
        self, session: Session, req: ChatRequest, on_tokens: OnTokens | None = None
    ) -> ModelOutput:
        try:
            return await self._run_turn(session, req, on_tokens)
        except ApiError as err:  # streamed or not: the session remembers what it was told
            session.refused(err.status, err.code, err.message)
            raise

    async def _run_turn(
        self, session: Session, req: ChatRequest, on_tokens: OnTokens | None
    ) -> ModelOutput:
        try:
            return await self.runner.run(session, req, on_tokens)
        except EngineError as exc:
            log.warning("gateway: session %s: engine call failed: %s", session.sid, exc)
            if exc.status == 400:  # the engine refused the input (e.g. longer than the context)
                code = CONTEXT_LENGTH_EXCEEDED if context_refusal(str(exc)) else None
                raise ApiError(400, f"model engine refused the request: {exc}", code=code) from exc
            raise ApiError(502, f"model engine error: {exc}", kind="api_error") from exc
        except TimeoutError as exc:
            log.warning("gateway: session %s: engine call timed out; aborted", session.sid)
            raise ApiError(
                504, "model engine timed out; the request was aborted", kind="api_error"
            ) from exc


# A response and the status to count: a stream's is decided in-band, after its 200 went out.
Served = tuple[web.StreamResponse, int]
Serve = Callable[[web.Request, ModuleType, Session, Any, Ticket], Awaitable[Served]]


def served(resp: web.StreamResponse) -> Served:
    return resp, resp.status


def build_app(frontend: Frontend, store: SessionStore, callbacks: CallbackRelay) -> web.Application:
    """The agent API and HTTP agents' result callbacks: what the gateway Service (maybe a
    LoadBalancer) exposes, and nothing else."""
    app = web.Application(client_max_size=frontend.max_request_bytes)
    app.router.add_post("/sessions/{sid}/v1/chat/completions", frontend.openai)
    app.router.add_post("/sessions/{sid}/v1/messages", frontend.anthropic)
    app.router.add_post("/sessions/{sid}/v1/messages/count_tokens", frontend.count_tokens)
    app.router.add_get("/sessions/{sid}/v1/models", frontend.models)
    app.router.add_get("/health", _health(frontend, store))
    callbacks.add_routes(app)
    return app


def _health(
    frontend: Frontend, store: SessionStore
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def health(_: web.Request) -> web.Response:
        return json_response(
            {"status": "ok", "sessions": len(store), "in_flight": frontend.in_flight}
        )

    return health


def build_admin_app(
    frontend: Frontend,
    store: SessionStore,
    admin_token: str,
    session_url: Callable[[str], str],
    quiesce: Callable[[float], Awaitable[QuiesceReport]],
    *,
    callbacks: CallbackRelay,
) -> web.Application:
    """The admin API (sessions, turns, engine quiesce, where callbacks go) for the rollout's
    `GatewayClient`, on a listener of its own that no Service selects, behind its own
    token."""
    app = web.Application(client_max_size=frontend.max_request_bytes)
    app.router.add_get("/health", _health(frontend, store))
    admin = AdminApi(
        store,
        admin_token,
        session_url,
        quiesce,
        max_body=frontend.max_request_bytes,
        releaser=frontend.releaser,
        callbacks=callbacks,
    )
    app.router.add_routes(admin.routes())
    return app


def new_http_session(max_in_flight: int) -> aiohttp.ClientSession:
    """One keep-alive pool to the router, sized to the admission bound so it never churns."""
    connector = aiohttp.TCPConnector(
        limit=max_in_flight + 16, limit_per_host=0, keepalive_timeout=75, ttl_dns_cache=300
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
    )
