"""Bounded connections: a deadline for a request's headers, an idle keep-alive timeout and a
cap on open connections, on every listener of the gateway.

aiohttp alone closes a connection only after `keepalive_timeout` (3,630 s by default) and
has no deadline for headers: 1,500 connections that never finished their headers were all
still open after 30 s, and 300 idle keep-alive ones after 200 s. Here:

- a request's headers must arrive within `header_timeout_s` of its first byte (of the
  connection's opening, for its first request), else the connection is closed;
- a connection idle between requests is closed after `idle_timeout_s`, longer than the
  agent SDKs keep an idle pooled connection (httpx 5 s, aiohttp 15 s), so a client never
  reuses one the gateway is closing;
- at most `max_connections` are open: past it a new connection evicts the one that has waited
  longest for a request (a slow or idle client), and is refused only when every connection
  has a request in progress.

Body reads have their own deadline, in the request handler (`frontend.read_json`).
The hooks are aiohttp's request handler (its `_waiter`/`_messages`, the state its own
keep-alive timer reads), subclassed; tests/bundle/gateway/test_gateway_connections.py pins
the behaviour on the installed aiohttp.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler


@dataclass(frozen=True)
class Limits:
    header_timeout_s: float
    idle_timeout_s: float
    max_connections: int


class ConnectionGuard:
    """One listener's open connections, those waiting for a request oldest first, and what
    was closed and why."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open: set[RequestHandler] = set()
        self.idle: OrderedDict[RequestHandler, None] = OrderedDict()
        self.refused = 0  # new connections closed: every open one had a request in progress
        self.evicted = 0  # waiting connections closed to make room for a new one
        self.late_headers = 0  # closed: a request's headers did not arrive in time

    def admit(self, handler: RequestHandler) -> bool:
        if len(self.open) >= self.limits.max_connections:
            if not self.idle:
                self.refused += 1
                return False
            oldest, _ = self.idle.popitem(last=False)
            self.open.discard(oldest)
            self.evicted += 1
            oldest.force_close()
        self.open.add(handler)
        self.idle[handler] = None
        return True

    def waiting(self, handler: RequestHandler) -> None:
        if handler in self.open:
            self.idle[handler] = None
            self.idle.move_to_end(handler)

    def busy(self, handler: RequestHandler) -> None:
        self.idle.pop(handler, None)

    def forget(self, handler: RequestHandler) -> None:
        self.open.discard(handler)
        self.idle.pop(handler, None)


class _Handler(RequestHandler):
    """aiohttp's request handler, with a deadline for a request's headers and its place in
    the guard's books."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._headers_due: asyncio.TimerHandle | None = None
        self._busy = False  # a request's headers arrived; until its response is finished

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._guard.admit(self):
            self.force_close()
            return
        self._await_headers()  # a connection that never sends a request is a slow one

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.forget(self)
        self._stop_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._busy:
            return  # body bytes: their deadline is the request handler's
        waiter = self._waiter
        if self._messages or (waiter is not None and waiter.done()):
            self._busy = True  # headers complete: the request is being handled
            self._stop_clock()
            self._guard.busy(self)
        elif data and self._headers_due is None:
            self._await_headers()  # a new request began on an idle connection

    async def finish_response(self, *args: Any, **kwargs: Any) -> Any:
        out = await super().finish_response(*args, **kwargs)
        if not self._messages:  # a pipelined request would already be parsed
            self._busy = False
            self._guard.waiting(self)
        return out

    def _await_headers(self) -> None:
        self._stop_clock()
        self._headers_due = self._loop.call_later(
            self._guard.limits.header_timeout_s, self._headers_late
        )

    def _stop_clock(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        self._headers_due = None
        if not self._busy:
            self._guard.late_headers += 1
            self.force_close()


class _Server(web.Server):
    """aiohttp's low-level server, making guarded request handlers."""

    def __init__(self, base: web.Server, guard: ConnectionGuard) -> None:
        super().__init__(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
        self.guard = guard

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, guard=self.guard, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """`web.AppRunner` whose connections are bounded by `limits` (see the module docstring)."""

    def __init__(self, app: web.Application, limits: Limits, **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=limits.idle_timeout_s, **kwargs)
        self.guard = ConnectionGuard(limits)

    async def _make_server(self) -> web.Server:
        return _Server(await super()._make_server(), self.guard)
