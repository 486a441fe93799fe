"""Fairness under a hostile agent: other sessions' latency and the gateway's memory while one
session sends a huge request, against a baseline measured in the same run.

Processes: a stub SGLang engine, the gateway (fresh for each scenario), and this client. The
victims are `--victims` sessions calling the gateway closed-loop with a small chat request
(one connection each). Each scenario measures them twice, for the same wall time: alone
(baseline), then while one more session (the hog) sends its huge request over and over. The
text is random words, which the benchmark's tokenizer (a small byte-level BPE) cuts into
about one token per byte: the adversarial worst case, where a real tokenizer gives 3 to 4
characters per token on prose.

Scenarios:
- `10MB, default limit`: the hog sends 10 MB; the default `maxRequestBytes` (2 MiB) refuses
  it with 413 from its Content-Length, before a byte is read.
- `at the default limit`: the largest body the default admits (~2 MB of text, ~2M tokens):
  parsed, rendered in a worker process, sent to the engine, recorded.
- `10MB, limit raised` (not with --quick): `maxRequestBytes` raised to 16 MiB so the 10 MB
  request is admitted and processed, to show what raising the limit costs.

Then a slowloris phase (`benchmarks/slowloris.py`): an attacker process holds connections
open by being slow (headers that never finish, silent connections, idle keep-alive ones and
trickled bodies of a real session, 2,600 at once, reopened as soon as the gateway closes
them), then stops sending but keeps its sockets; the victims are measured against a
baseline, and the gateway's open file descriptors are sampled.

Goals (for the default limit: the first two scenarios): the victims' p99 within 2x of their
baseline, and the gateway's RSS growth <= 200 MB; in the slowloris phase, the victims' p99
within 2x too, and nothing the attacker opened still open 60 s after it stopped.
Memory is sampled every 20 ms: the gateway process (where sessions live: what persists), and
its render workers (a worker's memory is bounded by one job and is returned when the job
ends: the worker trims or retires). `rss_growth_mb` is the gateway process's peak growth
over its baseline; `workers_peak_mb` the render workers' peak.

    python benchmarks/gateway_fairness.py            # all three scenarios
    python benchmarks/gateway_fairness.py --quick    # short, a 256 KiB limit (the tests)
    python benchmarks/gateway_fairness.py --json     # one JSON object (p99_ratio, rss_growth_mb,
                                                     # slowloris_p99_ratio, slowloris_still_open)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import psutil

from gateway_load import (
    ADMIN_TOKEN,
    MESSAGES,
    add_serve_arguments,
    free_port,
    processes,
    serve_gateway,
    serve_stub,
    spawn,
    start_role,
    wait_healthy,
)

ME = str(Path(__file__).resolve())
MB = 1_000_000
DEBOUNCE_S = 1.0  # agentrl.bundle.gateway.memory.DEBOUNCE_S (checked at start)
DEFAULT_LIMIT = 2 * 1024 * 1024  # spec.gateway.maxRequestBytes' default (checked at start)
QUICK_LIMIT = 256 * 1024


@dataclass
class Scenario:
    name: str
    hog_bytes: int  # size of the hog's request body
    limit: int  # the gateway's maxRequestBytes
    default: bool  # counts toward the goals (the default limit)


@dataclass
class Outcome:
    name: str
    hog_bytes: int
    hog_status: list[int]  # HTTP status of each hog request
    hog_seconds: float  # mean time per hog request
    base_p50_ms: float
    base_p99_ms: float
    p50_ms: float
    p99_ms: float
    p99_ratio: float
    victim_errors: int  # victim requests not answered 200 (429 included)
    victim_requests: int
    rss_growth_mb: float  # gateway process: peak during the attack minus before it
    rss_settled_mb: float  # gateway process: a second after the hog sessions closed, minus before
    workers_peak_mb: float  # render workers (all of them), peak during the attack
    workers_settled_mb: float  # render workers one second after the attack
    default: bool = field(default=True)


# ---- the gateway under test ------------------------------------------------------------
async def serve_fair_gateway(
    port: int, engine_url: str, limit: int, admin_port: int, deadlines: str | None = None
) -> None:
    """The gateway with the scenario's body limit and otherwise its defaults; `deadlines`
    ("header,body,idle" seconds) shortens its connection limits (the quick slowloris phase)."""
    from agentrl.api.models import GatewaySpec

    timeouts: dict[str, float] = {}
    if deadlines:
        header, body, idle = (float(x) for x in deadlines.split(","))
        timeouts = {"header_timeout_s": header, "body_timeout_s": body, "idle_timeout_s": idle}
    await serve_gateway(
        port, engine_url, admin_port, GatewaySpec(max_request_bytes=limit), **timeouts
    )


# ---- load ----------------------------------------------------------------------------------
def words_body(n_bytes: int) -> bytes:
    """A chat request of about `n_bytes`: one user message of random words."""
    rng = random.Random(7)
    vocab = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(500)]
    text = " ".join(rng.choice(vocab) for _ in range(n_bytes // 6 + 1))[: n_bytes - 100]
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
    return json.dumps(body).encode()


async def open_sessions(url: str, n: int) -> list[tuple[str, dict[str, str]]]:
    from agentrl.bundle.gateway import GatewayClient

    client = GatewayClient(url, ADMIN_TOKEN)
    try:
        tag = os.urandom(4).hex()
        handles = [await client.create_session(f"fair-{tag}-{i}", {}) for i in range(n)]
    finally:
        await client.aclose()
    return [
        (h.base_url + "/chat/completions", {"Authorization": f"Bearer {h.token}"}) for h in handles
    ]


async def close_session(url: str, session_url: str) -> None:
    from agentrl.bundle.gateway import GatewayClient

    client = GatewayClient(url, ADMIN_TOKEN)
    try:
        await client.close_session(session_url.split("/sessions/")[1].split("/", maxsplit=1)[0])
    finally:
        await client.aclose()


async def window(url: str, n: int, done: Callable[[], bool], latencies: list[float]) -> int:
    """One measured window on fresh victim sessions, closed after it: their traces (kept by
    the gateway until a session closes) do not count as the hog's memory."""
    targets = await open_sessions(url, n)
    try:
        return await victims(targets, done, latencies)
    finally:
        for target, _ in targets:
            await close_session(url, target)


