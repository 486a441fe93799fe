"""The slowloris phase of the fairness benchmark: clients that hold connections open by being
slow, against the gateway's header, body and idle deadlines and its connection cap.

An attacker process (this module, run with `--attack`) keeps, for `attack_s` seconds, four
kinds of connections open, reopening each as soon as the gateway closes it:
- `headers`: a request whose headers never finish (a byte a second);
- `silent`: a connection that never sends anything;
- `idle`: one finished request, then an idle keep-alive connection;
- `body`: a request of a real session whose body trickles (a byte a second).
Then it stops sending but keeps its sockets open, and after `quiet_s` reports how many the
gateway had closed and how many were still open. Meanwhile the fairness benchmark measures
its victims' latency and samples the gateway's open file descriptors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections import Counter
from dataclasses import dataclass

KINDS = ("headers", "silent", "idle", "body")


@dataclass(frozen=True)
class Target:
    port: int
    path: str  # a session's chat path: the bodies trickle there
    token: str  # that session's token


BYTE_EVERY_S = 1.0


async def _closed(reader: asyncio.StreamReader, wait_s: float) -> bool:
    """Whether the server closed the connection within `wait_s` (what it sent is dropped)."""
    try:
        async with asyncio.timeout(wait_s):
            while await reader.read(65536):
                pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


async def _behave(kind: str, writer: asyncio.StreamWriter, target: Target) -> bytes:
    """The opening bytes of a connection of `kind`; what it then trickles, byte by byte."""
    if kind == "silent":
        return b""
    if kind == "idle":
        writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        return b""
    if kind == "headers":
        writer.write(b"POST " + target.path.encode() + b" HTTP/1.1\r\nHost: gw\r\n")
        return b"X-Slow: " + b"a" * 4000  # never ends with a blank line
    head = (
        f"POST {target.path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {target.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    writer.write(head.encode())
    return b'{"messages": "' + b"a" * 99000  # never complete


async def _slot(kind: str, target: Target, until: float, stats: Counter[str]) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
        except OSError:
            stats["connect_failed"] += 1
            await asyncio.sleep(0.1)
            continue
        stats["opened"] += 1
        trickle = await _behave(kind, writer, target)
        closed, at = False, 0
        while not closed and loop.time() < until:
            if trickle and at < len(trickle):
                with contextlib.suppress(OSError):
                    writer.write(trickle[at : at + 1])
                at += 1
            closed = await _closed(reader, min(BYTE_EVERY_S, max(0.0, until - loop.time())))
        if closed:
            stats["closed_during_attack"] += 1
            writer.close()
            continue
        stats["held_at_stop"] += 1
        _HELD.append((reader, writer))
        return


_HELD: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []


async def attack(
    target: Target, counts: dict[str, int], attack_s: float, quiet_s: float
) -> dict[str, int]:
    loop = asyncio.get_running_loop()
    stats: Counter[str] = Counter()
    until = loop.time() + attack_s
    await asyncio.gather(
        *(_slot(kind, target, until, stats) for kind in KINDS for _ in range(counts[kind]))
    )
    # The attack is over: nothing more is sent; the sockets stay open on this side.
    print("stopped", flush=True)
    closed = await asyncio.gather(*(_closed(r, quiet_s) for r, _ in _HELD))
    stats["closed_after_stop"] = sum(closed)
    stats["still_open"] = len(closed) - sum(closed)
    for _, writer in _HELD:
        writer.close()
    return dict(stats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", required=True)  # a session's chat path (bodies trickle there)
    ap.add_argument("--token", required=True)
    ap.add_argument("--counts", required=True, help='JSON: {"headers": n, ...}')
    ap.add_argument("--attack-s", type=float, required=True)
    ap.add_argument("--quiet-s", type=float, required=True)
    args = ap.parse_args(argv)
    counts = json.loads(args.counts)
    stats = asyncio.run(
        attack(Target(args.port, args.path, args.token), counts, args.attack_s, args.quiet_s)
    )
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
