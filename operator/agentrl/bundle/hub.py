"""The hub: one Ray actor on the head pod that owns the metrics registry and the gateway.

Prometheus scrapes one fixed port of the head pod (`METRICS_PORT`, via the PodMonitor),
and agents reach the gateway through the head pod's Service, so both must live there
whichever node slime's rollout process runs on. The actor is pinned by the custom Ray
resource `HEAD_RAY_RESOURCE`, which only the head pod advertises (a small fraction of it,
so the gateway could be split into its own actor later), and takes no CPU slot. Rollout
code anywhere finds it by name and pushes `MetricsDelta`s to it.

Gateway wiring (issue 6's `GatewayServer`): `start_gateway(router_url)` builds
`GatewaySettings.from_runtime_config` with a fresh admin token, starts the server on the
hub's event loop with the hub's `BundleMetrics`, and returns `(admin_url, admin_token)`
for the rollout's `GatewayClient`. The import is lazy so the hub runs (metrics only)
where the gateway package or its tokenizer is unavailable.

Once the gateway knows slime's router, the same port also serves `GET /engine-metrics`: every
SGLang engine's own metrics, read through the router's worker list at each scrape
(`engine_metrics`), since the engines' ports are chosen at run time and no PodMonitor could
name them.

The launcher's gang preflight starts the hub before slime does and publishes its result
(`publish_preflight`), which /metrics serves to the operator; a launcher stopping the run
waits until /metrics has been read once (`preflight_read`), since the job's end takes the
hub with it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentrl.api.constants import HEAD_RAY_RESOURCE, METRICS_PORT
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.engine_metrics import ENGINE_METRICS_PATH, EngineMetricsRelay
from agentrl.bundle.metrics import BundleMetrics
from agentrl.slimecmd.checkpoint import TRACKER

log = logging.getLogger("agentrl.hub")

HUB_NAME: Final = "agentrl-hub"
HUB_NAMESPACE: Final = "agentrl"
HEAD_RESOURCE_SHARE: Final = 0.01  # of the head pod's single HEAD_RAY_RESOURCE unit


Key = tuple[str, tuple[str, ...]]  # (BundleMetrics attribute, label values)


@dataclass
class MetricsDelta:
    """Counter increments, gauge values and histogram observations since the last flush."""

    counters: dict[Key, float] = field(default_factory=dict)
    gauges: dict[Key, float] = field(default_factory=dict)
    observations: list[tuple[Key, float]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.counters or self.gauges or self.observations)


def apply_delta(metrics: BundleMetrics, delta: MetricsDelta) -> None:
    """Apply a delta to the registry (runs in the hub)."""
    for (name, labels), value in delta.counters.items():
        metric = getattr(metrics, name)
        (metric.labels(*labels) if labels else metric).inc(value)
    for (name, labels), value in delta.gauges.items():
        metric = getattr(metrics, name)
        (metric.labels(*labels) if labels else metric).set(value)
    for (name, labels), value in delta.observations:
        metric = getattr(metrics, name)
        (metric.labels(*labels) if labels else metric).observe(value)


class Hub:
    """Metrics registry + /metrics server + gateway; the body of the Ray actor."""

    def __init__(
        self, config_json: str | None, host: str, port: int, gateway_host: str = "0.0.0.0"
    ) -> None:
        self.metrics = BundleMetrics()
        self._config = RuntimeConfig.model_validate_json(config_json) if config_json else None
        self._host, self._port = host, port
        self._gateway_host = gateway_host  # 0.0.0.0 in the pod: agents come from outside
        self._runner: web.AppRunner | None = None
        self._gateway: Any = None
        self._admin: tuple[str, str] | None = None
        self._router: str | None = None  # slime's router, once the gateway knows it
        self._relay: EngineMetricsRelay | None = None
        self._relay_http: aiohttp.ClientSession | None = None
        self._preflight_read = False  # /metrics served since the last preflight result

    async def start_metrics(self) -> int:
        """Serve GET /metrics; returns the bound port (idempotent)."""
        if self._runner is None:
            app = web.Application()
            app.router.add_get("/metrics", self._serve_metrics)
            app.router.add_get(ENGINE_METRICS_PATH, self._serve_engine_metrics)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self._host, self._port)
            await site.start()
            sockets = getattr(site._server, "sockets", None)
            if sockets:
                self._port = int(sockets[0].getsockname()[1])
            log.info("hub: metrics on %s:%d/metrics", self._host, self._port)
        return self._port

    async def _serve_metrics(self, _request: web.Request) -> web.Response:
        path = self._config.spec.checkpoint.path if self._config is not None else None
        if path:  # a shared volume may be slow: never on the event loop
            await asyncio.to_thread(read_checkpoint, self.metrics, Path(path))
        body = generate_latest(self.metrics.registry)
        self._preflight_read = True
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def relay_engines(self, router_url: str) -> None:
        """Serve the engines behind slime's router at /engine-metrics from now on."""
        self._router = router_url

    async def _serve_engine_metrics(self, _request: web.Request) -> web.Response:
        body = b""
        if self._router is not None:
            if self._relay is None:
                from agentrl.bundle.gateway.engine import EngineClient

                self._relay_http = aiohttp.ClientSession()
                engines = EngineClient(self._router, self._relay_http).engines
                self._relay = EngineMetricsRelay(engines, self._relay_http)
            body = await self._relay.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def publish_preflight(self, passed: bool, reason: str, message: str) -> None:
        """The launcher's gang preflight result, one series (a retry's replaces it)."""
        self.metrics.preflight.clear()
        result = "passed" if passed else "failed"
        self.metrics.preflight.labels(result, reason, message).set(1)
        self._preflight_read = False

    def preflight_read(self) -> bool:
        """Whether /metrics was served since the last `publish_preflight`."""
        return self._preflight_read

    def push(self, delta: MetricsDelta) -> None:
        apply_delta(self.metrics, delta)

    def drain(self) -> None:
        pass

    async def start_gateway(self, router_url: str) -> tuple[str, str]:
        """Start the model gateway once; (admin URL, admin token) for GatewayClient."""
        if self._admin is None:
            if self._config is None:
                raise RuntimeError("hub was started without a runtime config; no gateway")
            from agentrl.bundle.gateway import GatewayServer, GatewaySettings

            token = secrets.token_urlsafe(32)
            settings = GatewaySettings.from_runtime_config(
                self._config, router_url, host=self._gateway_host, admin_token=token
            )
            server = GatewayServer(settings, self.metrics)
            await server.start()
            self._gateway = server
            # This actor's process now lives as long as the gateway: full collections
            # need not walk what it has loaded (about 40 ms of a stopped event loop each).
            from agentrl.bundle.gateway.memory import freeze_heap

            log.info("hub: gateway up; %d objects of the hub's heap frozen", freeze_heap())
            self.relay_engines(router_url)
            # The rollout may run on another node: give it an address that reaches us.
            host = node_ip() if self._gateway_host == "0.0.0.0" else self._gateway_host
            self._admin = (f"http://{host}:{server.admin_port}", token)
        return self._admin

    async def stop(self) -> None:
        if self._gateway is not None:
            await self._gateway.stop()
            from agentrl.bundle.gateway.memory import thaw_heap

            thaw_heap()
        if self._relay_http is not None:
            await self._relay_http.close()
        if self._runner is not None:
            await self._runner.cleanup()


