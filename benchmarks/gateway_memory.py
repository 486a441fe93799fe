"""Memory per open session: the gateway's RSS while sessions stay open, against the bytes of
the token chains they must keep, measured in the same run.

An open session keeps every token of its conversations (the training data, read back when the
episode ends) and what the next turn's prompt is built from; the goal is that it keeps little
else. "The bytes of its token chains" are 4 bytes per token id (int32, how ids travel to the
render workers): the ids of every turn's prompt and completion, counted once where turns
share a conversation. Processes: a stub SGLang engine, the gateway, and this client; RSS is
the gateway process's (psutil), measured once its memory settled (it hands freed pages back
a second after a large request).

- `sessions`: `--sessions` sessions, each with one large prompt (`--prompt-bytes` of random
  words: about one token per byte with the benchmark's tokenizer), all kept open.
- `conversation`: one session, `--turns` turns, each adding a user message, so its prompt
  grows to about `--prompt-bytes`; kept open.

    python benchmarks/gateway_memory.py           # 30 sessions of 1.9 MB, a 60-turn conversation
    python benchmarks/gateway_memory.py --quick   # small (the tests)
    python benchmarks/gateway_memory.py --json    # one JSON object

Keys: `rss_per_session_ratio` (RSS per open session / its chain bytes, goal <= 3) and
`conversation_ratio` (the growing conversation's RSS / its chain bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import string
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import psutil

from gateway_load import (
    ADMIN_TOKEN,
    add_serve_arguments,
    processes,
    serve_gateway,
    serve_stub,
    start_role,
)

ME = str(Path(__file__).resolve())
MB = 1_000_000
SETTLE_S = 2.5  # the gateway trims freed memory a second after a large request
ID_BYTES = 4  # a token id as int32


async def serve_memory_gateway(port: int, engine_url: str, admin_port: int) -> None:
    """The gateway with room for this benchmark's largest prompts (4 MiB)."""
    from agentrl.api.models import GatewaySpec

    await serve_gateway(
        port, engine_url, admin_port, GatewaySpec(max_request_bytes=4 * 1024 * 1024)
    )


