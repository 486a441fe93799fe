"""Load-generation pieces of the gateway benchmark: server processes, closed-loop agents.

Kept apart from `gateway.py` (targets, report, CLI) so each stays short; both run only from
the benchmark script.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.process import free_port  # noqa: E402

MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant. Answer the question, think step by step.",
    },
    {
        "role": "user",
        "content": "What is 6*7? Please show the work and give the final answer at the end.",
    },
]
COMPLETION_TOKENS = 16
ADMIN_TOKEN = "bench-admin"


# ---- servers (each in its own process) ---------------------------------------------------
def add_serve_arguments(
    ap: argparse.ArgumentParser, roles: tuple[str, ...] = ("stub", "gateway")
) -> None:
    """The hidden arguments with which a benchmark starts itself as one of its servers
    (`--serve ROLE --port ...`), each in a process of its own so its CPU is counted apart."""
    ap.add_argument("--serve", choices=roles, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--admin-port", type=int, help=argparse.SUPPRESS)


async def serve_stub(port: int) -> None:
    from tests.support.sglang_stub import StubEngine

    engine = StubEngine(
        vocab_size=1_000_000,
        responder=lambda prompt, params: list(range(100, 100 + COMPLETION_TOKENS)),
    )
    await engine.start(port=port)
    await asyncio.Event().wait()


async def serve_gateway(
    port: int,
    engine_url: str,
    admin_port: int,
    spec: Any = None,
    started: Callable[[Any], None] | None = None,
    *,
    freeze: bool = True,
    **settings_: Any,
) -> None:
    """The gateway under test, in this process until it is killed: the small test tokenizer
    with Qwen3's template, `spec` (a GatewaySpec; default: admission wide open, so the load
    measures the gateway, not its queue) and any GatewaySettings field in `settings_`.
    `started(server)` is called once it serves (the profile benchmark swaps parts out).
    Once it serves, the heap is frozen as the hub freezes its own (`freeze=False`: not)."""
    from tests.support.tiny_tokenizer import write_checkpoint

    from agentrl.api.models import GatewaySpec
    from agentrl.bundle.gateway import GatewayServer, GatewaySettings
    from agentrl.bundle.metrics import BundleMetrics

    ckpt = write_checkpoint(Path(tempfile.mkdtemp(prefix="gw-bench-")))
    settings = GatewaySettings(
        router_url=engine_url,
        tokenizer_path=str(ckpt),
        renderer_family="qwen3",
        port=port,
        admin_port=admin_port,
        admin_token=ADMIN_TOKEN,
        spec=spec if spec is not None else GatewaySpec(max_in_flight=4096),
        **settings_,
    )
    server = GatewayServer(settings, BundleMetrics())
    await server.start()
    if started is not None:
        started(server)
    if freeze:
        from agentrl.bundle.gateway.memory import freeze_heap

        freeze_heap()
    await asyncio.Event().wait()


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


async def start_role(
    me: str,
    role: str,
    procs: list[subprocess.Popen[bytes]],
    logdir: Path,
    what: str,
    *,
    engine: str | None = None,
) -> tuple[str, str]:
    """Benchmark `me` started as its server `role` (`--serve role`; the gateway roles on the
    stub at `engine`), in a process of its own appended to `procs`; its URL and the URL of
    its admin port, once its /health answers."""
    port, admin = free_port(), free_port()
    args = [me, "--serve", role, "--port", str(port)]
    if engine is not None:
        args += ["--engine", engine, "--admin-port", str(admin)]
    procs.append(spawn(args, logdir / f"{role}.log"))
    url = f"http://127.0.0.1:{port}"
    await wait_healthy(url + "/health", procs[-1], what)
    return url, f"http://127.0.0.1:{admin}"


async def wait_healthy(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{what} never became healthy at {url}")


# ---- load -----------------------------------------------------------------------------------
Call = Callable[[aiohttp.ClientSession, int], Awaitable[None]]


@dataclass
class Result:
    p50_ms: float
    p99_ms: float
    rps: float
    cpu_s: float | None  # CPU seconds the gateway process used while measured

    @property
    def rps_per_core(self) -> float | None:
        return None if not self.cpu_s else self.rps * self.wall / self.cpu_s

    wall: float = 0.0


def cpu_seconds(proc: psutil.Process) -> float:
    """CPU seconds of every thread of `proc`, to the nanosecond (the scheduler's own count in
    /proc/<pid>/task/*/schedstat); psutil's 10 ms ticks where that is absent."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{task}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return float(sum(proc.cpu_times()[:2]))


async def closed_loop(call: Call, conc: int, n: int, proc: psutil.Process | None) -> Result:
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(conc)]
    latencies: list[float] = []

    async def agent(i: int, quota: int, record: bool) -> None:
        for _ in range(quota):
            t0 = time.perf_counter()
            await call(sessions[i], i)
            if record:
                latencies.append(time.perf_counter() - t0)

    async def all_agents(quota: int, record: bool) -> None:
        """Every agent's loop; the first failure stops them all and is raised."""
        tasks = [asyncio.ensure_future(agent(i, quota, record)) for i in range(conc)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    try:
        await all_agents(max(3, (300 + 3 * conc) // conc // 4), False)  # warm-up
        cpu0 = cpu_seconds(proc) if proc else 0.0
        t0 = time.perf_counter()
        await all_agents(max(1, n // conc), True)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(proc) - cpu0 if proc else None
    finally:
        for s in sessions:
            await s.close()
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return Result(q[49] * 1e3, q[98] * 1e3, len(latencies) / wall, cpu, wall)


def checked(resp: aiohttp.ClientResponse) -> None:
    if resp.status != 200:
        raise RuntimeError(f"{resp.url}: HTTP {resp.status}")


def direct_generate(url: str, prompt_ids: list[int]) -> Call:
    body = {
        "input_ids": prompt_ids,
        "return_logprob": True,
        "sampling_params": {"max_new_tokens": 64},
    }

    async def call(http: aiohttp.ClientSession, i: int) -> None:
        async with http.post(url + "/generate", json=body) as r:
            checked(r)
            await r.read()

    return call


def chat(urls: list[str], headers: list[dict[str, str]], *, stream: bool = False) -> Call:
    """Agent i posts the same OpenAI chat request to urls[i] with headers[i] (streamed: it
    reads the whole event stream)."""
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 64, "stream": stream}
    return _post(urls, headers, body)


def messages(urls: list[str], headers: list[dict[str, str]]) -> Call:
    """Agent i posts the same Anthropic messages request to urls[i] with headers[i]."""
    body = {
        "model": "m",
        "system": MESSAGES[0]["content"],
        "messages": MESSAGES[1:],
        "max_tokens": 64,
    }
    return _post(urls, headers, body)


def _post(urls: list[str], headers: list[dict[str, str]], body: dict[str, object]) -> Call:
    data = json.dumps(body).encode()

    async def call(http: aiohttp.ClientSession, i: int) -> None:
        h = {"Content-Type": "application/json", **headers[i]}
        async with http.post(urls[i], data=data, headers=h) as r:
            checked(r)
            await r.read()

    return call


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
