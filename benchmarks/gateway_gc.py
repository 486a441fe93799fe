"""What freezing the host's heap buys the gateway: CPU per request and p99 under load, and
the stop of one full collection, against the same gateway unfrozen, in the same run.

The hub freezes its process's heap once the gateway serves (`memory.freeze_heap`): the
objects alive then (modules, tokenizer, renderer, aiohttp's state) are left out of the
cycle collector's full collections, which otherwise walk all of them with the event loop
stopped. Two gateway processes on one stub engine, one frozen and one not, are called by
closed-loop sessions in rounds (each round both in turn); then one gateway is started in
this process and a full collection is timed before and after the freeze.

    python benchmarks/gateway_gc.py                # 64 sessions, 5 rounds of 6,400 requests
    python benchmarks/gateway_gc.py --quick        # short (the tests)
    python benchmarks/gateway_gc.py --json         # one JSON object (keys below)

`--json` keys: `cpu_ratio` and `p99_ratio` (frozen / unfrozen, medians of the rounds; below
1 is better), `cpu_us_frozen`, `cpu_us_unfrozen`, `p99_ms_frozen`, `p99_ms_unfrozen`,
`full_collection_ms_unfrozen`, `full_collection_ms_frozen`, `objects_frozen`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from gateway import our_sessions
from gateway_load import (
    ADMIN_TOKEN,
    add_serve_arguments,
    chat,
    closed_loop,
    processes,
    serve_gateway,
    serve_stub,
    start_role,
)

ME = str(Path(__file__).resolve())
TARGETS = {"frozen": "gateway", "unfrozen": "gateway-unfrozen"}  # target -> --serve role


async def under_load(conc: int, rounds: int, n: int, logdir: Path) -> dict[str, Any]:
    """CPU µs per request and p99 ms of each target, one figure per round."""
    cpu: dict[str, list[float]] = {t: [] for t in TARGETS}
    p99: dict[str, list[float]] = {t: [] for t in TARGETS}
    with processes() as procs:
        stub, _ = await start_role(ME, "stub", procs, logdir, "stub engine")
        calls = {}
        for target, role in TARGETS.items():
            _, admin = await start_role(ME, role, procs, logdir, target, engine=stub)
            sessions = await our_sessions(admin, conc)
            urls = [url + "/chat/completions" for url, _ in sessions]
            headers = [{"Authorization": f"Bearer {token}"} for _, token in sessions]
            calls[target] = (chat(urls, headers), psutil.Process(procs[-1].pid))
        for _ in range(rounds):
            for target, (call, proc) in calls.items():
                result = await closed_loop(call, conc, n, proc)
                assert result.rps_per_core, target
                cpu[target].append(1e6 / result.rps_per_core)
                p99[target].append(result.p99_ms)
    return {"cpu": cpu, "p99": p99}


async def full_collections(repeat: int = 3) -> tuple[float, float, int]:
    """The slowest-but-one of `repeat` full collections (ms) of a gateway process's heap,
    before and after `freeze_heap`, and the objects it froze."""
    from tests.support.tiny_tokenizer import write_checkpoint

    from agentrl.api.models import GatewaySpec
    from agentrl.bundle.gateway import GatewayServer, GatewaySettings
    from agentrl.bundle.gateway.memory import freeze_heap, thaw_heap
    from agentrl.bundle.metrics import BundleMetrics

    def timed() -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            gc.collect()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    ckpt = write_checkpoint(Path(tempfile.mkdtemp(prefix="gw-gc-")))
    settings = GatewaySettings(
        router_url="http://127.0.0.1:9",  # never called: nothing is generated here
        tokenizer_path=str(ckpt),
        renderer_family="qwen3",
        port=0,
        admin_port=0,
        admin_token=ADMIN_TOKEN,
        spec=GatewaySpec(max_in_flight=64),
        context_length=4096,
    )
    server = GatewayServer(settings, BundleMetrics())
    await server.start()
    try:
        before = timed()
        frozen = freeze_heap()
        after = timed()
        thaw_heap()
    finally:
        await server.stop()
    return before, after, frozen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="1 round of 640 requests")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--sessions", type=int, default=64, help="closed-loop sessions (64)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (5)")
    p.add_argument("--requests", type=int, default=None, help="requests a target and round")
    add_serve_arguments(p, ("stub", *TARGETS.values()))
    args = p.parse_args(argv)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port))
    if args.serve in TARGETS.values():
        frozen = args.serve == TARGETS["frozen"]
        asyncio.run(serve_gateway(args.port, args.engine, args.admin_port, freeze=frozen))
    rounds = args.rounds or (1 if args.quick else 5)
    n = args.requests or (640 if args.quick else 100 * args.sessions)
    with tempfile.TemporaryDirectory(prefix="gw-gc-logs-") as logdir:
        load = asyncio.run(under_load(args.sessions, rounds, n, Path(logdir)))
    before, after, frozen = asyncio.run(full_collections())
    cpu = {t: statistics.median(v) for t, v in load["cpu"].items()}
    p99 = {t: statistics.median(v) for t, v in load["p99"].items()}
    out = {
        "cpu_ratio": round(cpu["frozen"] / cpu["unfrozen"], 3),
        "p99_ratio": round(p99["frozen"] / p99["unfrozen"], 3),
        "cpu_us_frozen": round(cpu["frozen"], 1),
        "cpu_us_unfrozen": round(cpu["unfrozen"], 1),
        "p99_ms_frozen": round(p99["frozen"], 1),
        "p99_ms_unfrozen": round(p99["unfrozen"], 1),
        "full_collection_ms_unfrozen": round(before, 2),
        "full_collection_ms_frozen": round(after, 2),
        "objects_frozen": frozen,
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.sessions} sessions, {rounds} round(s) of {n} requests a gateway")
    print(f"{'gateway':<10} {'CPU µs/request':>14} {'p99 ms':>8}   rounds (CPU µs; p99 ms)")
    for t in TARGETS:
        rounds_txt = ", ".join(
            f"{c:.0f}; {q:.1f}" for c, q in zip(load["cpu"][t], load["p99"][t], strict=True)
        )
        print(f"{t:<10} {cpu[t]:14.0f} {p99[t]:8.1f}   {rounds_txt}")
    print(f"frozen / unfrozen: CPU {out['cpu_ratio']:.2f}x, p99 {out['p99_ratio']:.2f}x")
    print(
        f"one full collection of a gateway's heap: {before:.1f} ms unfrozen, {after:.2f} ms "
        f"with its {frozen} objects frozen"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
