"""Reconcile benchmark: N RLExperiments created at once, agentrl against two kopf baselines.

    .venv/bin/python benchmarks/reconcile.py                 # 200 and 1,000; kmock and apiserver
    .venv/bin/python benchmarks/reconcile.py --quick         # 20 on kmock, 3 s (the test runs it)
    .venv/bin/python benchmarks/reconcile.py --backends apiserver --sizes 200

Operators, each a subprocess (its RSS and CPU are its own):
- `agentrl`: `python -m agentrl.controller` (validates, renders, creates four children,
  writes one status).
- `same-work`: `benchmarks/same_work_kopf.py`, the same requests with the same bodies and
  the least code kopf allows (bodies rendered once, names substituted per experiment).
- `bare`: `benchmarks/bare_kopf.py`, one ConfigMap and a status per object.

Backends, fresh for every run:
- `kmock`: the emulator in tests/support/kmock_api.py, in this process. Latency is the
  emulator's arrival time of the child's POST minus that of the CR's POST; requests are
  attributed by User-Agent.
- `apiserver`: kube-apiserver 1.20 + etcd (tests/support/kube.py). Latency is measured by a
  watch in this process: the child's ADDED event minus the CR's ADDED event. Request counts
  come from kmock (the operators' code paths do not depend on the backend).

Each run first creates one canary object and waits for its child, so every operator is
started, connected and warm before the burst. Everything shares 2 cores (operator, backend,
load generator), so latencies are upper bounds; the ratios between operators, measured in
the same invocation, are the figures to watch. Goal: agentrl's p50 within 1.3x same-work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import minimal_body  # noqa: E402
from tests.support.kmock_api import (  # noqa: E402
    VERBS,
    Logged,
    OperatorEmulator,
    install_kuberay_crd,
    write_kubeconfig,
)
from tests.support.process import free_port  # noqa: E402

LOADGEN = "agentrl-bench-loadgen"
NS = "bench"
CANARY = "canary"
GOAL = 1.3  # agentrl p50 / same-work p50
RUNTIME_IMAGE = "runtime@sha256:" + "1" * 64
EXP_API = "agentrl.io/v1alpha1/rlexperiments"
BARE_API = "example.io/v1/exps"


@dataclass(frozen=True)
class Operator:
    """One operator under test: its CR, the child whose creation ends a reconcile, its agents."""

    cr: str  # the CR resource the load generator POSTs
    child: str  # the child resource whose creation counts as "reconciled"
    suffix: str  # child name = CR name + suffix
    agents: tuple[str, ...]  # User-Agent prefixes of the operator's requests
    script: str | None  # a kopf operator file under benchmarks/, or None: agentrl itself

    def owns(self, request: Logged) -> bool:
        return request.agent.startswith(self.agents)

    def command(self, profile: Path | None = None) -> list[str]:
        cmd = [sys.executable, "-m", "agentrl.controller"]
        if self.script is not None:
            cmd = [sys.executable, "-m", "kopf", "run", "--standalone", "-A", "--quiet",
                   str(ROOT / "benchmarks" / self.script)]  # fmt: skip
        if profile is not None:  # py-spy's collapsed stacks of the whole run
            spy = Path(sys.executable).parent / "py-spy"
            cmd = [str(spy), "record", "--format", "raw", "--rate", "200", "-o", str(profile),
                   "--", *cmd]  # fmt: skip
        return cmd


OPERATORS = {
    "agentrl": Operator(EXP_API, "ray.io/v1/rayjobs", "", ("agentrl-operator", "kopf/"), None),
    "same-work": Operator(EXP_API, "ray.io/v1/rayjobs", "", ("same-work-kopf", "kopf/"),
                          "same_work_kopf.py"),
    "bare": Operator(BARE_API, "v1/configmaps", "-cm", ("bare-kopf-handler", "kopf/"),
                     "bare_kopf.py"),
}  # fmt: skip
BARE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "exps.example.io"},
    "spec": {"group": "example.io", "scope": "Namespaced",
             "names": {"kind": "Exp", "plural": "exps", "singular": "exp", "listKind": "ExpList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                 "openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": True}}}]},
}  # fmt: skip


@dataclass
class Figures:
    operator: str
    backend: str
    n: int
    p50: float
    p99: float
    worst: float
    total: float
    rss_idle_mb: float
    rss_mb: float
    cpu_s: float
    backend_cpu_s: float  # kmock: this process (emulator + load generator); else apiserver+etcd
    requests: float | None = None  # per CR (kmock only)
    writes: float | None = None  # per CR (kmock only)
    steady_writes: int | None = None  # kmock: requests; apiserver: watch events


def body(cr: str, name: str) -> dict[str, Any]:
    if cr == BARE_API:
        return {"apiVersion": "example.io/v1", "kind": "Exp", "spec": {"n": name},
                "metadata": {"name": name, "namespace": NS}}  # fmt: skip
    exp = minimal_body()
    exp["metadata"] = {"name": name, "namespace": NS}
    return exp


def names(n: int) -> list[str]:
    return [f"bench-{i:04d}" for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def until(
    probe: Callable[[], bool], limit: float, what: str, tasks: list[asyncio.Task[None]] = ()
) -> None:  # type: ignore[assignment]
    """Wait for `probe`; a failed helper task (a watch) is an error, not a silent stall."""
    deadline = time.monotonic() + limit
    while not probe():
        for task in tasks:
            if task.done():
                raise SystemExit(
                    f"benchmark: a watch ended while waiting for {what}: "
                    f"{task.exception() if not task.cancelled() else 'cancelled'}"
                )
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark: timed out waiting for {what}")
        await asyncio.sleep(0.05)


def collection(resource: str) -> str:
    group_version, plural = resource.rsplit("/", 1)
    base = "api/v1" if group_version == "v1" else f"apis/{group_version}"
    return f"{base}/namespaces/{NS}/{plural}"


async def post_all(http: aiohttp.ClientSession, base: str, cr: str, todo: list[str]) -> None:
    """POST the CRs at once, as `kubectl apply` of that many files in parallel would."""
    url = f"{base}/{collection(cr)}"

    async def post(name: str) -> None:
        async with http.post(url, json=body(cr, name)) as resp:
            if resp.status >= 300:
                raise SystemExit(f"benchmark: creating {name}: {await resp.text()}")

    await asyncio.gather(*(post(name) for name in todo))


@contextlib.asynccontextmanager
async def operator_process(
    op: Operator, kubeconfig: Path, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "AGENTRL_METRICS_PORT": "0",
           # The Ray pods' default image (agentrl publishes none): never pulled here.
           "AGENTRL_IMAGE": RUNTIME_IMAGE, "AGENTRL_LOG_LEVEL": "WARNING",
           "AGENTRL_LIVENESS_ENDPOINT": f"http://127.0.0.1:{free_port()}/healthz"}  # fmt: skip
    env.pop("KUBERNETES_SERVICE_HOST", None)
    profile = os.environ.get("AGENTRL_BENCH_PROFILE")  # a directory for py-spy profiles
    where = Path(profile) / f"{log.stem}.txt" if profile else None
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *op.command(where), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:  # py-spy writes its profile on SIGINT
            proc.send_signal(signal.SIGINT if where else signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def cpu(proc: psutil.Process) -> float:
    return float(sum(proc.cpu_times()[:2]))


# ---- kmock ----------------------------------------------------------------------------


async def run_kmock(name: str, n: int, steady: float, workdir: Path) -> Figures:
    op = OPERATORS[name]
    async with OperatorEmulator() as api, kmock.Server(api) as server:
        api.resources[BARE_API] = kmock.ResourceInfo(kind="Exp", namespaced=True,
                                                     verbs=set(VERBS))  # fmt: skip
        install_kuberay_crd(api)  # agentrl reads it at start-up, as on a real cluster
        base = str(server.url).rstrip("/")
        kubeconfig = write_kubeconfig(workdir / f"kubeconfig-kmock-{name}-{n}", base)
        async with (
            operator_process(op, kubeconfig, workdir / f"op-kmock-{name}-{n}.log") as proc,
            aiohttp.ClientSession(headers={"User-Agent": LOADGEN}) as http,
        ):
            ps, me = psutil.Process(proc.pid), psutil.Process()
            children: set[str | None] = set()
            patched: set[str | None] = set()
            scanned = 0

            def seen(count: int) -> bool:  # incremental: the log grows by thousands
                nonlocal scanned
                for r in api.log[scanned:]:
                    if r.method == "POST" and r.resource == op.child and op.owns(r):
                        children.add(r.name)
                    elif r.method == "PATCH" and r.resource == op.cr and op.owns(r):
                        patched.add(r.name)
                scanned = len(api.log)
                return len(children) >= count and len(patched) >= count

            await post_all(http, base, op.cr, [CANARY])
            await until(lambda: seen(1), 120, f"{name}: the canary's reconcile")
            await asyncio.sleep(0.5)
            rss_idle, cpu0, me0, mark0 = ps.memory_info().rss, cpu(ps), cpu(me), len(api.log)
            await post_all(http, base, op.cr, names(n))
            await until(lambda: seen(n + 1), 600, f"{name}: {n} reconciles")
            await asyncio.sleep(1.0)  # let trailing writes of the burst land
            mark = len(api.log)
            await asyncio.sleep(steady)
            steady_writes = sum(1 for r in api.log[mark:] if r.is_write and op.owns(r))
            log = api.log[mark0:mark]
            mine = [r for r in log if op.owns(r) and not r.watch]
            created = {r.name: r.at for r in log if r.method == "POST" and r.resource == op.cr}
            child_at: dict[str, float] = {}
            for r in mine:
                if r.method == "POST" and r.resource == op.child and r.name:
                    child_at.setdefault(r.name.removesuffix(op.suffix), r.at)
            return summarize(
                name, "kmock", n, created, child_at, rss_idle=rss_idle,
                rss=ps.memory_info().rss, cpu=cpu(ps) - cpu0, backend_cpu=cpu(me) - me0,
                requests=len(mine) / n, writes=sum(1 for r in mine if r.is_write) / n,
                steady_writes=steady_writes,
            )  # fmt: skip


# ---- the real kube-apiserver ----------------------------------------------------------


@dataclass
class Watch:
    """ADDED and MODIFIED arrival times of a resource's objects, from one watch stream."""

    added: dict[str, float] = field(default_factory=dict)
    modified: dict[str, float] = field(default_factory=dict)  # first MODIFIED with a phase
    events: int = 0


