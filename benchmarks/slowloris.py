"""The slowloris phase of the fairness benchmark: clients that hold connections open by being
slow, against the gateway's header, body and idle deadlines and its connection cap.

An attacker process (this module) keeps, for `attack_s` seconds, four kinds of connections
open, reopening each as soon as the gateway closes it:
- `headers`: a request whose headers never finish (a byte a second);
- `silent`: a connection that never sends anything;
- `idle`: one finished request, then an idle keep-alive connection;
- `body`: a request of a real session whose body trickles (a byte a second).
Then it stops sending but keeps its sockets open, and after `quiet_s` reports how many the
gateway had closed and how many were still open. Meanwhile the fairness benchmark measures
its victims' latency and samples the gateway's open file descriptors.

The attacker runs on the same machine as the gateway, so its own CPU is kept small: plain
asyncio protocols, and one tick a second writes the next byte on every connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections import Counter
from dataclasses import dataclass, field

KINDS = ("headers", "silent", "idle", "body")
BYTE_EVERY_S = 1.0


@dataclass(frozen=True)
class Target:
    port: int
    path: str  # a session's chat path: the bodies trickle there
    token: str  # that session's token

    def opening(self, kind: str) -> tuple[bytes, bytes]:
        """What a connection of `kind` sends at once, and what it then trickles."""
        if kind == "silent":
            return b"", b""
        if kind == "idle":
            return b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n", b""
        if kind == "headers":  # never ends with a blank line
            return b"POST " + self.path.encode() + b" HTTP/1.1\r\nHost: gw\r\n", b"X-Slow: " + (
                b"a" * 4000
            )
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {self.token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        )
        return head.encode(), b'{"messages": "' + b"a" * 99000  # never complete


@dataclass(eq=False)
class Slow(asyncio.Protocol):
    kind: str
    trickle: bytes
    transport: asyncio.Transport | None = None
    at: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        pass  # an answer (408, 429, /health): dropped, as a slow client would

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def tick(self) -> None:
        if self.transport is not None and self.at < len(self.trickle):
            with contextlib.suppress(OSError, RuntimeError):
                self.transport.write(self.trickle[self.at : self.at + 1])
            self.at += 1


class Attack:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.live: set[Slow] = set()
        self.stats: Counter[str] = Counter()
        self.attacking = True

    async def slot(self, kind: str) -> None:
        """One connection of `kind` at a time, reopened while the attack lasts."""
        loop = asyncio.get_running_loop()
        head, trickle = self.target.opening(kind)
        while self.attacking:
            proto = Slow(kind, trickle)
            try:
                await loop.create_connection(lambda p=proto: p, "127.0.0.1", self.target.port)
            except OSError:
                self.stats["connect_failed"] += 1
                await asyncio.sleep(0.1)
                continue
            self.stats["opened"] += 1
            assert proto.transport is not None
            proto.transport.write(head)
            self.live.add(proto)
            await proto.closed.wait()
            self.live.discard(proto)
            if self.attacking:
                self.stats["closed_during_attack"] += 1
            else:
                self.stats["closed_after_stop"] += 1

    async def ticker(self) -> None:
        while self.attacking:
            for proto in list(self.live):
                proto.tick()
            await asyncio.sleep(BYTE_EVERY_S)


async def attack(
    target: Target, counts: dict[str, int], attack_s: float, quiet_s: float
) -> dict[str, int]:
    run = Attack(target)
    slots = [asyncio.create_task(run.slot(k)) for k in KINDS for _ in range(counts[k])]
    ticker = asyncio.create_task(run.ticker())
    await asyncio.sleep(attack_s)
    # The attack is over: nothing more is sent; the sockets stay open on this side.
    run.attacking = False
    await ticker
    run.stats["held_at_stop"] = len(run.live)
    print("stopped", flush=True)
    await asyncio.wait(slots, timeout=quiet_s)
    run.stats["still_open"] = len(run.live)
    for proto in run.live:
        if proto.transport is not None:
            proto.transport.close()
    for task in slots:
        task.cancel()
    await asyncio.gather(*slots, return_exceptions=True)
    return dict(run.stats)


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
