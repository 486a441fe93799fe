"""SGLang's own metrics, relayed from every engine through the head pod's metrics port.

slime starts each SGLang engine with `enable_metrics` on (both supported rows set it in
`_compute_server_args`, whatever the flags say), so each engine serves Prometheus text at
`/metrics` on its HTTP port. Those ports are picked at run time on each GPU worker
(`_allocate_rollout_engine_addr_and_ports_normal`: the first free ports from 15000), so no
PodMonitor can name them. The gateway already lists the engines through slime's router, so
the hub serves `GET /engine-metrics` on the head pod's fixed metrics port: at each scrape it
reads every engine's `/metrics` concurrently, adds an `engine` label (`host:port`) to every
sample, and returns one exposition. The PodMonitor scrapes it beside `/metrics` and adds the
experiment and namespace labels as for the bundle's own series.

An engine that does not answer in time is left out of that scrape, and counted in
`agentrl_engine_metrics_errors_total{engine}`; the others are served. A family two engines
declare differently (an SGLang upgrade half rolled out) keeps the first declaration.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final

import aiohttp
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger("agentrl.engine_metrics")

ENGINE_LABEL: Final = "engine"
ENGINE_METRICS_PATH: Final = "/engine-metrics"
SCRAPE_TIMEOUT_S: Final = 5.0  # within the PodMonitor's default scrapeTimeout (10s)


def engine_name(url: str) -> str:
    """`host:port` of an engine URL (`http://10.0.0.7:15000` -> `10.0.0.7:15000`)."""
    return url.split("://", 1)[-1].rstrip("/")


def merge(texts: Mapping[str, str]) -> list[Metric]:
    """The families of every engine's exposition, each sample labelled with its engine."""
    families: dict[str, Metric] = {}
    for engine, text in texts.items():
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError as err:  # one malformed engine must not hide the others
            log.warning("engine metrics of %s not parseable: %s", engine, err)
            continue
        for family in parsed:
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            elif merged.type != family.type:
                continue
            for sample in family.samples:
                labels = {**sample.labels, ENGINE_LABEL: engine}
                merged.add_sample(sample.name, labels, sample.value, sample.timestamp)
    return list(families.values())


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def exposition(families: Iterable[Metric]) -> bytes:
    """Prometheus text format of `families` (prometheus_client's own writer)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


class EngineMetricsRelay:
    """Reads every engine's `/metrics` and serves them as one exposition."""

    def __init__(
        self,
        engines: Callable[[], Awaitable[Sequence[str]]],
        http: aiohttp.ClientSession,
        timeout_s: float = SCRAPE_TIMEOUT_S,
    ) -> None:
        self._engines, self._http = engines, http
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._registry = CollectorRegistry()
        self.errors = Counter(
            "agentrl_engine_metrics_errors",
            "Engine /metrics reads that failed or timed out, by engine (host:port).",
            [ENGINE_LABEL],
            registry=self._registry,
        )

    async def render(self) -> bytes:
        urls = await self._engines()
        texts = await asyncio.gather(*(self._read(url) for url in urls))
        by_engine = {engine_name(u): t for u, t in zip(urls, texts, strict=True) if t is not None}
        return exposition(merge(by_engine)) + generate_latest(self._registry)

    async def _read(self, url: str) -> str | None:
        try:
            async with self._http.get(url.rstrip("/") + "/metrics", timeout=self._timeout) as r:
                if r.status == 200:
                    return await r.text()
                log.info("engine metrics of %s: HTTP %d", url, r.status)
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("engine metrics of %s not read: %s", url, err)
        self.errors.labels(engine_name(url)).inc()
        return None