async def victims(
    targets: list[tuple[str, dict[str, str]]], done: Callable[[], bool], latencies: list[float]
) -> int:
    """Closed-loop small requests until `done()`; returns how many were not 200."""
    body = json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 16}).encode()
    errors = 0

    async def agent(url: str, headers: dict[str, str]) -> None:
        nonlocal errors
        conn = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=conn) as http:
            while not done():
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(agent(u, h) for u, h in targets))
    return errors


HOG_PAUSE_S = 1.0  # a retrying agent: its request again a second after each answer


async def hog(
    target: tuple[str, dict[str, str]], body: bytes, stop: asyncio.Event, answered: asyncio.Event
) -> list[tuple[int, float]]:
    """The hostile session: its huge request, again a second after each answer, until
    `stop` (at least once); (HTTP status, seconds) per request."""
    out: list[tuple[int, float]] = []
    url, headers = target
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while not out or not stop.is_set():
            t0 = time.perf_counter()
            try:
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    status = r.status
            except aiohttp.ClientError:
                status = 0  # the gateway closed the connection on an unread body
            out.append((status, time.perf_counter() - t0))
            answered.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HOG_PAUSE_S)
    return out


class Memory:
    """Samples the gateway's RSS and its children's (render workers) every 20 ms."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.gateway_peak = 0
        self.workers_peak = 0
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> tuple[int, int]:
        gw = self.proc.memory_info().rss
        kids = 0
        for child in self.proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                kids += child.memory_info().rss
        return gw, kids

    async def _run(self) -> None:
        while True:
            gw, kids = self.sample()
            self.gateway_peak = max(self.gateway_peak, gw)
            self.workers_peak = max(self.workers_peak, kids)
            await asyncio.sleep(0.02)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def both(a: Callable[[], bool], b: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: a() and b()


def deadline(seconds: float) -> Callable[[], bool]:
    end = time.perf_counter() + seconds
    return lambda: time.perf_counter() >= end


def p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1e3


@dataclass(frozen=True)
class Load:
    victims: int  # concurrent small sessions
    seconds: float  # per window
    rounds: int  # baseline + attack windows


async def run_scenario(sc: Scenario, load: Load, logdir: Path, stub: str) -> Outcome:
    # The raised-limit scenario is informational and minutes long per request: one round.
    n_victims, seconds, rounds = load.victims, load.seconds, load.rounds if sc.default else 1
    with processes() as procs:
        port, admin_port = free_port(), free_port()
        url = f"http://127.0.0.1:{port}"
        admin = f"http://127.0.0.1:{admin_port}"  # sessions are opened on the admin listener
        args = [ME, "--serve", "gateway", "--port", str(port), "--engine", stub,
                "--admin-port", str(admin_port)]  # fmt: skip
        procs.append(spawn([*args, "--limit", str(sc.limit)], logdir / f"gw-{port}.log"))
        await wait_healthy(url + "/health", procs[-1], "gateway")
        gw = psutil.Process(procs[-1].pid)
        body = words_body(sc.hog_bytes)
        warm: list[float] = []
        await window(admin, n_victims, deadline(min(2.0, seconds / 2)), warm)  # warm-up
        memory = Memory(gw)
        rss0 = memory.sample()[0]
        base: list[float] = []
        attack: list[float] = []
        hog_runs: list[tuple[int, float]] = []
        errors = 0
        # Rounds of baseline then attack, so a drift in the machine's load hits both alike.
        for _ in range(rounds):
            await window(admin, n_victims, deadline(seconds), base)
            # A fresh hog session per round, closed after it (as the rollout closes every
            # episode's): what stays in memory afterwards was not released.
            (mine,) = await open_sessions(admin, 1)
            memory.start()
            stop, answered = asyncio.Event(), asyncio.Event()
            hogging = asyncio.create_task(hog(mine, body, stop, answered))
            # At least `seconds`, and until the hog's first answer.
            done = both(deadline(seconds), answered.is_set)
            errors += await window(admin, n_victims, done, attack)
            stop.set()
            hog_runs += await hogging
            await close_session(admin, mine[0])
            await memory.stop()
        await asyncio.sleep(1.0 + 2 * DEBOUNCE_S)  # the gateway trims a second after a close
        settled, workers_settled = memory.sample()
    base_p99, p99 = p(base, 99), p(attack, 99)
    return Outcome(
        name=sc.name,
        hog_bytes=len(body),
        hog_status=sorted({s for s, _ in hog_runs}),
        hog_seconds=statistics.fmean(t for _, t in hog_runs),
        base_p50_ms=p(base, 50),
        base_p99_ms=base_p99,
        p50_ms=p(attack, 50),
        p99_ms=p99,
        p99_ratio=p99 / base_p99,
        victim_errors=errors,
        victim_requests=len(attack),
        rss_growth_mb=max(0, memory.gateway_peak - rss0) / MB,
        rss_settled_mb=(settled - rss0) / MB,
        workers_peak_mb=memory.workers_peak / MB,
        workers_settled_mb=workers_settled / MB,
        default=sc.default,
    )


async def run(quick: bool, load: Load, logdir: Path) -> tuple[list[Outcome], Slowloris]:
    # --quick exercises the same paths with a smaller limit, so the test suite runs it fast.
    limit, label = (QUICK_LIMIT, "quick limit") if quick else (DEFAULT_LIMIT, "default limit")
    scenarios = [
        Scenario(f"10MB, {label}", 10 * MB, limit, True),
        Scenario(f"at the {label}", limit - 4096, limit, True),
    ]
    if not quick:
        scenarios.append(Scenario("10MB, limit raised", 10 * MB, 16 * 1024 * 1024, False))
    with processes() as procs:
        stub, _ = await start_role(ME, "stub", procs, logdir, "stub engine")
        outcomes = [await run_scenario(sc, load, logdir, stub) for sc in scenarios]
        return outcomes, await run_slowloris(quick, load, logdir, stub)


# ---- the slowloris phase ---------------------------------------------------------------------
@dataclass
class Slowloris:
    connections: dict[str, int]  # attacker connections kept open, per kind (benchmarks/slowloris)
    attack_s: float
    quiet_s: float  # how long after the attack stopped `still_open` was counted
    base_p50_ms: float
    base_p99_ms: float
    p50_ms: float
    p99_ms: float
    p99_ratio: float
    victim_errors: int
    victim_requests: int
    fds_before: int  # the gateway's open file descriptors before the attack
    fds_peak: int
    fds_after: int  # `quiet_s` after the attack stopped
    attacker: dict[str, int]  # opened, closed_during_attack, closed_after_stop, still_open, ...


async def run_slowloris(quick: bool, load: Load, logdir: Path, stub: str) -> Slowloris:
    counts = (
        {"headers": 100, "silent": 20, "idle": 30, "body": 40}
        if quick
        else {"headers": 1500, "silent": 200, "idle": 300, "body": 600}
    )
    # --quick shortens the gateway's deadlines (and so the wait after the attack; aiohttp
    # still reads and drops an answered request's unread body for 10 s before it closes).
    deadlines, quiet_s = ("1,2,2", 14.0) if quick else (None, 60.0)
    attack_s = 2 * load.seconds + 3.0  # 3 s for the connections to open, then measured
    with processes() as procs:
        port, admin_port = free_port(), free_port()
        url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
        args = [ME, "--serve", "gateway", "--port", str(port), "--engine", stub,
                "--admin-port", str(admin_port), "--limit", str(DEFAULT_LIMIT)]  # fmt: skip
        if deadlines:
            args += ["--deadlines", deadlines]
        procs.append(spawn(args, logdir / f"gw-{port}.log"))
        await wait_healthy(url + "/health", procs[-1], "gateway")
        gw = psutil.Process(procs[-1].pid)
        await window(admin, load.victims, deadline(min(2.0, load.seconds / 2)), [])  # warm-up
        base: list[float] = []
        errors = await window(admin, load.victims, deadline(2 * load.seconds), base)
        await asyncio.sleep(0.5)
        fds_before = gw.num_fds()
        ((target, headers),) = await open_sessions(admin, 1)
        path = target.removeprefix(url)
        token = headers["Authorization"].removeprefix("Bearer ")
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(ME).with_name("slowloris.py")), "--port", str(port),
            # `=`: a token may start with "-", which argparse would take for an option
            "--path", path, f"--token={token}", "--counts", json.dumps(counts),
            "--attack-s", str(attack_s), "--quiet-s", str(quiet_s),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert attacker.stdout is not None
        peak = fds_before

        async def sample() -> None:
            nonlocal peak
            while True:
                with contextlib.suppress(psutil.Error):
                    peak = max(peak, gw.num_fds())
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        await asyncio.sleep(3.0)
        during: list[float] = []
        errors += await window(admin, load.victims, deadline(2 * load.seconds), during)
        await attacker.stdout.readline()  # "stopped": nothing more is sent from here on
        sampler.cancel()
        await asyncio.sleep(quiet_s - 0.5)
        fds_after = gw.num_fds()
        stats = json.loads(await attacker.stdout.readline())
        await attacker.wait()
    return Slowloris(
        connections=counts,
        attack_s=attack_s,
        quiet_s=quiet_s,
        base_p50_ms=p(base, 50),
        base_p99_ms=p(base, 99),
        p50_ms=p(during, 50),
        p99_ms=p(during, 99),
        p99_ratio=p(during, 99) / p(base, 99),
        victim_errors=errors,
        victim_requests=len(during),
        fds_before=fds_before,
        fds_peak=peak,
        fds_after=fds_after,
        attacker=stats,
    )


def report(outcomes: list[Outcome]) -> str:
    lines = [
        f"{'scenario':<22} {'hog':>7} {'hog HTTP':>9} {'hog s':>6} {'base p50':>8} "
        f"{'base p99':>8} {'p50':>7} {'p99':>7} {'p99 x':>6} {'errors':>6} {'rss+MB':>7} "
        f"{'settled':>7} {'workers':>7} {'w.after':>7}"
    ]
    for o in outcomes:
        lines.append(
            f"{o.name:<22} {o.hog_bytes / MB:>6.1f}M {','.join(map(str, o.hog_status)):>9} "
            f"{o.hog_seconds:>6.2f} {o.base_p50_ms:>8.2f} {o.base_p99_ms:>8.2f} {o.p50_ms:>7.2f} "
            f"{o.p99_ms:>7.2f} {o.p99_ratio:>5.2f}x {o.victim_errors:>6} {o.rss_growth_mb:>7.1f} "
            f"{o.rss_settled_mb:>7.1f} {o.workers_peak_mb:>7.1f} {o.workers_settled_mb:>7.1f}"
        )
    return "\n".join(lines)


def headline(outcomes: list[Outcome], slow: Slowloris) -> dict[str, object]:
    """The goals' figures: the worst over the default-limit scenarios, and the slowloris
    phase's (victims' p99, the gateway's descriptors, what was still open after it)."""
    judged = [o for o in outcomes if o.default]
    ratio = max(o.p99_ratio for o in judged)
    growth = max(o.rss_growth_mb for o in judged)
    still_open = slow.attacker.get("still_open", 0)
    return {
        "p99_ratio": round(ratio, 3),
        "rss_growth_mb": round(growth, 1),
        "workers_peak_mb": round(max(o.workers_peak_mb for o in judged), 1),
        "victim_errors": sum(o.victim_errors for o in judged) + slow.victim_errors,
        "slowloris_p99_ratio": round(slow.p99_ratio, 3),
        "slowloris_fds_peak": slow.fds_peak,
        "slowloris_still_open": still_open,
        "goals_met": ratio <= 2.0
        and growth <= 200.0
        and slow.p99_ratio <= 2.0
        and still_open == 0
        and slow.fds_after <= slow.fds_before + 8,
        "scenarios": [asdict(o) for o in outcomes],
        "slowloris": asdict(slow),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="short run, default-limit scenarios")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--victims", type=int, default=None, help="concurrent small sessions")
    ap.add_argument("--seconds", type=float, default=None, help="per measured window")
    ap.add_argument("--rounds", type=int, default=None, help="baseline + attack windows")
    add_serve_arguments(ap)
    ap.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--deadlines", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port))
    if args.serve == "gateway":
        asyncio.run(
            serve_fair_gateway(args.port, args.engine, args.limit, args.admin_port, args.deadlines)
        )
    from agentrl.api.models import GatewaySpec
    from agentrl.bundle.gateway import memory

    if GatewaySpec().max_request_bytes != DEFAULT_LIMIT or memory.DEBOUNCE_S != DEBOUNCE_S:
        raise SystemExit("DEFAULT_LIMIT / DEBOUNCE_S are out of date with the gateway's")
    n_victims = args.victims or (4 if args.quick else 16)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    rounds = args.rounds or (1 if args.quick else 3)
    with tempfile.TemporaryDirectory(prefix="gw-fair-logs-") as logdir:
        load = Load(n_victims, seconds, rounds)
        outcomes, slow = asyncio.run(run(args.quick, load, Path(logdir)))
    result = headline(outcomes, slow)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"fairness: {n_victims} victim sessions, {rounds} x ({seconds:g} s baseline + attack), "
        f"{os.cpu_count()} cores (shared: read the ratios)"
    )
    print(report(outcomes))
    print(
        f"slowloris ({', '.join(f'{n} {k}' for k, n in slow.connections.items())} connections, "
        f"{slow.attack_s:g} s): victims' p99 {slow.base_p99_ms:.1f} -> {slow.p99_ms:.1f} ms "
        f"({slow.p99_ratio:.2f}x, goal <= 2x); gateway fds {slow.fds_before} -> peak "
        f"{slow.fds_peak} -> {slow.fds_after} {slow.quiet_s:g} s after; attacker: {slow.attacker}"
    )
    print(
        f"default limit, worst case: victims' p99 {result['p99_ratio']}x their baseline "
        f"(goal <= 2x), gateway RSS +{result['rss_growth_mb']} MB (goal <= 200 MB), render "
        f"workers peak {result['workers_peak_mb']} MB, victim errors {result['victim_errors']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