async def watch(http: aiohttp.ClientSession, base: str, resource: str, into: Watch) -> None:
    """Follow a resource's events. The API server closes a watch whose reader falls behind
    (this process is busy during a burst), so the watch resumes from the last
    resourceVersion it saw: nothing is missed, nothing is counted twice."""
    version = ""
    while True:
        query = "watch=1&allowWatchBookmarks=true&timeoutSeconds=3600"
        if version:
            query += f"&resourceVersion={version}"
        url = f"{base}/{collection(resource)}?{query}"
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch {resource}: HTTP {resp.status}: {await resp.text()}")
            async for line in resp.content:
                at = time.monotonic()
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # e.g. 410 Gone: too far behind to resume
                    raise RuntimeError(f"watch {resource}: {obj.get('message')}")
                meta = obj.get("metadata") or {}
                version = meta.get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                name = meta.get("name", "")
                into.events += 1
                if kind == "ADDED":
                    into.added.setdefault(name, at)
                elif kind == "MODIFIED" and (obj.get("status") or {}).get("phase"):
                    into.modified.setdefault(name, at)


async def run_apiserver(name: str, n: int, steady: float, workdir: Path) -> Figures:
    from tests.support.kube import ADMIN_TOKEN, running_harness

    op = OPERATORS[name]
    where = Path(tempfile.mkdtemp(prefix=f"apiserver-{name}-{n}-", dir=workdir))
    with running_harness(where) as kube:
        kube.ensure_namespace(NS)
        if op.cr == BARE_API:
            kube.kubectl("create", "-f", "-", input=json.dumps(BARE_CRD))
            from tests.support.kube import wait_established

            wait_established(kube, BARE_CRD["metadata"]["name"])  # type: ignore[index]
        headers = {"User-Agent": LOADGEN, "Authorization": f"Bearer {ADMIN_TOKEN}"}
        connector = aiohttp.TCPConnector(ssl=False, limit=100)
        backend = [psutil.Process(p.pid) for p in kube.processes]
        async with (
            operator_process(op, kube.kubeconfig, workdir / f"op-api-{name}-{n}.log") as proc,
            aiohttp.ClientSession(headers=headers, connector=connector) as http,
        ):
            crs, kids = Watch(), Watch()
            watchers = [asyncio.create_task(watch(http, kube.server, op.cr, crs)),
                        asyncio.create_task(watch(http, kube.server, op.child, kids))]  # fmt: skip
            try:
                ps = psutil.Process(proc.pid)

                def done(count: int) -> bool:
                    return len(kids.added) >= count and len(crs.modified) >= count

                await post_all(http, kube.server, op.cr, [CANARY])
                await until(lambda: done(1), 180, f"{name}: the canary's reconcile", watchers)
                await asyncio.sleep(0.5)
                rss_idle, cpu0 = ps.memory_info().rss, cpu(ps)
                back0 = sum(cpu(p) for p in backend)
                await post_all(http, kube.server, op.cr, names(n))
                await until(lambda: done(n + 1), 1200,
                            f"{name}: {n} reconciles (children {len(kids.added)}, statuses "
                            f"{len(crs.modified)})", watchers)  # fmt: skip
                await asyncio.sleep(1.0)
                events = crs.events + kids.events
                await asyncio.sleep(steady)
                steady_events = crs.events + kids.events - events
                child_at = {k.removesuffix(op.suffix): t for k, t in kids.added.items()}
                created = {k: t for k, t in crs.added.items() if k != CANARY}
                return summarize(
                    name, "apiserver", n, created, child_at, rss_idle=rss_idle,
                    rss=ps.memory_info().rss, cpu=cpu(ps) - cpu0,
                    backend_cpu=sum(cpu(p) for p in backend) - back0,
                    steady_writes=steady_events,
                )  # fmt: skip
            finally:
                for task in watchers:
                    task.cancel()
                await asyncio.gather(*watchers, return_exceptions=True)


