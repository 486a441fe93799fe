"""Fixtures for the gateway tests: a real tokenizer, stub SGLang workers behind a stub router,
and a started `GatewayServer` pointed at them."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # so tests.support is importable as in the benchmarks
    sys.path.insert(0, str(ROOT))

from agentrl.bundle.gateway import GatewayServer, GatewaySettings  # noqa: E402
from agentrl.bundle.gateway.tokenizer import build_renderer, load_tokenizer  # noqa: E402
from agentrl.bundle.metrics import BundleMetrics  # noqa: E402
from tests.support.sglang_stub import StubEngine, StubRouter  # noqa: E402
from tests.support.tiny_tokenizer import write_checkpoint  # noqa: E402

N_WORKERS = 3


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def tok(checkpoint: Path) -> Any:
    return load_tokenizer(str(checkpoint))


@pytest.fixture(scope="session")
def renderer(tok: Any) -> Any:
    return build_renderer(tok, "qwen3")


@dataclass
class Cluster:
    engines: list[StubEngine]
    router: StubRouter
    metrics: BundleMetrics = field(default_factory=BundleMetrics)

    def all_requests(self) -> list[dict[str, Any]]:
        return [r for e in self.engines for r in e.requests]

    def sampled(self, rid: str) -> list[int]:
        for e in self.engines:
            if rid in e.sampled:
                return e.sampled[rid]
        raise KeyError(rid)

    def set(self, **attrs: Any) -> None:
        for e in self.engines:
            for k, v in attrs.items():
                setattr(e, k, v)


@pytest.fixture
async def cluster(tok: Any) -> AsyncIterator[Cluster]:
    engines = [StubEngine(vocab_size=len(tok.get_vocab())) for _ in range(N_WORKERS)]
    urls = [await e.start() for e in engines]
    router = StubRouter(urls)
    await router.start()
    yield Cluster(engines, router)
    await router.stop()
    for e in engines:
        await e.stop()


def settings_for(cluster: Cluster, checkpoint: Path, **overrides: Any) -> GatewaySettings:
    base: dict[str, Any] = {
        "router_url": cluster.router.url,
        "tokenizer_path": str(checkpoint),
        "renderer_family": "qwen3",
        "port": 0,
        "admin_token": "admin-secret",
    }
    return GatewaySettings(**{**base, **overrides})


@pytest.fixture
async def gateway(cluster: Cluster, checkpoint: Path, request: pytest.FixtureRequest) -> AsyncIterator[GatewayServer]:
    """A started gateway; a test can pass settings overrides with @pytest.mark.gateway(...)."""
    marker = request.node.get_closest_marker("gateway")
    overrides = dict(marker.kwargs) if marker else {}
    server = GatewayServer(settings_for(cluster, checkpoint, **overrides), cluster.metrics)
    await server.start()
    yield server
    await server.stop()


def metric(cluster: Cluster, name: str, **labels: str) -> float:
    value = cluster.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else float(value)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gateway(**overrides): GatewaySettings for the gateway fixture")
