"""A client-side calls-per-second limiter for agent control calls (invoke and stop).

AgentCore throttles per account; starting 100 episodes in the same millisecond earns
ThrottlingExceptions and retries. The limiter spaces calls evenly at `rate` per second
(with a small burst) by handing out reservations, so it needs no lock and no background
task, and it reads the event loop's clock, so tests drive it with a fake clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class TpsLimiter:
    def __init__(
        self, rate: float, burst: int = 1, clock: Callable[[], float] | None = None
    ) -> None:
        if rate <= 0:
            raise ValueError(f"tps limit must be > 0, got {rate}")
        if burst < 1:
            raise ValueError(f"tps burst must be >= 1, got {burst}")
        self._interval = 1.0 / rate
        self._burst = burst
        self._clock = clock
        self._next_free: float | None = None  # earliest time the next call may start

    def _now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    def reserve(self) -> float:
        """Book the next slot and return how long to wait for it (pure bookkeeping)."""
        now = self._now()
        # An idle limiter regains up to `burst` slots of credit, never more.
        earliest = now - (self._burst - 1) * self._interval
        slot = earliest if self._next_free is None else max(self._next_free, earliest)
        self._next_free = slot + self._interval
        return max(0.0, slot - now)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
