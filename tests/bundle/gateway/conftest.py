"""Fixtures for the gateway tests: a real tokenizer, stub SGLang workers behind a stub router,
and a started `GatewayServer` pointed at them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway import GatewayServer, render_pool
from agentrl.bundle.gateway.tokenizer import build_renderer, load_tokenizer

from .gateway_helpers import N_WORKERS, Cluster, settings_for


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gateway(**overrides): settings of the gateway fixture")


@pytest.fixture(autouse=True)
def render_workers_are_reaped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails a test that leaves a render worker not waited for once its gateway or pool is
    closed (this fixture is torn down after them). Such a process outlives the test's event
    loop, and its transport, collected later, printed "Event loop is closed" (a
    PytestUnraisableExceptionWarning) in whichever test the collector happened to run."""
    started: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def recorded(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await spawn(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(render_pool.asyncio, "create_subprocess_exec", recorded)
    yield
    left = [
        proc.pid
        for proc in started
        if proc.returncode is None or not proc._transport.is_closing()  # type: ignore[attr-defined]
    ]
    assert not left, f"render workers not waited for: {left}"


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def tok(checkpoint: Path) -> Any:
    return load_tokenizer(str(checkpoint))


@pytest.fixture(scope="session")
def renderer(tok: Any) -> Any:
    return build_renderer(tok, "qwen3")


@pytest.fixture
async def cluster(tok: Any) -> AsyncIterator[Cluster]:
    vocab = len(tok.get_vocab())
    engines = [StubEngine(vocab_size=vocab, decode=tok.decode) for _ in range(N_WORKERS)]
    urls = [await e.start() for e in engines]
    router = StubRouter(urls)
    await router.start()
    yield Cluster(engines, router)
    await router.stop()
    for e in engines:
        await e.stop()


@pytest.fixture
async def gateway(
    cluster: Cluster, checkpoint: Path, request: pytest.FixtureRequest
) -> AsyncIterator[GatewayServer]:
    """A started gateway; a test passes settings overrides with @pytest.mark.gateway(...)."""
    marker = request.node.get_closest_marker("gateway")
    overrides = dict(marker.kwargs) if marker else {}
    server = GatewayServer(settings_for(cluster, checkpoint, **overrides), cluster.metrics)
    await server.start()
    yield server
    await server.stop()