def read_checkpoint(metrics: BundleMetrics, directory: Path) -> None:
    """Set `agentrl_checkpoint_iteration` from the tracker in `directory`, as each scrape
    does; without a readable iteration the gauge keeps what it had."""
    iteration = checkpoint_iteration(directory)
    if iteration is not None:
        metrics.checkpoint_iteration.set(iteration)


def checkpoint_iteration(directory: Path) -> int | None:
    """The iteration Megatron's tracker file in `directory` names (it rewrites the file after
    each complete save), or None: no save yet, a release checkpoint, or unreadable."""
    try:
        text = (directory / TRACKER).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def node_ip() -> str:
    """This node's address as other pods see it (Ray's view when available)."""
    try:
        import ray.util

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:
        return socket.gethostbyname(socket.gethostname())


def ensure_hub(
    config: RuntimeConfig | None,
    host: str = "0.0.0.0",
    port: int | None = None,
    gateway_host: str = "0.0.0.0",
) -> Any:
    """The hub actor handle: found by name, or created on the head pod (race-free)."""
    import ray

    bind_port = port if port is not None else (config.metrics_port if config else METRICS_PORT)
    actor_cls: Any = ray.remote(Hub)
    handle = actor_cls.options(
        name=HUB_NAME,
        namespace=HUB_NAMESPACE,
        get_if_exists=True,
        lifetime="detached",  # outlives the RolloutManager actor that created it
        num_cpus=0,
        resources={HEAD_RAY_RESOURCE: HEAD_RESOURCE_SHARE},
        max_concurrency=64,  # async actor: scrapes never wait behind a push
    ).remote(config.to_json() if config else None, host, bind_port, gateway_host)
    ray.get(handle.start_metrics.remote())
    return handle


class HubSink:
    """A `MetricsSink` that ships deltas to the hub actor (fire and forget, errors logged)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._last: Any = None

    def push(self, delta: MetricsDelta) -> None:
        import ray

        if self._last is not None:
            # Surface a failed previous push here instead of losing it silently.
            ready, _ = ray.wait([self._last], timeout=0)
            if ready:
                ray.get(ready[0])
        self._last = self._handle.push.remote(delta)

    def drain(self) -> None:
        """Wait until the hub applied every push so far (batch end: metrics are current)."""
        import ray

        if self._last is not None:
            ray.get(self._last)
