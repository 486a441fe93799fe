"""Streaming cost: gateway CPU for one long streamed answer against the same answer unstreamed,
and what that stream costs the other sessions, measured in the same run.

Processes: a stub SGLang engine, the gateway, and this client. The engine "samples" a fixed
completion of `--tokens` tokens (a reasoning block, then text, then the end-of-turn token) at
`--rate` tokens/s, streamed the way SGLang streams: incremental chunks (the server flag
`--incremental-streaming-output`, which the launcher sets) or cumulative ones (SGLang's
default), one every `stream_interval` tokens. The gateway's CPU seconds (psutil) are counted
over each request alone: the same answer unstreamed, then streamed; the median of
`--repeats` each. Then `--victims` sessions call the gateway closed-loop with a small request,
alone (baseline) and while one long answer streams, for the same wall time.

    python benchmarks/gateway_stream.py             # 16k tokens, both engine modes
    python benchmarks/gateway_stream.py --quick     # 2k tokens (the tests)
    python benchmarks/gateway_stream.py --json      # one JSON object

Keys: `stream_cpu_ratio_16k` (streamed / unstreamed gateway CPU, incremental engine chunks;
goal <= 1.5), `victim_p99_ratio` (other sessions' p99 during the stream / baseline; goal <= 2),
and the same figures for cumulative engine chunks. On a shared 2-core box the figures are
noisy: read the ratios, which are measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from gateway_load import (
    ADMIN_TOKEN,
    MESSAGES,
    add_serve_arguments,
    cpu_seconds,
    free_port,
    processes,
    serve_gateway,
    spawn,
    wait_healthy,
)

ME = str(Path(__file__).resolve())
WORDS = ("the gateway streams every answer as it is sampled so an agent sees its text early "
         "while the trainer records exactly the tokens the engine returned")  # fmt: skip


VOCAB = WORDS.split(" ")


def completion_text(tokens: int) -> str:
    """Reasoning, then an answer: enough words for `tokens` tokens of the tiny tokenizer."""
    rng = random.Random(5)
    reasoning = " ".join(rng.choice(VOCAB) for _ in range(tokens // 12))
    answer = " ".join(rng.choice(VOCAB) for _ in range(tokens))
    return f"<think>\n{reasoning}\n</think>\n\n{answer}"


def long_completion(tok: object, tokens: int) -> list[int]:
    ids = list(tok.encode(completion_text(tokens)))[: tokens - 1]  # type: ignore[attr-defined]
    return [*ids, tok.convert_tokens_to_ids("<|im_end|>")]  # type: ignore[attr-defined]


async def serve_stub(port: int, tokens: int, rate: float, incremental: bool) -> None:
    from tests.support.sglang_stub import StubEngine
    from tests.support.tiny_tokenizer import write_checkpoint

    from agentrl.bundle.gateway.tokenizer import load_tokenizer

    tok = load_tokenizer(str(write_checkpoint(Path(tempfile.mkdtemp(prefix="gw-stream-")))))
    long = long_completion(tok, tokens)
    short = list(tok.encode("The answer is 42."))

    def respond(prompt: list[int], params: dict[str, object]) -> list[int]:
        # The long answer's session sets its budget to the answer's length; victims ask for 16.
        return long if params.get("max_new_tokens") == tokens else short

    engine = StubEngine(
        vocab_size=len(tok.get_vocab()),
        responder=respond,
        token_delay_s=1.0 / rate if rate > 0 else 0.0,
        incremental_stream=incremental,
    )
    await engine.start(port=port)
    await asyncio.Event().wait()


# ---- the client ------------------------------------------------------------------------------
async def open_session(admin: str, tokens: int) -> tuple[str, dict[str, str]]:
    from agentrl.bundle.gateway import GatewayClient

    client = GatewayClient(admin, ADMIN_TOKEN)
    try:
        h = await client.create_session(f"stream-{os.urandom(6).hex()}", {"max_new_tokens": tokens})
    finally:
        await client.aclose()
    return h.base_url + "/chat/completions", {"Authorization": f"Bearer {h.token}"}


def long_body(stream: bool) -> bytes:
    messages = [{"role": "user", "content": "Please write the long answer."}]
    return json.dumps({"model": "m", "messages": messages, "stream": stream}).encode()


async def long_answer(
    http: aiohttp.ClientSession, target: tuple[str, dict[str, str]], stream: bool
) -> int:
    """One long answer; returns the content characters received (streamed: from the deltas)."""
    url, headers = target
    async with http.post(url, data=long_body(stream), headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"long answer: HTTP {r.status}: {(await r.read())[:300]!r}")
        if not stream:
            return len(json.loads(await r.read())["choices"][0]["message"]["content"])
        text, buffer = 0, b""
        async for piece in r.content.iter_any():
            buffer += piece
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                data = event.removeprefix(b"data: ")
                if data.startswith(b"{"):
                    choices = json.loads(data).get("choices") or [{}]
                    text += len(choices[0].get("delta", {}).get("content") or "")
        return text


async def cpu_of(
    proc: psutil.Process, admin: str, tokens: int, stream: bool, repeats: int
) -> tuple[float, int]:
    """Median gateway CPU seconds of one long answer (a fresh session each), and its length."""
    seconds, chars = [], 0
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for _ in range(repeats):
            target = await open_session(admin, tokens)
            await asyncio.sleep(0.3)  # let the session's own work settle
            c0 = cpu_seconds(proc)
            chars = await long_answer(http, target, stream)
            seconds.append(cpu_seconds(proc) - c0)
    return statistics.median(seconds), chars


async def victims(admin: str, n: int, until: asyncio.Event, latencies: list[float]) -> int:
    body = json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 16}).encode()
    targets = [await open_session(admin, 64) for _ in range(n)]
    errors = 0

    async def agent(url: str, headers: dict[str, str]) -> None:
        nonlocal errors
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
            while not until.is_set():
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    errors += r.status != 200
                latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(agent(u, h) for u, h in targets))
    return errors


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] * 1e3


@dataclass
class Mode:
    engine: str  # "incremental" or "cumulative"
    tokens: int
    unstreamed_cpu_s: float
    streamed_cpu_s: float
    stream_cpu_ratio: float
    stream_seconds: float
    content_chars: tuple[int, int]  # unstreamed, streamed (equal: nothing lost)
    base_p99_ms: float
    p99_ms: float
    victim_p99_ratio: float
    victim_errors: int


async def start(
    incremental: bool, rate: float, args: argparse.Namespace, logdir: Path, procs: list[Any]
) -> tuple[str, psutil.Process]:
    """A stub engine (its tokens/s, 0: as fast as it can) and a gateway in front of it."""
    stub_port, port, admin_port = free_port(), free_port(), free_port()
    stub = f"http://127.0.0.1:{stub_port}"
    serve = [ME, "--serve", "stub", "--port", str(stub_port), "--tokens", str(args.tokens),
             "--rate", str(rate)] + (["--incremental"] if incremental else [])  # fmt: skip
    procs.append(spawn(serve, logdir / "stub.log"))
    await wait_healthy(stub + "/health", procs[-1], "stub engine")
    gw = [ME, "--serve", "gateway", "--port", str(port), "--engine", stub,
          "--admin-port", str(admin_port)]  # fmt: skip
    procs.append(spawn(gw, logdir / "gateway.log"))
    await wait_healthy(f"http://127.0.0.1:{port}/health", procs[-1], "gateway")
    return f"http://127.0.0.1:{admin_port}", psutil.Process(procs[-1].pid)


async def run_mode(incremental: bool, args: argparse.Namespace, logdir: Path) -> Mode:
    # CPU: the engine as fast as it can go, so only the gateway's own work is counted (a
    # paced engine adds a wake-up per chunk, whatever the gateway does with it).
    with processes() as procs:
        admin, proc = await start(incremental, 0.0, args, logdir, procs)
        await cpu_of(proc, admin, args.tokens, True, 1)  # warm-up: first calls, code paths
        await cpu_of(proc, admin, args.tokens, False, 1)
        plain, plain_chars = await cpu_of(proc, admin, args.tokens, False, args.repeats)
        streamed, streamed_chars = await cpu_of(proc, admin, args.tokens, True, args.repeats)
    # Victims: a baseline window, then one long answer streamed at `--rate` alongside.
    with processes() as procs:
        admin, proc = await start(incremental, args.rate, args, logdir, procs)
        t0 = time.perf_counter()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            await long_answer(http, await open_session(admin, args.tokens), True)
        stream_s = time.perf_counter() - t0
        base: list[float] = []
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(stream_s, stop.set)
        errors = await victims(admin, args.victims, stop, base)
        during: list[float] = []
        stop = asyncio.Event()
        load = asyncio.create_task(victims(admin, args.victims, stop, during))
        await asyncio.sleep(0.2)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            await long_answer(http, await open_session(admin, args.tokens), True)
        stop.set()
        errors += await load
    return Mode(
        engine="incremental" if incremental else "cumulative",
        tokens=args.tokens,
        unstreamed_cpu_s=round(plain, 4),
        streamed_cpu_s=round(streamed, 4),
        stream_cpu_ratio=round(streamed / plain, 3),
        stream_seconds=round(stream_s, 2),
        content_chars=(plain_chars, streamed_chars),
        base_p99_ms=round(p99(base), 2),
        p99_ms=round(p99(during), 2),
        victim_p99_ratio=round(p99(during) / p99(base), 3),
        victim_errors=errors,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="2k tokens, one repeat (the tests)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--tokens", type=int, default=None, help="completion length (16384)")
    ap.add_argument(
        "--rate", type=float, default=None, help="engine tokens/s of the victims' stream (4000)"
    )
    ap.add_argument("--repeats", type=int, default=None, help="answers measured per kind (5)")
    ap.add_argument("--victims", type=int, default=4, help="concurrent small sessions")
    add_serve_arguments(ap)
    ap.add_argument("--incremental", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.tokens = args.tokens or (2048 if args.quick else 16384)
    args.rate = 4000.0 if args.rate is None else args.rate
    args.repeats = args.repeats or (1 if args.quick else 5)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port, args.tokens, args.rate, args.incremental))
    if args.serve == "gateway":
        asyncio.run(serve_gateway(args.port, args.engine, args.admin_port))
    with tempfile.TemporaryDirectory(prefix="gw-stream-logs-") as logdir:
        modes = [asyncio.run(run_mode(inc, args, Path(logdir))) for inc in (True, False)]
    inc, cum = modes
    result = {
        "stream_cpu_ratio_16k": inc.stream_cpu_ratio,
        "victim_p99_ratio": inc.victim_p99_ratio,
        "stream_cpu_ratio_cumulative": cum.stream_cpu_ratio,
        "victim_p99_ratio_cumulative": cum.victim_p99_ratio,
        "tokens": args.tokens,
        "goals_met": inc.stream_cpu_ratio <= 1.5 and inc.victim_p99_ratio <= 2.0,
        "modes": [asdict(m) for m in modes],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"streaming: {args.tokens} tokens at {args.rate:g} tokens/s, {args.victims} victim "
        f"sessions, {os.cpu_count()} cores (shared: read the ratios)"
    )
    for m in modes:
        print(
            f"{m.engine:>11} engine chunks: gateway CPU unstreamed "
            f"{m.unstreamed_cpu_s * 1e3:.1f} ms, "
            f"streamed {m.streamed_cpu_s * 1e3:.1f} ms ({m.stream_cpu_ratio:.2f}x, goal <= 1.5x); "
            f"victims' p99 {m.base_p99_ms:.1f} -> {m.p99_ms:.1f} ms ({m.victim_p99_ratio:.2f}x, "
            f"goal <= 2x), errors {m.victim_errors}; content {m.content_chars}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
