"""The gateway's HTTP service: per-session OpenAI and Anthropic endpoints, admin API, /health.

aiohttp with `handler_cancellation=True`, so a client that disconnects cancels its handler,
which aborts the engine request on every worker. Admission is bounded (`max_in_flight`):
past it, requests get 429 at once instead of queueing without limit. No access log; the
bearer tokens never reach a log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from agentrl.bundle.gateway import anthropic_api, openai_api
from agentrl.bundle.gateway.admin import AdminApi
from agentrl.bundle.gateway.chat import ApiError, ChatRequest, ModelOutput, merge_sampling
from agentrl.bundle.gateway.sessions import Session, SessionClosed, SessionStore, UnknownSession
from agentrl.bundle.gateway.sglang import EngineError
from agentrl.bundle.gateway.streaming import LiveStream, stream_turn
from agentrl.bundle.gateway.turns import OnTokens, TurnRunner
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.session import QuiesceReport

log = logging.getLogger("agentrl.gateway")
FRONTS: dict[str, ModuleType] = {"openai": openai_api, "anthropic": anthropic_api}


def bearer(request: web.Request) -> str | None:
    """The token an agent presents: `Authorization: Bearer` (OpenAI, Claude Code) or `x-api-key`."""
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


async def read_json(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"body: invalid JSON ({exc})", param="body") from exc


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


class Frontend:
    """The request path shared by both APIs: admission, auth, parse, run, respond, count."""

    def __init__(
        self,
        store: SessionStore,
        runner: TurnRunner,
        metrics: BundleMetrics,
        *,
        max_in_flight: int,
        model: str,
        keepalive_s: float = 10.0,
    ) -> None:
        self.store = store
        self.runner = runner
        self.metrics = metrics
        self.max_in_flight = max_in_flight
        self.model = model
        self.in_flight = 0
        self.keepalive_s = keepalive_s

    async def openai(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "openai")

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "anthropic")

    async def models(self, request: web.Request) -> web.Response:
        """`GET .../v1/models`: some SDK programs look the model up before calling it."""
        try:
            self.session(request)
        except ApiError as err:
            return json_response(openai_api.error_body(err), err.status)
        model = {"id": self.model, "object": "model", "created": 0, "owned_by": "agentrl"}
        return json_response({"object": "list", "data": [model]})

    async def count_tokens(self, request: web.Request) -> web.Response:
        """`POST .../v1/messages/count_tokens` (Claude Code sizes its context with it)."""
        try:
            self.session(request)
            body = await read_json(request)
            if isinstance(body, dict):
                body = {"max_tokens": 1, **body}  # not part of a count request
            req = anthropic_api.parse_request(body)
        except ApiError as err:
            return json_response(anthropic_api.error_body(err), err.status)
        ids = self.runner.builder.render(req.messages, req.tools)
        return json_response({"input_tokens": len(ids)})

    async def handle(self, request: web.Request, api: str) -> web.StreamResponse:
        front = FRONTS[api]
        start = time.perf_counter()
        status = 500
        try:
            if self.in_flight >= self.max_in_flight:
                raise ApiError(
                    429,
                    f"gateway busy: {self.in_flight} requests in flight; retry later",
                    kind="rate_limit_error",
                )
            self.in_flight += 1
            try:
                resp = await self.serve(request, front)
            finally:
                self.in_flight -= 1
            status = request.get("status", resp.status)  # in-band stream errors count as such
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
            self.metrics.gateway_requests.labels(api, str(status)).inc()
            self.metrics.gateway_request_seconds.labels(api).observe(time.perf_counter() - start)

    def session(self, request: web.Request) -> Session:
        """The open session named in the path, if the request carries its token."""
        try:
            session = self.store.get(request.match_info["sid"])
        except SessionClosed as exc:
            raise ApiError(410, str(exc)) from exc
        except UnknownSession as exc:
            raise ApiError(404, str(exc), kind="not_found_error") from exc
        if not session.check_token(bearer(request)):
            raise ApiError(401, "invalid or missing session token", kind="authentication_error")
        return session

    async def serve(self, request: web.Request, front: ModuleType) -> web.StreamResponse:
        session = self.session(request)
        req: ChatRequest = front.parse_request(await read_json(request))
        merge_sampling(req.sampling, session.sampling_params)  # refusals before any stream
        model = req.model or self.model
        task = asyncio.current_task()
        assert task is not None
        session.tasks.add(task)  # close_session cancels it, which aborts the generation
        try:
            if req.stream:
                writer = front.StreamWriter(model, req.include_usage)
                live = LiveStream(request, writer, self.runner.renderer, req)
                turn = asyncio.get_running_loop().create_task(
                    self.run_turn(session, req, live.on_tokens)
                )
                resp, status = await stream_turn(live, turn, self.keepalive_s)
                request["status"] = status
                return resp
            out = await self.run_turn(session, req)
        finally:
            session.tasks.discard(task)
        return json_response(front.response(out, model))

    async def run_turn(
        self, session: Session, req: ChatRequest, on_tokens: OnTokens | None = None
    ) -> ModelOutput:
        try:
            return await self.runner.run(session, req, on_tokens)
        except EngineError as exc:
            log.warning("gateway: session %s: engine call failed: %s", session.sid, exc)
            if exc.status == 400:  # the engine refused the input (e.g. longer than the context)
                raise ApiError(400, f"model engine refused the request: {exc}") from exc
            raise ApiError(502, f"model engine error: {exc}", kind="api_error") from exc
        except TimeoutError as exc:
            log.warning("gateway: session %s: engine call timed out; aborted", session.sid)
            raise ApiError(
                504, "model engine timed out; the request was aborted", kind="api_error"
            ) from exc


def build_app(
    frontend: Frontend,
    store: SessionStore,
    admin_token: str,
    session_url: Callable[[str], str],
    quiesce: Callable[[float], Awaitable[QuiesceReport]],
) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)  # long agent histories are large
    app.router.add_post("/sessions/{sid}/v1/chat/completions", frontend.openai)
    app.router.add_post("/sessions/{sid}/v1/messages", frontend.anthropic)
    app.router.add_post("/sessions/{sid}/v1/messages/count_tokens", frontend.count_tokens)
    app.router.add_get("/sessions/{sid}/v1/models", frontend.models)

    async def health(_: web.Request) -> web.Response:
        return json_response(
            {"status": "ok", "sessions": len(store), "in_flight": frontend.in_flight}
        )

    app.router.add_get("/health", health)
    app.router.add_routes(AdminApi(store, admin_token, session_url, quiesce).routes())
    return app


def new_http_session(max_in_flight: int) -> aiohttp.ClientSession:
    """One keep-alive pool to the router, sized to the admission bound so it never churns."""
    connector = aiohttp.TCPConnector(
        limit=max_in_flight + 16, limit_per_host=0, keepalive_timeout=75, ttl_dns_cache=300
    )
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
    )
