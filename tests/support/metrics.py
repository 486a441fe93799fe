"""Metrics test doubles: a sink straight into a local registry, and reading a registry back.

Production ships `MetricsDelta`s to the hub actor (`agentrl.bundle.hub.HubSink`); tests and
benchmarks apply them to a `BundleMetrics` in their own process instead, then read the
Prometheus text exposition the hub's /metrics endpoint would serve.
"""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest

from agentrl.bundle.hub import MetricsDelta, apply_delta
from agentrl.bundle.metrics import BundleMetrics

__all__ = ["LocalSink", "exposition", "scrape"]


class LocalSink:
    """A `MetricsSink` that applies every delta to a registry in this process."""

    def __init__(self, metrics: BundleMetrics) -> None:
        self.metrics = metrics

    def push(self, delta: MetricsDelta) -> None:
        apply_delta(self.metrics, delta)

    def drain(self) -> None:
        pass


def exposition(metrics: BundleMetrics) -> str:
    """The registry as the hub serves it at /metrics."""
    return generate_latest(metrics.registry).decode()


def scrape(port: int, host: str = "127.0.0.1") -> str:
    """GET /metrics from a running hub."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        return str(resp.read().decode())
