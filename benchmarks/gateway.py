"""Gateway overhead: added latency and requests/s per core, against direct engine calls and
against two anchors on the same stub engine, all in one run:

- rllm-model-gateway 0.1.0, proxying the stub's `/v1/chat/completions` (OpenAI calls);
- agentcore-rl-toolkit 0.2.0's `rollout_gateway` (`benchmarks/gateway_toolkit.py`), which
  renders and calls `/generate` as ours does: OpenAI calls, Anthropic calls and streamed
  OpenAI calls, against ours making the same calls.

Each target runs in its own process (stub engine, our gateway, each anchor), so the CPU each
gateway burns is measured on its own (psutil) and "requests/s per core" is requests divided
by the gateway process's CPU seconds (its inverse, CPU per request, is printed for each
pair). Agents are closed-loop, one HTTP connection and one session each. Figures on a shared
2-core box are noisy; the ratios inside one run are what to read.

    python benchmarks/gateway.py                 # levels 1, 64, 256 (+ anchors if installed)
    python benchmarks/gateway.py --levels 1      # one level
    python benchmarks/gateway.py --quick         # small, fast; run by the tests
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil

from gateway_load import (
    ADMIN_TOKEN,
    MESSAGES,
    Call,
    Result,
    add_serve_arguments,
    chat,
    closed_loop,
    direct_generate,
    free_port,
    messages,
    processes,
    serve_gateway,
    serve_stub,
    spawn,
    wait_healthy,
)
from gateway_toolkit import serve_toolkit, toolkit_available, toolkit_sessions

ROOT = Path(__file__).resolve().parent.parent
ME = str(Path(__file__).resolve())
OURS, RLLM, TOOLKIT = "agentrl gateway", "rllm-model-gateway", "toolkit gateway"
sys.path.insert(0, str(ROOT))


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
    return [(h.base_url, h.token) for h in handles]


def bearers(sessions: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"Authorization": f"Bearer {token}"} for _, token in sessions]


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


def rllm_available() -> str | None:
    """None if the anchor can run here, else why not."""
    if importlib.util.find_spec("rllm_model_gateway") is None:
        return (
            "rllm-model-gateway is not installed (pip install rllm-model-gateway==0.1.0 into .venv)"
        )
    return None


@dataclass
class Servers:
    stub: str
    gateway: str
    gateway_admin: str  # the admin API's own listener
    gateway_proc: psutil.Process
    rllm: str | None = None
    rllm_proc: psutil.Process | None = None
    toolkit: str | None = None
    toolkit_proc: psutil.Process | None = None


async def start_servers(
    procs: list[subprocess.Popen[bytes]], anchors: set[str], logdir: Path
) -> Servers:
    stub_port, gw_port, admin_port, rllm_port = free_port(), free_port(), free_port(), free_port()
    stub, gw, rllm = (f"http://127.0.0.1:{p}" for p in (stub_port, gw_port, rllm_port))
    with_rllm = "rllm" in anchors
    procs.append(spawn([ME, "--serve", "stub", "--port", str(stub_port)], logdir / "stub.log"))
    await wait_healthy(stub + "/health", procs[-1], "stub engine")
    serve_gw = [ME, "--serve", "gateway", "--port", str(gw_port), "--engine", stub,
                "--admin-port", str(admin_port)]  # fmt: skip
    procs.append(spawn(serve_gw, logdir / "gateway.log"))
    await wait_healthy(gw + "/health", procs[-1], "agentrl gateway")
    servers = Servers(stub, gw, f"http://127.0.0.1:{admin_port}", psutil.Process(procs[-1].pid))
    if with_rllm:  # the anchor with its CLI defaults (INFO logs), as measured in its write-up
        args = ["-m", "rllm_model_gateway", "--host", "127.0.0.1", "--port", str(rllm_port)]
        procs.append(
            spawn([*args, "--worker", stub + "/v1", "--store", "memory"], logdir / "rllm.log")
        )
        await wait_healthy(rllm + "/health", procs[-1], "rllm-model-gateway")
        servers.rllm, servers.rllm_proc = rllm, psutil.Process(procs[-1].pid)
    if "toolkit" in anchors:
        port = free_port()
        toolkit = f"http://127.0.0.1:{port}"
        serve = [ME, "--serve", "toolkit", "--port", str(port), "--engine", stub]
        procs.append(spawn(serve, logdir / "toolkit.log"))
        await wait_healthy(toolkit + "/healthz", procs[-1], "agentcore-rl-toolkit gateway")
        servers.toolkit, servers.toolkit_proc = toolkit, psutil.Process(procs[-1].pid)
    return servers


async def targets_for(s: Servers, conc: int, prompt: list[int]) -> list[Target]:
    """Fresh sessions for this level: one per agent, as in training."""
    ours = await our_sessions(s.gateway_admin, conc)
    auth = bearers(ours)
    base = "direct /generate"
    targets = [
        Target(base, direct_generate(s.stub, prompt), None, None),
        Target(OURS, chat([u + "/chat/completions" for u, _ in ours], auth), s.gateway_proc, base),
    ]
    if s.toolkit is not None:  # the same calls, Anthropic's and streamed ones too
        sids = await toolkit_sessions(s.toolkit, conc)
        tk_auth = [{"Authorization": f"Bearer {sid}"} for sid in sids]
        proc = s.toolkit_proc
        ours_messages = await our_sessions(s.gateway_admin, conc)
        ours_stream = await our_sessions(s.gateway_admin, conc)
        targets += [
            Target(TOOLKIT, chat([s.toolkit + "/v1/chat/completions"] * conc, tk_auth), proc, base),
            Target(
                OURS + " (anthropic)",
                messages([u + "/messages" for u, _ in ours_messages], bearers(ours_messages)),
                s.gateway_proc,
                base,
            ),
            Target(
                TOOLKIT + " (anthropic)",
                messages([s.toolkit + "/v1/messages"] * conc, tk_auth),
                proc,
                base,
            ),
            Target(
                OURS + " (stream)",
                chat(
                    [u + "/chat/completions" for u, _ in ours_stream],
                    bearers(ours_stream),
                    stream=True,
                ),
                s.gateway_proc,
                base,
            ),
            Target(
                TOOLKIT + " (stream)",
                chat([s.toolkit + "/v1/chat/completions"] * conc, tk_auth, stream=True),
                proc,
                base,
            ),
        ]
    if s.rllm is not None:
        anchor = await rllm_sessions(s.rllm, conc)
        direct = chat([s.stub + "/v1/chat/completions"] * conc, [{}] * conc)
        targets += [
            Target("direct /v1/chat", direct, None, None),
            Target(RLLM, chat(anchor, [{}] * conc), s.rllm_proc, "direct /v1/chat"),
        ]
    return targets


async def run(
    levels: list[int], n: int, anchors: set[str], logdir: Path, failures: list[str]
) -> dict[tuple[str, int], Result]:
    """Every target at every level; a failing anchor is reported in `failures`, not fatal."""
    results: dict[tuple[str, int], Result] = {}
    with processes() as procs:
        servers = await start_servers(procs, anchors, logdir)
        prompt = rendered_prompt()
        for conc in levels:
            for t in await targets_for(servers, conc, prompt):
                try:
                    results[(t.name, conc)] = await closed_loop(t.call, conc, n, t.proc)
                except (aiohttp.ClientError, RuntimeError) as exc:
                    failures.append(f"{t.name} at c={conc}: {exc!r}")
                    if t.name.startswith(OURS):  # ours must not fail: show why, stop
                        print("gateway log tail:", (logdir / "gateway.log").read_text()[-3000:])
                        raise
    return results


def report(
    results: dict[tuple[str, int], Result], levels: list[int], baselines: dict[str, str]
) -> list[str]:
    lines = [
        f"{'target':<28} {'conc':>4} {'p50 ms':>8} {'p99 ms':>9} {'req/s':>8} "
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
                f"{name:<28} {conc:>4} {r.p50_ms:8.2f} {r.p99_ms:9.2f} {r.rps:8.0f} "
                f"{per_core} {added}"
            )
    pairs = [
        (OURS, RLLM, "rllm"),
        (OURS, TOOLKIT, "toolkit"),
        (OURS + " (anthropic)", TOOLKIT + " (anthropic)", "toolkit, anthropic"),
        (OURS + " (stream)", TOOLKIT + " (stream)", "toolkit, streamed"),
    ]
    for conc in levels:
        for mine, theirs, label in pairs:
            a, b = results.get((mine, conc)), results.get((theirs, conc))
            if a and b and a.rps_per_core and b.rps_per_core:
                lines.append(
                    f"c={conc}: req/s per core agentrl/{label} = "
                    f"{a.rps_per_core / b.rps_per_core:.1f}x; req/s ratio {a.rps / b.rps:.1f}x; "
                    f"gateway CPU per request {1e3 / a.rps_per_core:.2f} vs "
                    f"{1e3 / b.rps_per_core:.2f} ms"
                    + (" (goal >= 5x)" if label == "rllm" else " (goal > 1x)")
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
        "--toolkit", action="store_true", help="include the agentcore-rl-toolkit anchor in --quick"
    )
    p.add_argument(
        "--requests", type=int, default=None, help="measured requests per level and target"
    )
    p.add_argument(
        "--levels",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="concurrency levels, comma-separated (1,64,256)",
    )
    add_serve_arguments(p, ("stub", "gateway", "toolkit"))
    args = p.parse_args(argv)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port))
    if args.serve == "gateway":
        asyncio.run(serve_gateway(args.port, args.engine, args.admin_port))
    if args.serve == "toolkit":
        asyncio.run(serve_toolkit(args.port, args.engine))
    levels = args.levels or ([1, 8] if args.quick else [1, 64, 256])
    n = args.requests or (100 if args.quick else 2000)
    anchors: set[str] = set()
    for name, why_not, asked in (
        ("rllm", rllm_available(), args.rllm),
        ("toolkit", toolkit_available(), args.toolkit),
    ):
        if why_not is None and (asked or not args.quick):
            anchors.add(name)
        elif why_not and not args.quick:
            print(f"anchor skipped: {why_not}")
    with tempfile.TemporaryDirectory(prefix="gw-bench-logs-") as logdir:
        failures: list[str] = []
        results = asyncio.run(run(levels, n, anchors, Path(logdir), failures))
    print(
        f"gateway benchmark: {n} requests per level, {os.cpu_count()} cores "
        "(shared with other work: absolute figures are noisy, read the ratios)"
    )
    baselines = {name: "direct /generate" for name, _ in results}
    baselines[RLLM] = "direct /v1/chat"
    print("\n".join(report(results, levels, baselines)))
    for failure in failures:
        print(f"FAILED: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
