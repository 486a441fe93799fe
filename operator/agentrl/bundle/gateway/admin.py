"""The admin API the rollout function uses over HTTP (through `GatewayClient`).

Authenticated by the admin token, separately from the agents' per-session tokens, so an
agent can never open, read or close another episode's session.

    POST   /admin/sessions {"session_id", "sampling_params"}
                                        -> 201 {session_id, base_url, token}
    GET    /admin/sessions/{sid}/turns  -> {"turns": [{prompt_ids, completion_ids, logprobs,
                                                    finish_reason, weight_version}]}
                                           (weight_version: the engine's, or null; a call
                                           whose prompt filled the context: finish_reason
                                           "context_full", no completion, as prompt_ids
                                           the conversation it continued)
    GET    /admin/sessions/{sid}/context_full
                                        -> {calls, prompt_tokens, context_length, limit}
                                           (calls whose prompt filled the context: nothing
                                           sampled; limit: "context", "kv_cache" or null)
    DELETE /admin/sessions/{sid}        -> 204 (idempotent)
    POST   /admin/engines/quiesce {"timeout_s"}
                                        -> 200 {idle, in_flight, engine_requests, workers}
                                           (batch end: abort everything, wait until idle)
    PUT    /admin/callbacks {"target"}  -> 200 {callback_base} (where agents' result callbacks
                                           go, and the URL agents post them under: callbacks.py)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from agentrl.bundle.gateway.callbacks import CallbackRelay
from agentrl.bundle.gateway.memory import Releaser
from agentrl.bundle.gateway.session_store import (
    DuplicateSession,
    SessionClosed,
    SessionStore,
    UnknownSession,
)
from agentrl.bundle.gateway.token_view import as_list
from agentrl.bundle.session import QuiesceReport, SessionError, secret_matches

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.Response(
        body=orjson.dumps({"error": {"message": message, "code": status}}),
        status=status,
        content_type="application/json",
    )


MAX_QUIESCE_S = 600.0


class _TooLarge(Exception):
    pass


async def _body(request: web.Request, limit: int) -> Any:
    """The JSON body (_INVALID when it is not JSON); _TooLarge past `limit` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise _TooLarge
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise _TooLarge from exc
    try:
        return orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        return _INVALID


_INVALID = object()


class AdminApi:
    def __init__(
        self,
        store: SessionStore,
        admin_token: str,
        session_url: Callable[[str], str],
        quiesce: Callable[[float], Awaitable[QuiesceReport]],
        *,
        max_body: int,
        callbacks: CallbackRelay,
        releaser: Releaser | None = None,
    ):
        self.releaser = releaser
        self.callbacks = callbacks
        self.store = store
        self.max_body = max_body  # the gateway's maxRequestBytes (admin bodies are small)
        self.expected = "Bearer " + admin_token
        self.session_url = session_url
        self.quiesce_engines = quiesce

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/admin/sessions", self.guarded(self.create)),
            web.get("/admin/sessions/{sid}/turns", self.guarded(self.turns)),
            web.get("/admin/sessions/{sid}/context_full", self.guarded(self.context_full)),
            web.delete("/admin/sessions/{sid}", self.guarded(self.close)),
            web.post("/admin/engines/quiesce", self.guarded(self.quiesce)),
            web.put("/admin/callbacks", self.guarded(self.relay_callbacks)),
        ]

    def guarded(self, handler: Handler) -> Handler:
        """Admin token checked in constant time; session errors mapped to statuses."""

        async def wrapper(request: web.Request) -> web.StreamResponse:
            if not secret_matches(request.headers.get("Authorization"), self.expected):
                return _error(401, "admin API: invalid or missing admin token")
            try:
                return await handler(request)
            except _TooLarge:
                return _error(413, "body: over the gateway's limit (spec.gateway.maxRequestBytes)")
            except SessionClosed as exc:
                return _error(410, str(exc))
            except UnknownSession as exc:
                return _error(404, str(exc))

        return wrapper

    async def create(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request, self.max_body)
        if body is _INVALID:
            return _error(400, "body: invalid JSON")
        sid = body.get("session_id") if isinstance(body, dict) else None
        params = body.get("sampling_params", {}) if isinstance(body, dict) else None
        if not isinstance(sid, str) or not isinstance(params, dict):
            return _error(400, 'body must be {"session_id": str, "sampling_params": object}')
        try:
            session = self.store.create(sid, params)
        except SessionError as exc:
            return _error(409 if isinstance(exc, DuplicateSession) else 400, str(exc))
        payload = {"session_id": sid, "base_url": self.session_url(sid), "token": session.token}
        return web.Response(body=orjson.dumps(payload), status=201, content_type="application/json")

    async def turns(self, request: web.Request) -> web.StreamResponse:
        out = [
            {
                "prompt_ids": as_list(t.prompt_ids),
                "completion_ids": as_list(t.completion_ids),
                "logprobs": None if t.logprobs is None else as_list(t.logprobs),
                "finish_reason": t.finish_reason,
                "weight_version": t.weight_version,
            }
            for t in self.store.turns(request.match_info["sid"])
        ]
        return web.Response(body=orjson.dumps({"turns": out}), content_type="application/json")

    async def context_full(self, request: web.Request) -> web.StreamResponse:
        session = self.store.get(request.match_info["sid"])
        payload = {
            "calls": session.context_full,
            "prompt_tokens": session.context_full_tokens,
            "context_length": session.context_length,
            "limit": session.context_limit,
        }
        return web.Response(body=orjson.dumps(payload), content_type="application/json")

    async def close(self, request: web.Request) -> web.StreamResponse:
        session = self.store.close(request.match_info["sid"])
        if session is not None and session.large and self.releaser is not None:
            self.releaser.soon()  # its turns were large: give their memory back
        return web.Response(status=204)

    async def relay_callbacks(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request, self.max_body)
        target = body.get("target") if isinstance(body, dict) else None
        try:
            base = await self.callbacks.relay_callbacks_to(target)
        except ValueError as exc:
            return _error(400, f'body must be {{"target": "http(s)://host:port"}}: {exc}')
        return web.Response(
            body=orjson.dumps({"callback_base": base}), content_type="application/json"
        )

    async def quiesce(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request, self.max_body)
        if body is _INVALID:
            return _error(400, "body: invalid JSON")
        timeout = body.get("timeout_s") if isinstance(body, dict) else None
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_QUIESCE_S
            or math.isnan(timeout)
        ):
            return _error(400, f'body must be {{"timeout_s": seconds in (0, {MAX_QUIESCE_S:g}]}}')
        report = await self.quiesce_engines(float(timeout))
        return web.Response(
            body=orjson.dumps(dataclasses.asdict(report)), content_type="application/json"
        )