# ---- report -----------------------------------------------------------------------------


def summarize(
    name: str, backend: str, n: int, created: dict[str | None, float],
    child_at: dict[str, float], *, rss_idle: int, rss: int, cpu: float, backend_cpu: float,
    requests: float | None = None, writes: float | None = None, steady_writes: int | None = None,
) -> Figures:  # fmt: skip
    lat = [child_at[cr] - at for cr, at in created.items() if cr in child_at and cr != CANARY]
    if len(lat) < n:
        raise SystemExit(f"benchmark: {name} on {backend}: {len(lat)} of {n} children seen")
    firsts = [at for cr, at in created.items() if cr != CANARY]
    lasts = [child_at[cr] for cr in created if cr in child_at and cr != CANARY]
    return Figures(
        operator=name, backend=backend, n=n, p50=percentile(lat, 0.5), p99=percentile(lat, 0.99),
        worst=max(lat), total=max(lasts) - min(firsts), rss_idle_mb=rss_idle / 2**20,
        rss_mb=rss / 2**20, cpu_s=cpu, backend_cpu_s=backend_cpu, requests=requests,
        writes=writes, steady_writes=steady_writes,
    )  # fmt: skip


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(runs: list[Figures]) -> str:
    cols = [f"{r.operator}" for r in runs]
    rows = [
        ("create -> child p50 (s)", [_fmt(r.p50, ".3f") for r in runs]),
        ("create -> child p99 (s)", [_fmt(r.p99, ".3f") for r in runs]),
        ("create -> child max (s)", [_fmt(r.worst, ".3f") for r in runs]),
        ("first create -> last child (s)", [_fmt(r.total, ".2f") for r in runs]),
        ("operator API requests per CR", [_fmt(r.requests, ".2f") for r in runs]),
        ("operator writes per CR", [_fmt(r.writes, ".2f") for r in runs]),
        ("writes in steady state", [_fmt(r.steady_writes, "d") for r in runs]),
        ("operator RSS idle / end (MB)", [f"{r.rss_idle_mb:.0f} / {r.rss_mb:.0f}" for r in runs]),
        ("operator CPU in the burst (s)", [_fmt(r.cpu_s, ".2f") for r in runs]),
        ("backend CPU in the burst (s)", [_fmt(r.backend_cpu_s, ".2f") for r in runs]),
    ]
    head = runs[0]
    lines = [f"== {head.n} experiments on {head.backend} ==",
             f"{'':34}" + "".join(f"{c:>14}" for c in cols)]  # fmt: skip
    lines += [f"{label:34}" + "".join(f"{v:>14}" for v in values) for label, values in rows]
    by = {r.operator: r for r in runs}
    ours = by["agentrl"]
    for other in ("same-work", "bare"):
        if other in by and by[other].p50:
            ratio = ours.p50 / by[other].p50
            goal = f" (goal <= {GOAL}x)" if other == "same-work" else ""
            lines.append(f"p50 ratio agentrl / {other}: {ratio:.2f}x{goal}")
    return "\n".join(lines)


