"""A keyed work queue: what the watches want reconciled, handled by a fixed pool of workers.

The shape of client-go's workqueue, small: watch handlers only add keys, so a burst of
thousands of objects waits as a set of keys rather than as thousands of suspended handlers;
a key is queued at most once; one key is never handled by two workers at once (a key added
while it is being handled is handled once more, afterwards); and a failed key can come
back after a delay, tagged with what it was handled for (the spec generation) so that a
newer request need not wait for that retry.

Retrying is a requeue here, not a loop around a call: a retry library (the project uses
stamina for those) would keep a coroutine suspended per failing key, which is exactly what a
burst of keys waiting in a set avoids, and a newer generation must be able to replace a
pending retry. So the delays are computed here, with jitter (`retry_delay`), so that a
thousand experiments that failed together (an API server restart) do not come back together.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
logger = logging.getLogger("agentrl.controller")
# Delays of consecutive failed attempts: 1, 2, 4 ... 60 seconds, each jittered.
RETRY_FIRST_DELAY = 1.0
RETRY_MAX_DELAY = 60.0


def retry_delay(failures: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before attempt `failures + 1`: exponential, capped, in [half, full] of it.

    Half of the delay is kept (so a retry never comes straight back) and half is spread at
    random ("equal jitter"): retries that failed together spread over the second half.
    """
    full = min(RETRY_MAX_DELAY, RETRY_FIRST_DELAY * 2.0 ** max(0, failures - 1))
    return full / 2 + rand() * full / 2


def jittered(delay: float, rand: Callable[[], float] = random.random) -> float:
    """A fixed wait, spread the same way (for waits that are not failures)."""
    return delay / 2 + rand() * delay / 2


class WorkQueue(Generic[K]):
    def __init__(self, handle: Callable[[K], Awaitable[None]], workers: int) -> None:
        self._handle = handle
        self._workers = workers
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._running: set[K] = set()
        self._dirty: set[K] = set()  # added again while running: handle once more
        self._delayed: dict[K, tuple[asyncio.TimerHandle, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start the workers (in the running event loop)."""
        for _ in range(self._workers):
            task = asyncio.create_task(self._work())
            self._tasks.add(task)  # a reference, or the task may be collected mid-flight
            task.add_done_callback(self._tasks.discard)

    def add(self, key: K) -> None:
        """Handle `key` soon; a pending delayed retry of it is superseded."""
        self.cancel(key)
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float, tag: Any = None) -> None:
        """Handle `key` again in `delay` seconds; `tag` says what the retry is for."""
        self.cancel(key)
        handle = asyncio.get_running_loop().call_later(delay, self.add, key)
        self._delayed[key] = (handle, tag)

    def retrying(self, key: K) -> tuple[bool, Any]:
        """(whether a delayed retry of `key` is pending, its tag)."""
        pending = self._delayed.get(key)
        return (False, None) if pending is None else (True, pending[1])

    def cancel(self, key: K) -> None:
        """Drop a pending delayed retry of `key` (a queued or running one goes ahead)."""
        pending = self._delayed.pop(key, None)
        if pending is not None:
            pending[0].cancel()

    async def close(self) -> None:
        for key in list(self._delayed):
            self.cancel(key)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            if key in self._running:  # another worker has it; it runs once more after
                self._dirty.add(key)
                continue
            self._running.add(key)
            try:
                while True:
                    self._dirty.discard(key)
                    try:
                        await self._handle(key)
                    except Exception:  # the handler owns its failures; this is a bug
                        logger.exception("%s: unhandled error in a reconcile", key)
                    if key not in self._dirty:
                        break
            finally:
                self._running.discard(key)
