"""`GatewayServer`: the gateway as one object the hub starts, stops and calls in process.

It implements the `GatewaySessions` and `CallbackRouting` protocols directly (the hub's own
rollout code can use it without HTTP) and serves the same operations over the admin API
for `GatewayClient`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from agentrl.bundle.gateway.callbacks import CallbackRelay
from agentrl.bundle.gateway.connections import ConnectionGuard, GuardedRunner, Limits
from agentrl.bundle.gateway.context import checkpoint_context_length
from agentrl.bundle.gateway.engine import EngineClient
from agentrl.bundle.gateway.frontend import Frontend, build_admin_app, build_app, new_http_session
from agentrl.bundle.gateway.hub import hub_answers, start_answer
from agentrl.bundle.gateway.prompt import PromptBuilder
from agentrl.bundle.gateway.render_pool import PromptRenderer, RenderPool, WorkerConfig
from agentrl.bundle.gateway.session_store import SessionStore
from agentrl.bundle.gateway.settings import GatewaySettings
from agentrl.bundle.gateway.tokenizer import load_renderer
from agentrl.bundle.gateway.turns import TurnRunner
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.session import ContextFullCalls, QuiesceReport, SessionHandle
from agentrl.bundle.traces import Turn

log = logging.getLogger("agentrl.gateway")


def configure_logging(level: str) -> None:
    """Quiet by default: our logger at `level`, aiohttp's chatter never below warning."""
    numeric = getattr(logging, level.upper())
    logging.getLogger("agentrl.gateway").setLevel(numeric)
    for name in ("aiohttp.access", "aiohttp.server", "aiohttp.web", "aiohttp.client"):
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))


class GatewayServer:
    def __init__(self, settings: GatewaySettings, metrics: BundleMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = SessionStore()
        self.callbacks = CallbackRelay(self.store, lambda: self.url, metrics)
        self._runners: list[web.AppRunner] = []
        self._http: aiohttp.ClientSession | None = None
        self._engine: EngineClient | None = None
        self._pool: RenderPool | None = None
        self.frontend: Frontend | None = None
        self.port = settings.bind_port
        self.admin_port = settings.admin_port

    @property
    def context_length(self) -> int | None:
        """The model's context: the spec's, else config.json's (once started), else the one
        the engine named refusing a call (`TurnRunner.learn_context`); None: unknown."""
        return None if self.frontend is None else self.frontend.runner.context_length

    @property
    def guards(self) -> list[ConnectionGuard]:
        """The connection books of the agent listener, then the admin listener."""
        return [r.guard for r in self._runners if isinstance(r, GuardedRunner)]

    @property
    def url(self) -> str:
        """Base URL agents use (public URL if configured, else the bound address)."""
        if self.settings.public_base_url:
            return self.settings.public_base_url.rstrip("/")
        return str(URL.build(scheme="http", host=self.settings.host, port=self.port))

    def session_url(self, sid: str) -> str:
        return f"{self.url}/sessions/{sid}/v1"

    async def start(self) -> None:
        s = self.settings
        spec = s.spec
        configure_logging(spec.log_level)
        with hub_answers() as answers:  # a hub id's tokenizer and config.json: asked once
            tokenizer, renderer = await asyncio.to_thread(
                load_renderer,
                s.tokenizer_path,
                s.renderer_family,
                s.tool_call_parser,
                s.reasoning_parser,
            )
            context = s.context_length or await asyncio.to_thread(
                checkpoint_context_length, s.tokenizer_path
            )
        # Workers start on the first large prompt (most test gateways never see one).
        self._pool = RenderPool(
            WorkerConfig(
                s.tokenizer_path,
                s.renderer_family,
                s.tool_call_parser,
                s.reasoning_parser,
                start_answer(answers),  # workers load from the cache, the hub not asked again
            ),
            s.render_workers,
        )
        self._http = new_http_session(spec.max_in_flight)
        self._engine = EngineClient(s.router_url, self._http)
        turns = TurnRunner(
            PromptBuilder(
                PromptRenderer(renderer, self._pool, max_tokens=context),
                spec.cumulative_token_mode,
            ),
            self._engine,
            self.metrics,
            s.request_timeout_s,
            tokenizer=tokenizer,
            context_length=context,
            stream_interval=s.stream_interval,
        )
        frontend = Frontend(
            self.store,
            turns,
            self.metrics,
            max_in_flight=spec.max_in_flight,
            max_request_bytes=spec.max_request_bytes,
            model=s.model_id,
            keepalive_s=s.stream_keepalive_s,
            body_timeout_s=s.body_timeout_s,
        )
        self.frontend = frontend
        self.port = await self._serve(build_app(frontend, self.store, self.callbacks), s.bind_port)
        admin = build_admin_app(
            frontend,
            self.store,
            s.admin_token,
            self.session_url,
            self.quiesce_engines,
            callbacks=self.callbacks,
        )
        self.admin_port = await self._serve(admin, s.admin_port)
        log.info("gateway: agent API on %s:%d, admin API on port %d (router %s)",
                 s.host, self.port, self.admin_port, s.router_url)  # fmt: skip

    async def _serve(self, app: web.Application, port: int) -> int:
        """Serve `app` on the settings' host and `port`; the port bound (0: the OS picks)."""
        s = self.settings
        limits = Limits(s.header_timeout_s, s.idle_timeout_s, s.max_connections)
        runner = GuardedRunner(app, limits, handler_cancellation=True, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, self.settings.host, port, backlog=4096)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        # Closing cancels the sessions' handlers, which aborts their engine requests; the
        # agent port's shutdown below waits for handlers, so this comes first, and a result
        # arriving meanwhile is the stop's (`stopping`), not an unknown session's.
        self.callbacks.stop_taking(self.store.close_all())
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self._engine is not None:
            await self._engine.drain_aborts()
            self._engine.close()
        if self._pool is not None:
            await self._pool.close()
        if self.frontend is not None:
            await self.frontend.releaser.close()
        if self._http is not None:
            await self._http.close()
        await self.callbacks.close()

    # GatewaySessions, in process.
    async def create_session(
        self, session_id: str, sampling_params: Mapping[str, Any]
    ) -> SessionHandle:
        session = self.store.create(session_id, sampling_params)
        return SessionHandle(
            session_id=session_id, base_url=self.session_url(session_id), token=session.token
        )

    async def get_turns(self, session_id: str) -> Sequence[Turn]:
        return self.store.turns(session_id)

    async def context_full(self, session_id: str) -> ContextFullCalls:
        s = self.store.get(session_id)
        return ContextFullCalls(
            s.context_full, s.context_full_tokens, s.context_length, s.context_limit
        )

    async def close_session(self, session_id: str) -> None:
        session = self.store.close(session_id)
        if session is not None and session.large and self.frontend is not None:
            self.frontend.releaser.soon()

    # CallbackRouting, in process.
    async def relay_callbacks_to(self, target: str) -> str:
        return await self.callbacks.relay_callbacks_to(target)

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        if self._engine is None:
            raise RuntimeError("gateway not started")
        return await self._engine.quiesce(timeout_s)  # the rollout logs a timeout (once)
