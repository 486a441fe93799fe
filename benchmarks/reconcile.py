"""Reconcile benchmark: N RLExperiments created at once against kmock, vs a bare kopf handler.

    .venv/bin/python benchmarks/reconcile.py            # 200 and 1,000 CRs, 60 s steady state
    .venv/bin/python benchmarks/reconcile.py --quick    # 20 CRs, 3 s (what the test runs)

Each run gets a fresh emulator (tests/support/kmock_api.py: trimmed request log, versions,
GC) in this process and the operator as a subprocess (`python -m agentrl.controller`, so its
RSS and CPU are its own); the baseline is `kopf run benchmarks/bare_kopf.py`, which only
creates one ConfigMap per CR. Latency is the emulator's arrival time of the child POST
(RayJob / ConfigMap) minus that of the CR POST; requests are attributed by User-Agent.
Both operators share 2 cores with the emulator and the load generator, so latencies are
upper bounds; the ratio between the two, measured in the same run, is the figure to watch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import kmock
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import minimal_body  # noqa: E402
from tests.support.kmock_api import VERBS, Logged, OperatorEmulator, write_kubeconfig  # noqa: E402

LOADGEN = "agentrl-bench-loadgen"
NS = "bench"


@dataclass(frozen=True)
class Kind:
    """One operator under test: its CR, the child whose POST ends a reconcile, its agents."""

    cr: str  # the CR resource the load generator POSTs
    child: str  # the child resource whose first POST counts as "reconciled"
    suffix: str  # child name = CR name + suffix
    agents: tuple[str, ...]  # User-Agent prefixes of the operator's requests

    def owns(self, request: Logged) -> bool:
        return request.agent.startswith(self.agents)


KINDS = {
    "agentrl": Kind("agentrl.io/v1alpha1/rlexperiments", "ray.io/v1/rayjobs", "",
                    ("agentrl-operator", "kopf/")),
    "bare": Kind("example.io/v1/exps", "v1/configmaps", "-cm", ("bare-kopf-handler", "kopf/")),
}  # fmt: skip


@dataclass
class Figures:
    kind: str
    n: int
    p50: float
    p99: float
    worst: float
    total: float
    requests: float  # per CR
    writes: float  # per CR
    steady_writes: int
    rss_idle_mb: float
    rss_mb: float
    cpu_s: float
    emulator_cpu_s: float  # this process: emulator + load generator


def body(kind: str, i: int) -> dict[str, object]:
    name = f"bench-{i:04d}"
    if kind == "bare":
        return {"apiVersion": "example.io/v1", "kind": "Exp", "spec": {"i": i},
                "metadata": {"name": name, "namespace": NS}}  # fmt: skip
    exp = minimal_body()
    exp["metadata"] = {"name": name, "namespace": NS}
    return exp


def operator_cmd(kind: str) -> list[str]:
    if kind == "bare":
        return [sys.executable, "-m", "kopf", "run", "--standalone", "-A", "--quiet",
                str(ROOT / "benchmarks" / "bare_kopf.py")]  # fmt: skip
    return [sys.executable, "-m", "agentrl.controller"]


async def until(probe: object, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not probe():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark: timed out waiting for {what}")
        await asyncio.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_one(name: str, n: int, steady: float, workdir: Path) -> Figures:
    kind = KINDS[name]
    async with OperatorEmulator() as api, kmock.Server(api) as server:
        api.resources["example.io/v1/exps"] = kmock.ResourceInfo(kind="Exp", namespaced=True,
                                                                 verbs=set(VERBS))  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(
            workdir / f"kubeconfig-{name}-{n}", str(server.url).rstrip("/"))),
            "AGENTRL_METRICS_PORT": "0", "AGENTRL_LOG_LEVEL": "WARNING",
            "AGENTRL_LIVENESS_ENDPOINT": "http://127.0.0.1:0/healthz",
            # The Ray pods' default image (agentrl publishes none): never pulled here.
            "AGENTRL_IMAGE": "runtime@sha256:" + "1" * 64}  # fmt: skip
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with (workdir / f"operator-{name}-{n}.log").open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *operator_cmd(name), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            )
        me, cpu0 = psutil.Process(), sum(psutil.Process().cpu_times()[:2])
        try:
            ps = psutil.Process(proc.pid)
            await until(lambda: any(r.watch and r.resource == kind.cr for r in api.log), 60,
                        "the operator's watch")  # fmt: skip
            await asyncio.sleep(0.5)
            rss_idle = ps.memory_info().rss
            await create_all(str(server.url).rstrip("/"), name, n)

            children: set[str | None] = set()
            patched: set[str | None] = set()
            scanned = 0

            def done() -> bool:  # incremental: the log grows by thousands of requests
                nonlocal scanned
                for r in api.log[scanned:]:
                    if r.method == "POST" and r.resource == kind.child and kind.owns(r):
                        children.add(r.name)
                    elif r.method == "PATCH" and r.resource == kind.cr and kind.owns(r):
                        patched.add(r.name)
                scanned = len(api.log)
                return len(children) >= n and len(patched) >= n

            await until(done, 600, f"{n} reconciles")
            await asyncio.sleep(1.0)  # let trailing writes of the burst land
            mark = len(api.log)
            await asyncio.sleep(steady)
            steady_writes = sum(1 for r in api.log[mark:] if r.is_write and kind.owns(r))
            return summarize(
                name, n, api.log[:mark], steady_writes=steady_writes, rss_idle=rss_idle,
                rss=ps.memory_info().rss, cpu=sum(ps.cpu_times()[:2]),
                emulator_cpu=sum(me.cpu_times()[:2]) - cpu0,
            )  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def create_all(base: str, name: str, n: int) -> None:
    """POST n CRs at once, as `kubectl apply` of n files in parallel would."""
    group, version, plural = KINDS[name].cr.rsplit("/", 2)
    url = f"{base}/apis/{group}/{version}/namespaces/{NS}/{plural}"
    async with aiohttp.ClientSession(headers={"User-Agent": LOADGEN}) as http:

        async def post(i: int) -> None:
            async with http.post(url, json=body(name, i)) as resp:
                if resp.status >= 300:
                    raise SystemExit(f"benchmark: creating CR {i}: {await resp.text()}")

        await asyncio.gather(*(post(i) for i in range(n)))


def summarize(
    name: str, n: int, log: list[Logged], *, steady_writes: int, rss_idle: int, rss: int,
    cpu: float, emulator_cpu: float,
) -> Figures:  # fmt: skip
    kind = KINDS[name]
    mine = [r for r in log if kind.owns(r) and not r.watch]
    created = {r.name: r.at for r in log if r.method == "POST" and r.resource == kind.cr}
    child_at: dict[str, float] = {}
    for r in mine:
        if r.method == "POST" and r.resource == kind.child and r.name:
            child_at.setdefault(r.name.removesuffix(kind.suffix), r.at)
    lat = [child_at[cr] - at for cr, at in created.items() if cr in child_at]
    writes = sum(1 for r in mine if r.is_write)
    return Figures(
        kind=name, n=n, p50=percentile(lat, 0.5), p99=percentile(lat, 0.99), worst=max(lat),
        total=max(child_at.values()) - min(created.values()), requests=len(mine) / n,
        writes=writes / n, steady_writes=steady_writes, rss_idle_mb=rss_idle / 2**20,
        rss_mb=rss / 2**20, cpu_s=cpu, emulator_cpu_s=emulator_cpu,
    )  # fmt: skip


def report(ours: Figures, bare: Figures) -> str:
    rows = [
        ("create -> child p50 (s)", f"{ours.p50:.3f}", f"{bare.p50:.3f}"),
        ("create -> child p99 (s)", f"{ours.p99:.3f}", f"{bare.p99:.3f}"),
        ("create -> child max (s)", f"{ours.worst:.3f}", f"{bare.worst:.3f}"),
        ("first create -> last child (s)", f"{ours.total:.2f}", f"{bare.total:.2f}"),
        ("operator API requests per CR", f"{ours.requests:.2f}", f"{bare.requests:.2f}"),
        ("operator writes per CR", f"{ours.writes:.2f}", f"{bare.writes:.2f}"),
        ("writes in steady state", str(ours.steady_writes), str(bare.steady_writes)),
        ("operator RSS idle / end (MB)", f"{ours.rss_idle_mb:.0f} / {ours.rss_mb:.0f}",
         f"{bare.rss_idle_mb:.0f} / {bare.rss_mb:.0f}"),
        ("operator CPU (s)", f"{ours.cpu_s:.2f}", f"{bare.cpu_s:.2f}"),
        ("emulator + load generator CPU (s)", f"{ours.emulator_cpu_s:.2f}",
         f"{bare.emulator_cpu_s:.2f}"),
    ]  # fmt: skip
    lines = [f"== {ours.n} experiments ==", f"{'':34}{'agentrl':>16}{'bare kopf':>16}"]
    lines += [f"{label:34}{a:>16}{b:>16}" for label, a, b in rows]
    ratio = ours.p50 / bare.p50 if bare.p50 else float("inf")
    lines.append(f"p50 ratio agentrl / bare kopf: {ratio:.2f}x (goal <= 1.5x)")
    return "\n".join(lines)


async def main(sizes: list[int], steady: float) -> int:
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as tmp:
        for n in sizes:
            bare = await run_one("bare", n, steady, Path(tmp))
            ours = await run_one("agentrl", n, steady, Path(tmp))
            print(report(ours, bare), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="20 CRs, 3 s steady state")
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--steady", type=float, default=None, help="steady-state seconds")
    args = parser.parse_args()
    sizes = args.sizes or ([20] if args.quick else [200, 1000])
    steady = args.steady if args.steady is not None else (3.0 if args.quick else 60.0)
    sys.exit(asyncio.run(main(sizes, steady)))
