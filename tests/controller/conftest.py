"""The operator, in-process, against the kmock emulator (tests/support/kmock_api.py).

`OperatorRun` starts kopf with our handlers exactly as `python -m agentrl.controller` does
(standalone, cluster-wide, the same startup settings), pointed at the emulator through a
kubeconfig, and can be stopped and started again on the same emulator (restart tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest
from tests.support.kmock_api import OperatorEmulator, running_emulator, write_kubeconfig

from agentrl.controller import handlers
from agentrl.controller.config import OperatorConfig
from agentrl.controller.metrics import OperatorMetrics

__all__ = ["handlers"]
WAIT = 30.0  # generous bound for polls; tests never assert on timing
# The Ray pods' default image (agentrl publishes none): a test value, never pulled.
TEST_IMAGE = "runtime@sha256:" + "1" * 64


async def wait_for(probe: Callable[[], Any], limit: float = WAIT, what: str = "condition") -> Any:
    """Poll `probe` (sync or async) until it returns something truthy (bounded, not timed)."""
    deadline = time.monotonic() + limit
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if isinstance(last, Awaitable):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


class OperatorRun:
    def __init__(self, config: OperatorConfig, clock: Callable[[], str] | None = None) -> None:
        self.config, self.clock = config, clock
        self.metrics = OperatorMetrics()
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self.memo: kopf.Memo | None = None

    async def start(self) -> None:
        self._stop, ready = asyncio.Event(), asyncio.Event()
        self.memo = kopf.Memo(config=self.config, metrics=self.metrics, clock=self.clock)
        settings = kopf.OperatorSettings()
        settings.batching.idle_timeout = 0.5  # idle workers exit sooner: faster shutdowns
        self._task = asyncio.create_task(kopf.operator(
            clusterwide=True, standalone=True, stop_flag=self._stop, ready_flag=ready,
            memo=self.memo, settings=settings,
        ))  # fmt: skip
        await wait_for(ready.is_set, what="operator ready")

    async def stop(self) -> None:
        if self._task is None or self._stop is None:
            return
        self._stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, timeout=WAIT)
        self._task = None


class Api:
    """Test-side writes and reads through real HTTP, so the operator's watches see them."""

    def __init__(self, emulator: OperatorEmulator, url: str) -> None:
        self.emu, self.url = emulator, url
        # A connection per request: when kopf.operator() stops, it cancels every task created
        # while it ran (it cannot tell its own from others'), the emulator's handlers of this
        # client's keep-alive connections included; a request sent on such a connection after
        # `OperatorRun.stop()` (a change made while no operator runs) was never answered.
        connector = aiohttp.TCPConnector(force_close=True)
        self.http = aiohttp.ClientSession(connector=connector,
                                          headers={"User-Agent": "agentrl-tests"})  # fmt: skip

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        path = _collection(obj["apiVersion"], obj["metadata"].get("namespace"), _plural(obj))
        async with self.http.post(self.url + path, json=obj) as resp:
            assert resp.status < 300, await resp.text()
            result: dict[str, Any] = await resp.json()
            return result

    async def patch(self, resource: str, ns: str, name: str, patch: Any, sub: str = "") -> None:
        group_version, plural = resource.rsplit("/", 1)
        path = _collection(group_version, ns, plural) + f"/{name}" + (f"/{sub}" if sub else "")
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.http.patch(self.url + path, data=json.dumps(patch), headers=headers) as r:
            assert r.status < 300, await r.text()

    async def delete(self, resource: str, ns: str, name: str) -> None:
        group_version, plural = resource.rsplit("/", 1)
        async with self.http.delete(self.url + _collection(group_version, ns, plural)
                                    + f"/{name}") as resp:  # fmt: skip
            assert resp.status < 300, await resp.text()

    def get(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.emu.get(resource, ns, name)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.emu.live("v1/events")
                if e.get("involvedObject", {}).get("name") == name]  # fmt: skip

    def reasons(self, name: str) -> list[str]:
        """The reasons of `name`'s events, oldest first."""
        return [e["reason"] for e in self.events(name)]


def _plural(obj: dict[str, Any]) -> str:
    return {"RLExperiment": "rlexperiments", "ConfigMap": "configmaps", "Pod": "pods",
            "RayJob": "rayjobs", "Service": "services", "Event": "events"}[obj["kind"]]  # fmt: skip


def _collection(group_version: str, ns: str | None, plural: str) -> str:
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"


@pytest.fixture
async def emulator() -> AsyncIterator[tuple[OperatorEmulator, str]]:
    async with running_emulator() as pair:
        yield pair


@pytest.fixture
def op_config() -> OperatorConfig:
    # Fast sweeps so progress and deadlines are exercised within a test's bounded waits.
    return OperatorConfig(metrics_port=0, liveness_endpoint="", sweep_interval=0.1,
                          scrape_timeout=1.0, image=TEST_IMAGE)  # fmt: skip


class FakeClock:
    """The operator's wall clock, moved by tests (deadlines without sleeping)."""

    def __init__(self) -> None:
        # Starts at the real time: the emulator stamps creationTimestamp from the real clock.
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def set(self, moment: datetime) -> None:
        self.now = moment


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def operator(
    emulator: tuple[OperatorEmulator, str], op_config: OperatorConfig, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock,
) -> AsyncIterator[OperatorRun]:  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", emulator[1])))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    run = OperatorRun(op_config, clock)
    await run.start()
    try:
        yield run
    finally:
        await run.stop()


@pytest.fixture
async def api(emulator: tuple[OperatorEmulator, str]) -> AsyncIterator[Api]:
    client = Api(*emulator)
    try:
        yield client
    finally:
        await client.http.close()
