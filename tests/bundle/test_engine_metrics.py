"""The hub relays every SGLang engine's own metrics at /engine-metrics, labelled by engine.

Real HTTP end to end: stub engines serving SGLang's families (recorded from its source),
slime's router stub listing them, and the hub's own server; Prometheus' text parser reads
what the hub serves, as Prometheus would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.sglang_stub import RECORDED_METRICS, StubEngine, StubRouter

from agentrl.bundle.engine_metrics import ENGINE_METRICS_PATH, engine_name, merge
from agentrl.bundle.hub import Hub

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Hub, list[StubEngine], StubRouter]]:
    engines = [StubEngine(), StubEngine()]
    urls = [await e.start() for e in engines]
    router = StubRouter(urls)
    await router.start()
    hub = Hub(None, "127.0.0.1", 0)
    await hub.start_metrics()
    try:
        yield hub, engines, router
    finally:
        await hub.stop()
        await router.stop()
        for e in engines:
            await e.stop()


async def scrape(hub: Hub, path: str) -> str:
    url = f"http://127.0.0.1:{hub._port}{path}"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()


async def test_every_engines_families_are_served_with_their_engine(cluster: Any) -> None:
    hub, engines, router = cluster
    assert await scrape(hub, ENGINE_METRICS_PATH) == ""  # no router known yet: nothing
    hub.relay_engines(router.url)
    got = samples(await scrape(hub, ENGINE_METRICS_PATH))
    recorded = samples(RECORDED_METRICS.read_text())
    assert recorded  # the recording is not empty
    for engine in engines:
        label = ("engine", engine_name(engine.url))
        for (name, labels), value in recorded.items():
            assert got[(name, labels | {label})] == value, name
    assert len(got) == 2 * len(recorded)
    # The hub's own metrics are where they were, without the engines'.
    assert not any(name.startswith("sglang:") for name, _ in samples(await scrape(hub, "/metrics")))


async def test_an_engine_that_does_not_answer_is_counted_and_the_others_served(
    cluster: Any,
) -> None:
    hub, engines, router = cluster
    hub.relay_engines(router.url)
    engines[1].metrics_up = False
    got = samples(await scrape(hub, ENGINE_METRICS_PATH))
    served = {dict(labels).get("engine") for name, labels in got if name.startswith("sglang:")}
    assert served == {engine_name(engines[0].url)}
    errors = {
        dict(labels)["engine"]: value
        for (name, labels), value in got.items()
        if name == "agentrl_engine_metrics_errors_total"
    }
    assert errors == {engine_name(engines[1].url): 1.0}


def test_a_malformed_engine_is_left_out() -> None:
    good = RECORDED_METRICS.read_text()
    families = merge({"a:1": good, "b:2": "this is { not prometheus"})
    engines = {s.labels["engine"] for f in families for s in f.samples}
    assert engines == {"a:1"}
