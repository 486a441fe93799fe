"""Admission: a bound on the gateway's requests in flight, shared fairly between sessions.

A session's turns run one at a time (its history is one conversation), so its further
requests wait for their turn, and they all hold a slot of `max_in_flight`. With a plain
first-come bound, one agent that fires a thousand requests at once takes every slot and
every other session gets 429. Here, when the gateway is full, a new request from a session
with few requests displaces the newest *waiting* request of the session with the most
(longest-queue drop): the displaced one gets 429 and `Retry-After` (it did no work yet),
the newcomer runs. A session can therefore always get a request in unless every session
already holds as many as it does; a flood only ever pushes back its own session.

Requests of one session are served in arrival order (`Ticket.turn`). Everything here is
O(1) per request: sessions are kept in buckets by their number of requests.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from agentrl.bundle.gateway.chat import ApiError


def busy(message: str) -> ApiError:
    return ApiError(429, message, kind="rate_limit_error")


@dataclass(eq=False)
class Ticket:
    """One admitted request: its place in its session's queue."""

    sid: str
    admission: Admission
    waiter: asyncio.Future[None] | None = None  # set while it waits for its turn
    running: bool = False  # its session's turn: never displaced
    done: bool = False

    async def turn(self) -> None:
        """Wait until the session's earlier requests are done; raises 429 if displaced."""
        if self.waiter is not None:
            try:
                await self.waiter
            finally:
                self.waiter = None
        self.running = True

    def release(self) -> None:
        waiter = self.waiter
        if waiter is not None and waiter.done() and not waiter.cancelled():
            waiter.exception()  # displaced before it waited: nothing else will look at it
        if not self.done:
            self.done = True
            self.admission._leave(self)


@dataclass
class _Queue:
    tickets: deque[Ticket] = field(default_factory=deque)


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._queues: dict[str, _Queue] = {}
        # requests held -> sessions holding that many (dicts as ordered sets)
        self._buckets: dict[int, dict[str, None]] = {}
        self._most = 0  # the largest non-empty bucket (or less, when it emptied)
        self.displaced = 0  # requests answered 429 to make room for another session's

    def held(self, sid: str) -> int:
        queue = self._queues.get(sid)
        return len(queue.tickets) if queue is not None else 0

    def admit(self, sid: str) -> Ticket:
        """A ticket for a request of `sid`, or 429 when it cannot fairly be taken."""
        mine = self.held(sid)
        if self.total >= self.limit:
            victim = self._heaviest()
            if victim is None or victim == sid or self.held(victim) <= mine + 1:
                raise busy(
                    f"gateway busy: {self.total} requests in flight, this session holds {mine}; "
                    "retry later"
                )
            self._displace(victim)
        queue = self._queues.setdefault(sid, _Queue())
        ticket = Ticket(sid, self)
        if queue.tickets:
            ticket.waiter = asyncio.get_running_loop().create_future()
        queue.tickets.append(ticket)
        self._moved(sid, mine, mine + 1)
        self.total += 1
        return ticket

    def _heaviest(self) -> str | None:
        while self._most > 0 and not self._buckets.get(self._most):
            self._most -= 1
        bucket = self._buckets.get(self._most)
        return next(iter(bucket)) if bucket else None

    def _displace(self, sid: str) -> None:
        """Turn away the newest waiting request of `sid` (it holds more than one)."""
        queue = self._queues[sid]
        ticket = queue.tickets[-1]
        assert not ticket.running and ticket.waiter is not None
        ticket.waiter.set_exception(
            busy(
                f"gateway busy: this session has {len(queue.tickets)} requests queued while "
                "other sessions wait; retry later"
            )
        )
        self.displaced += 1
        ticket.release()

    def _leave(self, ticket: Ticket) -> None:
        queue = self._queues[ticket.sid]
        n = len(queue.tickets)
        head = queue.tickets[0] is ticket
        queue.tickets.remove(ticket)  # O(1) for the head and the tail, the usual cases
        self._moved(ticket.sid, n, n - 1)
        self.total -= 1
        if not queue.tickets:
            del self._queues[ticket.sid]
        elif head:
            nxt = queue.tickets[0]
            if nxt.waiter is not None and not nxt.waiter.done():
                nxt.waiter.set_result(None)

    def _moved(self, sid: str, old: int, new: int) -> None:
        if old:
            bucket = self._buckets[old]
            del bucket[sid]
            if not bucket:
                del self._buckets[old]
        if new:
            self._buckets.setdefault(new, {})[sid] = None
            self._most = max(self._most, new)
