"""Handing freed memory back to the operating system after large requests.

CPython frees a large request's objects at once, but glibc keeps the pages (its heap, and
mmap'd blocks once its dynamic threshold has grown), so a process that served one huge
prompt stays that large: the gateway kept ~40 MB per 2M-token request after its session
closed, and the issue that led here saw 8 GB never released after a 60 MB request.
`malloc_trim(0)` returns them. It walks the heap, so it runs in a thread (ctypes releases
the GIL) and at most once per `DEBOUNCE_S`, after a large request or when a session that
held one closes. A no-op where glibc is absent.

The process that hosts the gateway also settles its heap once the gateway serves
(`freeze_heap`): what is alive then (modules, the tokenizer and renderer, aiohttp's and
Ray's state, some 120,000 objects) lives as long as the process, yet every full collection
of the cycle collector walked all of it: about 40 ms with the event loop stopped, every few
thousand turns. Frozen, those objects are left out of collections (their memory is still
freed by reference counting); a full collection then walks only what the sessions made.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
from collections.abc import Callable

DEBOUNCE_S = 1.0
LARGE_BYTES = 1 << 20  # a request body this large counts as a large request


def _load_trim() -> Callable[[int], int] | None:
    try:
        fn: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return fn


_TRIM = _load_trim()


def release_now() -> None:
    """Collect garbage and give free heap pages back (synchronous; worker processes)."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def freeze_heap() -> int:
    """Collect once, then take every object alive now out of the collector's reach (for
    the host process, once its gateway serves); the number of objects frozen."""
    gc.collect()  # garbage frozen now could never be collected
    gc.freeze()
    return gc.get_freeze_count()


def thaw_heap() -> None:
    """Undo `freeze_heap` (the hub stopping: a process that goes on collects as before)."""
    gc.unfreeze()


class Releaser:
    """Debounced `malloc_trim` off the event loop, for the gateway process."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self.runs = 0

    def soon(self) -> None:
        if _TRIM is None or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        await asyncio.sleep(DEBOUNCE_S)  # let the request's last objects go first
        assert _TRIM is not None
        await asyncio.to_thread(_TRIM, 0)
        self.runs += 1

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
