"""Gateway overhead: added latency and requests/s per core, against direct engine calls and
against rllm-model-gateway 0.1.0 proxying the same stub engine, all in one run.

Each target runs in its own process (stub engine, our gateway, the anchor), so the CPU each
gateway burns is measured on its own (psutil) and "requests/s per core" is requests divided
by the gateway process's CPU seconds. Agents are closed-loop, one HTTP connection and one
session each. Figures on a shared 2-core box are noisy; the ratios inside one run are what
to read.

    python benchmarks/gateway.py            # levels 1, 64, 256 (+ anchor if installed)
    python benchmarks/gateway.py --quick    # small, fast; run by the tests
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
ME = str(Path(__file__).resolve())
sys.path.insert(0, str(ROOT))

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- servers (each in its own process) ---------------------------------------------------
async def serve_stub(port: int) -> None:
    from tests.support.sglang_stub import StubEngine

    engine = StubEngine(
        vocab_size=1_000_000,
        responder=lambda prompt, params: list(range(100, 100 + COMPLETION_TOKENS)),
    )
    await engine.start(port=port)
    await asyncio.Event().wait()


async def serve_gateway(port: int, engine_url: str) -> None:
    from tests.support.tiny_tokenizer import write_checkpoint

    from agentrl.bundle.gateway import GatewayServer, GatewaySettings
    from agentrl.bundle.metrics import BundleMetrics

    ckpt = write_checkpoint(Path(tempfile.mkdtemp(prefix="gw-bench-")))
    settings = GatewaySettings(
        router_url=engine_url,
        tokenizer_path=str(ckpt),
        renderer_family="qwen3",
        port=port,
        admin_token=ADMIN_TOKEN,
        max_in_flight=4096,
    )
    server = GatewayServer(settings, BundleMetrics())
    await server.start()
    await asyncio.Event().wait()


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


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


async def closed_loop(call: Call, conc: int, n: int, proc: psutil.Process | None) -> Result:
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(conc)]
    latencies: list[float] = []

    async def agent(i: int, quota: int, record: bool) -> None:
        for _ in range(quota):
            t0 = time.perf_counter()
            await call(sessions[i], i)
            if record:
                latencies.append(time.perf_counter() - t0)

    try:
        await asyncio.gather(
            *(agent(i, max(3, (300 + 3 * conc) // conc // 4), False) for i in range(conc))
        )
        cpu0 = sum(proc.cpu_times()[:2]) if proc else 0.0
        t0 = time.perf_counter()
        await asyncio.gather(*(agent(i, max(1, n // conc), True) for i in range(conc)))
        wall = time.perf_counter() - t0
        cpu = sum(proc.cpu_times()[:2]) - cpu0 if proc else None
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


def chat(urls: list[str], headers: list[dict[str, str]]) -> Call:
    """Agent i posts the same chat request to urls[i] with headers[i]."""
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 64}

    async def call(http: aiohttp.ClientSession, i: int) -> None:
        async with http.post(urls[i], json=body, headers=headers[i]) as r:
            checked(r)
            await r.read()

    return call


# ---- targets -----------------------------------------------------------------------------
@dataclass
class Target:
    name: str
    call: Call
    proc: psutil.Process | None  # the gateway process whose CPU is counted
    baseline: str | None  # the direct target its added latency is measured against


async def our_sessions(url: str, conc: int) -> list[tuple[str, str]]:
    from agentrl.bundle.gateway import GatewayClient

    client = GatewayClient(url, ADMIN_TOKEN)
    try:
        tag = os.urandom(4).hex()
        handles = [await client.create_session(f"bench-{tag}-{i}", {}) for i in range(conc)]
    finally:
        await client.aclose()
    return [(h.base_url + "/chat/completions", h.token) for h in handles]


async def rllm_sessions(url: str, conc: int) -> list[str]:
    tag = os.urandom(4).hex()
    async with aiohttp.ClientSession() as http:
        out = []
        for i in range(conc):
            async with http.post(url + "/sessions", json={"session_id": f"b{tag}-{i}"}) as r:
                out.append(url + (await r.json())["url"] + "/chat/completions")
    return out


def rendered_prompt() -> list[int]:
    """The ids our gateway sends for MESSAGES, so the direct baseline carries the same prompt."""
    from tests.support.tiny_tokenizer import write_checkpoint

    from agentrl.bundle.gateway.tokenizer import build_renderer, load_tokenizer

    tok = load_tokenizer(str(write_checkpoint(Path(tempfile.mkdtemp(prefix="gw-bench-")))))
    return list(build_renderer(tok, "qwen3").render_ids(MESSAGES, add_generation_prompt=True))


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


def rllm_available() -> str | None:
    """None if the anchor can run here, else why not."""
    if importlib.util.find_spec("rllm_model_gateway") is None:
        return (
            "rllm-model-gateway is not installed (pip install rllm-model-gateway==0.1.0 into .venv)"
        )
    return None


async def run(
    levels: list[int], n: int, with_rllm: bool, logdir: Path
) -> dict[tuple[str, int], Result]:
    stub_port, gw_port, rllm_port = free_port(), free_port(), free_port()
    stub, gw, rllm = (f"http://127.0.0.1:{p}" for p in (stub_port, gw_port, rllm_port))
    results: dict[tuple[str, int], Result] = {}
    with processes() as procs:
        procs.append(spawn([ME, "--serve", "stub", "--port", str(stub_port)], logdir / "stub.log"))
        await wait_healthy(stub + "/health", procs[-1], "stub engine")
        procs.append(
            spawn(
                [ME, "--serve", "gateway", "--port", str(gw_port), "--engine", stub],
                logdir / "gateway.log",
            )
        )
        await wait_healthy(gw + "/health", procs[-1], "agentrl gateway")
        gw_proc = psutil.Process(procs[-1].pid)
        rllm_proc = None
        if with_rllm:
            args = [
                "-m",
                "rllm_model_gateway",
                "--host",
                "127.0.0.1",
                "--port",
                str(rllm_port),
                "--worker",
                stub + "/v1",
                "--store",
                "memory",
            ]
            procs.append(spawn(args, logdir / "rllm.log"))
            await wait_healthy(rllm + "/health", procs[-1], "rllm-model-gateway")
            rllm_proc = psutil.Process(procs[-1].pid)
        prompt = rendered_prompt()
        for conc in levels:
            ours = await our_sessions(gw, conc)
            targets = [
                Target("direct /generate", direct_generate(stub, prompt), None, None),
                Target(
                    "agentrl gateway",
                    chat([u for u, _ in ours], [{"Authorization": f"Bearer {t}"} for _, t in ours]),
                    gw_proc,
                    "direct /generate",
                ),
            ]
            if with_rllm:
                anchor = await rllm_sessions(rllm, conc)
                targets += [
                    Target(
                        "direct /v1/chat",
                        chat([stub + "/v1/chat/completions"] * conc, [{}] * conc),
                        None,
                        None,
                    ),
                    Target(
                        "rllm-model-gateway",
                        chat(anchor, [{}] * conc),
                        rllm_proc,
                        "direct /v1/chat",
                    ),
                ]
            for t in targets:
                results[(t.name, conc)] = await closed_loop(t.call, conc, n, t.proc)
    return results


def report(
    results: dict[tuple[str, int], Result], levels: list[int], baselines: dict[str, str]
) -> list[str]:
    lines = [
        f"{'target':<20} {'conc':>4} {'p50 ms':>8} {'p99 ms':>9} {'req/s':>8} "
        f"{'req/s/core':>10} {'added p50':>9} {'added p99':>9}"
    ]
    for conc in levels:
        for (name, c), r in results.items():
            if c != conc:
                continue
            base = results.get((baselines.get(name, ""), conc))
            added = (
                f"{r.p50_ms - base.p50_ms:9.2f} {r.p99_ms - base.p99_ms:9.2f}"
                if base
                else f"{'':>9} {'':>9}"
            )
            per_core = f"{r.rps_per_core:10.0f}" if r.rps_per_core else f"{'':>10}"
            lines.append(
                f"{name:<20} {conc:>4} {r.p50_ms:8.2f} {r.p99_ms:9.2f} {r.rps:8.0f} "
                f"{per_core} {added}"
            )
    for conc in levels:
        ours, anchor = (
            results.get(("agentrl gateway", conc)),
            results.get(("rllm-model-gateway", conc)),
        )
        if ours and anchor and ours.rps_per_core and anchor.rps_per_core:
            lines.append(
                f"c={conc}: req/s per core agentrl/rllm = "
                f"{ours.rps_per_core / anchor.rps_per_core:.1f}x "
                f"(goal >= 5x); req/s ratio {ours.rps / anchor.rps:.1f}x"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick", action="store_true", help="small run (levels 1 and 8, no anchor unless --rllm)"
    )
    p.add_argument(
        "--rllm", action="store_true", help="include the rllm-model-gateway anchor in --quick"
    )
    p.add_argument(
        "--requests", type=int, default=None, help="measured requests per level and target"
    )
    p.add_argument("--serve", choices=["stub", "gateway"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port))
    if args.serve == "gateway":
        asyncio.run(serve_gateway(args.port, args.engine))
    levels = [1, 8] if args.quick else [1, 64, 256]
    n = args.requests or (100 if args.quick else 2000)
    why_not = rllm_available()
    with_rllm = why_not is None and (args.rllm or not args.quick)
    if why_not and not args.quick:
        print(f"anchor skipped: {why_not}")
    with tempfile.TemporaryDirectory(prefix="gw-bench-logs-") as logdir:
        results = asyncio.run(run(levels, n, with_rllm, Path(logdir)))
    print(
        f"gateway benchmark: {n} requests per level, {os.cpu_count()} cores "
        "(shared with other work: absolute figures are noisy, read the ratios)"
    )
    baselines = {"agentrl gateway": "direct /generate", "rllm-model-gateway": "direct /v1/chat"}
    print("\n".join(report(results, levels, baselines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