RUNNERS = {"kmock": run_kmock, "apiserver": run_apiserver}


async def main(args: argparse.Namespace, sizes: list[int], backends: list[str],
               steady: float) -> int:  # fmt: skip
    operators, repeat = args.operators, args.repeat
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="agentrl-"))
        for backend in backends:
            for n in sizes:
                runs: list[Figures] = []
                for name in operators:
                    tries = [await RUNNERS[backend](name, n, steady, Path(tmp))
                             for _ in range(repeat)]  # fmt: skip
                    # The median run by p50 (all figures from that one run).
                    tries.sort(key=lambda f: f.p50)
                    runs.append(tries[len(tries) // 2])
                    if repeat > 1:
                        spread = ", ".join(f"{f.p50:.3f}" for f in tries)
                        print(f"  {backend} {n} {name}: p50 of {repeat} runs: {spread}",
                              flush=True)  # fmt: skip
                print(report(runs), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="20 CRs on kmock, 3 s steady state")
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--backends", nargs="*", choices=sorted(RUNNERS), default=None)
    parser.add_argument("--operators", nargs="*", choices=list(OPERATORS),
                        default=list(OPERATORS))  # fmt: skip
    parser.add_argument("--steady", type=float, default=None, help="steady-state seconds")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (median)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="an existing directory to keep the logs in")  # fmt: skip
    args = parser.parse_args()
    sizes = args.sizes or ([20] if args.quick else [200, 1000])
    backends = args.backends or (["kmock"] if args.quick else ["kmock", "apiserver"])
    steady = args.steady if args.steady is not None else (3.0 if args.quick else 60.0)
    if "agentrl" not in args.operators:
        parser.error("--operators must include agentrl (the ratios are against it)")
    sys.exit(asyncio.run(main(args, sizes, backends, steady)))
