"""Where one session's CPU goes: the gateway's CPU per request at one closed-loop session,
with parts of it answered in process, against the whole gateway in the same run.

Targets, each a server process of its own whose CPU is counted (per thread, from the
scheduler, as in `gateway.py`), all called with the same OpenAI chat request:

- `gateway`: the whole gateway, its engine the stub in another process;
- `engine in process`: the same gateway, its engine client swapped for one that answers the
  stub's completion at once (no HTTP to the engine);
- `turn in process`: the same gateway, the whole turn (prompt, engine, record, parse)
  swapped for a fixed answer: the HTTP server and the frontend (auth, admission, the
  request's translation, the response) only;
- `bare aiohttp`: an aiohttp application with one handler that reads the body and returns a
  fixed answer of the same size;
- `bare protocol`: an `asyncio.Protocol` that frames the request by its Content-Length and
  writes the same answer.

The differences are the cost of each part: the engine call (gateway - engine in process),
the turn (engine in process - turn in process), the frontend (turn in process - bare
aiohttp), aiohttp's server over a bare protocol (bare aiohttp - bare protocol). Targets
are measured in rounds, each round every target in turn; the median of the rounds is shown.

    python benchmarks/gateway_profile.py            # 3 rounds of 3,000 requests a target
    python benchmarks/gateway_profile.py --quick    # short (the tests)
    python benchmarks/gateway_profile.py --json     # one JSON object: cpu_us per target
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import psutil

from gateway import our_sessions
from gateway_load import (
    COMPLETION_TOKENS,
    add_serve_arguments,
    chat,
    closed_loop,
    processes,
    serve_gateway,
    serve_stub,
    start_role,
)

ME = str(Path(__file__).resolve())
TARGETS = ("gateway", "engine in process", "turn in process", "bare aiohttp", "bare protocol")
ROLES = ("stub", "gateway", "engine-in-process", "turn-in-process", "aiohttp", "protocol")
PATH = "/sessions/s/v1/chat/completions"


def fixed_answer() -> bytes:
    """What the gateway answers the benchmark's request, in shape and size."""
    from agentrl.bundle.gateway import openai_api
    from agentrl.bundle.gateway.chat import ModelOutput

    out = ModelOutput("x" * 40, None, prompt_tokens=40, completion_tokens=COMPLETION_TOKENS)
    return orjson.dumps(openai_api.response(out, "m"))  # as the gateway encodes it


# ---- the swapped parts (in the gateway's process) ------------------------------------------
def engine_in_process(server: Any) -> None:
    from agentrl.bundle.gateway.sglang import Completion

    ids = list(range(100, 100 + COMPLETION_TOKENS))  # what the stub engine samples

    class Engine:
        async def generate(
            self, prompt: Sequence[int], params: Any, rid: str, timeout_s: float, **_: Any
        ) -> Completion:
            return Completion(ids, [-0.5] * len(ids), "stop", None, len(prompt), None, rid)

    server.frontend.runner.engine = Engine()


def turn_in_process(server: Any) -> None:
    from agentrl.bundle.gateway.chat import ModelOutput

    async def run(session: Any, req: Any, on_tokens: Any = None) -> ModelOutput:
        return ModelOutput("x" * 40, None, prompt_tokens=40, completion_tokens=COMPLETION_TOKENS)

    server.frontend.runner.run = run