def words(n_bytes: int, seed: int) -> str:
    rng = random.Random(seed)
    vocab = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(500)]
    return " ".join(rng.choice(vocab) for _ in range(n_bytes // 6 + 1))[:n_bytes]


class Client:
    def __init__(self, http: aiohttp.ClientSession, admin: str) -> None:
        self.http, self.admin = http, admin
        self.auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    async def open(self, sid: str) -> tuple[str, dict[str, str]]:
        body = {"session_id": sid, "sampling_params": {"max_new_tokens": 32}}
        async with self.http.post(
            self.admin + "/admin/sessions", json=body, headers=self.auth
        ) as r:
            h = await r.json()
        return h["base_url"] + "/chat/completions", {"Authorization": f"Bearer {h['token']}"}

    async def close(self, sid: str) -> None:
        async with self.http.delete(self.admin + f"/admin/sessions/{sid}", headers=self.auth):
            pass

    async def chat(
        self, target: tuple[str, dict[str, str]], messages: list[dict[str, str]]
    ) -> dict[str, object]:
        url, headers = target
        async with self.http.post(url, json={"messages": messages}, headers=headers) as r:
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {(await r.read())[:300]!r}")
            return await r.json()  # type: ignore[no-any-return]


def tokens_of(answer: dict[str, object]) -> int:
    usage = answer["usage"]
    assert isinstance(usage, dict)
    return int(usage["prompt_tokens"]) + int(usage["completion_tokens"])


@dataclass
class Figures:
    scenario: str
    sessions: int
    chain_tokens: int  # kept by all sessions together
    chain_mb: float  # their bytes as int32
    rss_before_mb: float
    rss_open_mb: float  # with the sessions open
    rss_closed_mb: float  # after they closed
    rss_per_session_mb: float
    ratio: float  # RSS growth / chain bytes


async def settle(proc: psutil.Process) -> float:
    await asyncio.sleep(SETTLE_S)
    return float(proc.memory_info().rss)


async def measure(args: argparse.Namespace, logdir: Path, scenario: str) -> Figures:
    """One scenario, on a fresh gateway (memory another scenario freed would hide growth)."""
    with processes() as procs:
        stub, _ = await start_role(ME, "stub", procs, logdir, "stub engine")
        _, admin = await start_role(ME, "gateway", procs, logdir, "gateway", engine=stub)
        gw = psutil.Process(procs[-1].pid)
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            client = Client(http, admin)
            tag = os.urandom(4).hex()
            # Warm-up: the code paths and the render workers, on a throwaway session.
            warm = await client.open(f"warm-{tag}")
            await client.chat(warm, [{"role": "user", "content": words(args.prompt_bytes, 0)}])
            await client.close(f"warm-{tag}")
            before = await settle(gw)
            if scenario == "sessions":  # many sessions, one large prompt each
                sids, tokens = [f"s{i}-{tag}" for i in range(args.sessions)], 0
                for i, sid in enumerate(sids):
                    text = words(args.prompt_bytes, i + 1)
                    answer = await client.chat(
                        await client.open(sid), [{"role": "user", "content": text}]
                    )
                    tokens += tokens_of(answer)
            else:  # one conversation that grows turn by turn
                sids = [f"conv-{tag}"]
                target = await client.open(sids[0])
                messages: list[dict[str, str]] = [{"role": "system", "content": "You help."}]
                step = args.prompt_bytes // args.turns
                for t in range(args.turns):
                    messages.append({"role": "user", "content": words(step, 1000 + t)})
                    answer = await client.chat(target, messages)
                    choices = answer["choices"]
                    assert isinstance(choices, list)
                    messages.append(
                        {"role": "assistant", "content": choices[0]["message"]["content"]}
                    )
                tokens = tokens_of(answer)  # the last turn's prompt holds all earlier turns
            opened = await settle(gw)
            for sid in sids:
                await client.close(sid)
            closed = await settle(gw)
    chain = tokens * ID_BYTES
    return Figures(
        scenario=scenario,
        sessions=len(sids),
        chain_tokens=tokens,
        chain_mb=round(chain / MB, 2),
        rss_before_mb=round(before / MB, 1),
        rss_open_mb=round(opened / MB, 1),
        rss_closed_mb=round(closed / MB, 1),
        rss_per_session_mb=round((opened - before) / len(sids) / MB, 2),
        ratio=round((opened - before) / chain, 3),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="4 sessions of 200 kB (the tests)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sessions", type=int, default=None, help="open sessions (30)")
    ap.add_argument("--prompt-bytes", type=int, default=None, help="prompt size (1.9 MB)")
    ap.add_argument("--turns", type=int, default=None, help="turns of the conversation (60)")
    add_serve_arguments(ap)
    args = ap.parse_args(argv)
    if args.serve == "stub":
        asyncio.run(serve_stub(args.port))
    if args.serve == "gateway":
        asyncio.run(serve_memory_gateway(args.port, args.engine, args.admin_port))
    args.sessions = args.sessions or (4 if args.quick else 30)
    args.prompt_bytes = args.prompt_bytes or (200_000 if args.quick else 1_900_000)
    args.turns = args.turns or (10 if args.quick else 60)
    with tempfile.TemporaryDirectory(prefix="gw-mem-logs-") as logdir:
        sessions = asyncio.run(measure(args, Path(logdir), "sessions"))
        conversation = asyncio.run(measure(args, Path(logdir), "conversation"))
    result = {
        "rss_per_session_ratio": sessions.ratio,
        "conversation_ratio": conversation.ratio,
        "goals_met": sessions.ratio <= 3.0 and conversation.ratio <= 3.0,
        "scenarios": [asdict(sessions), asdict(conversation)],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"memory per open session, {os.cpu_count()} cores (RSS of the gateway process)")
    for f in (sessions, conversation):
        print(
            f"{f.scenario:>12}: {f.sessions} open, {f.chain_tokens} tokens kept ({f.chain_mb} MB "
            f"as int32); RSS {f.rss_before_mb} -> {f.rss_open_mb} MB open -> {f.rss_closed_mb} MB "
            f"closed; {f.rss_per_session_mb} MB per session, {f.ratio}x its chains (goal <= 3x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