# ---- bare servers -------------------------------------------------------------------------
async def serve_bare_aiohttp(port: int) -> None:
    from aiohttp import web

    answer = fixed_answer()

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=answer, content_type="application/json")

    app = web.Application()
    app.router.add_post("/sessions/{sid}/v1/chat/completions", handle)
    app.router.add_get("/health", handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


class _Bare(asyncio.Protocol):
    """Frames each request by its Content-Length and writes the fixed answer (to any request,
    `/health` included): what any HTTP server must do at the least."""

    def __init__(self, answer: bytes) -> None:
        self.answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        self.answer += b"Content-Length: %d\r\n\r\n" % len(answer) + answer
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            at = head.find(b"\r\ncontent-length:")
            eol = head.find(b"\r\n", at + 2)
            length = int(head[at + 17 : eol if eol >= 0 else None]) if at >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self.transport.write(self.answer)


async def serve_bare_protocol(port: int) -> None:
    answer = fixed_answer()
    await asyncio.get_running_loop().create_server(lambda: _Bare(answer), "127.0.0.1", port)
    await asyncio.Event().wait()


# ---- the run --------------------------------------------------------------------------------
async def measure(rounds: int, n: int, logdir: Path) -> dict[str, list[float]]:
    """CPU µs per request of each target, one figure per round."""
    cpu: dict[str, list[float]] = {t: [] for t in TARGETS}
    with processes() as procs:
        stub, _ = await start_role(ME, "stub", procs, logdir, "stub engine")
        calls = {}
        for target, role in zip(TARGETS, ROLES[1:], strict=True):
            url, admin = await start_role(ME, role, procs, logdir, target, engine=stub)
            if role in ("aiohttp", "protocol"):
                urls, headers = [url + PATH], [{}]
            else:
                sessions = await our_sessions(admin, 1)
                urls = [sessions[0][0] + "/chat/completions"]
                headers = [{"Authorization": f"Bearer {sessions[0][1]}"}]
            calls[target] = (chat(urls, headers), psutil.Process(procs[-1].pid))
        for _ in range(rounds):
            for target, (call, proc) in calls.items():
                result = await closed_loop(call, 1, n, proc)
                assert result.rps_per_core, target
                cpu[target].append(1e6 / result.rps_per_core)
    return cpu


def report(cpu: dict[str, list[float]]) -> tuple[dict[str, float], list[str]]:
    med = {t: statistics.median(v) for t, v in cpu.items()}
    full = med["gateway"]
    lines = [f"{'target':<20} {'CPU µs/request':>14} {'/ gateway':>9}   rounds"]
    for t in TARGETS:
        rounds = ", ".join(f"{v:.0f}" for v in cpu[t])
        lines.append(f"{t:<20} {med[t]:14.0f} {med[t] / full:9.2f}   {rounds}")
    parts = [
        ("engine call", med["gateway"] - med["engine in process"]),
        ("turn (prompt, record, parse)", med["engine in process"] - med["turn in process"]),
        ("frontend", med["turn in process"] - med["bare aiohttp"]),
        ("aiohttp over a bare protocol", med["bare aiohttp"] - med["bare protocol"]),
        ("bare protocol (the floor)", med["bare protocol"]),
    ]
    lines += [f"  {name:<30} {v:6.0f} µs ({v / full:.0%})" for name, v in parts]
    return med, lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="1 round of 200 requests a target")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--rounds", type=int, default=None, help="rounds (3)")
    p.add_argument("--requests", type=int, default=None, help="requests a target and round")
    add_serve_arguments(p, ROLES)
    args = p.parse_args(argv)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port))
    if args.serve in ("gateway", "engine-in-process", "turn-in-process"):
        swap = {"engine-in-process": engine_in_process, "turn-in-process": turn_in_process}
        started = swap.get(args.serve)
        asyncio.run(serve_gateway(args.port, args.engine, args.admin_port, started=started))
    if args.serve == "aiohttp":
        asyncio.run(serve_bare_aiohttp(args.port))
    if args.serve == "protocol":
        asyncio.run(serve_bare_protocol(args.port))
    rounds = args.rounds or (1 if args.quick else 3)
    n = args.requests or (200 if args.quick else 3000)
    with tempfile.TemporaryDirectory(prefix="gw-profile-logs-") as logdir:
        cpu = asyncio.run(measure(rounds, n, Path(logdir)))
    med, lines = report(cpu)
    if args.json:
        print(json.dumps({f"cpu_us_{t.replace(' ', '_')}": round(v, 1) for t, v in med.items()}))
    else:
        print(f"gateway CPU per request at one session: {rounds} round(s) of {n} requests")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
