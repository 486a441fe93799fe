"""The rollout's process-wide state: one event loop thread, one context, one metrics sink.

slime calls `generate_rollout` synchronously, once per step, from its RolloutManager
actor. The agent backend (pools, the HTTP callback listener), the gateway client and the
`maxConcurrent` semaphore must outlive a single call, so they live on an event loop in a
daemon thread, and each call submits one coroutine to it. If the calling thread is
interrupted, the batch is cancelled and the call returns only after every episode has
closed its sessions.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.agents.pool import install_discard_counter
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.report import MetricsDelta

log = logging.getLogger("agentrl.rollout")
T = TypeVar("T")

FLUSH_INTERVAL_S = 5.0  # how stale sessions_in_flight and pool gauges may get
CANCEL_GRACE_S = 120.0  # how long an interrupted call waits for episodes to close sessions


async def build_context(
    config: RuntimeConfig,
    sessions: Any,
    *,
    listen_host: str,
    advertise_host: str,
) -> RolloutContext:
    """The rollout's long-lived pieces for `config`: the agent backend the spec names (an
    HTTP agent's results relayed to its listener through `sessions`, the gateway's admin
    client) and the one `maxConcurrent` semaphore train and eval share. The pods' rollout
    builds its context here, and so does `agentrl rehearse`, so that a rehearsal runs the
    backend, its pool and its concurrency as the pods do."""
    from agentrl.bundle.agents import build_backend

    backend = await build_backend(
        config, callbacks=sessions, listen_host=listen_host, advertise_host=advertise_host
    )
    return RolloutContext(
        sessions=sessions,
        backend=backend,
        semaphore=asyncio.Semaphore(config.spec.agent.max_concurrent),
    )


class MetricsSink(Protocol):
    def push(self, delta: MetricsDelta) -> None:
        """Ship a delta; may return before it is applied."""
        ...

    def drain(self) -> None:
        """Block until every delta pushed so far is applied."""
        ...


class LoopThread:
    """An asyncio loop on a daemon thread; `call` runs a coroutine there and waits."""

    def __init__(
        self,
        name: str = "agentrl-rollout",
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self.loop = loop_factory()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop. If the caller is interrupted (or `timeout` passes), the
        task is cancelled and the call returns only once it has finished cleaning up."""
        done = threading.Event()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda _: done.set())
            tasks.append(task)

        def cancel() -> None:  # runs on the loop, after `start` (FIFO): the task exists
            tasks[0].cancel()

        self.loop.call_soon_threadsafe(start)
        try:
            if not done.wait(timeout):
                raise TimeoutError(f"rollout call did not finish within {timeout}s")
        except BaseException:
            self.loop.call_soon_threadsafe(cancel)
            done.wait(CANCEL_GRACE_S)
            raise
        return tasks[0].result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


class RolloutRuntime:
    """Builds the context lazily inside the loop, flushes metrics, runs batches.

    `loop_factory` makes the loop (tests and the benchmark pass a simulated-clock loop)."""

    def __init__(
        self,
        build: Callable[[], Awaitable[RolloutContext]],
        sink: MetricsSink,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self._build = build
        self._sink = sink
        self._thread = LoopThread(loop_factory=loop_factory)
        self._ctx: RolloutContext | None = None
        self._discards = install_discard_counter()

    async def context(self) -> RolloutContext:
        if self._ctx is None:
            self._ctx = await self._build()
        return self._ctx

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one batch; metrics are flushed periodically while it runs (between batches
        nothing changes, and a timer there would keep a simulated clock spinning)."""
        return self._thread.call(self._flushing(coro))

    async def _flushing(self, coro: Coroutine[Any, Any, T]) -> T:
        flusher = asyncio.create_task(self._flush_forever())
        try:
            return await coro
        finally:
            flusher.cancel()
            self.flush()  # a failed batch's counts too (its episodes were cancelled)

    def flush(self) -> None:
        """Ship what was recorded so far (called at batch end and periodically)."""
        if self._ctx is None:
            return
        self._ctx.recorder.pool(self._ctx.backend.pool_stats(), self._discards.take())
        delta = self._ctx.recorder.take()
        if delta:
            try:
                self._sink.push(delta)
            except Exception:  # metrics must never fail a training step
                log.exception("pushing rollout metrics failed; they are lost for this flush")

    async def flush_and_drain(self) -> None:
        """Batch end: ship everything and wait until the registry shows it."""
        self.flush()
        try:
            await asyncio.to_thread(self._sink.drain)
        except Exception:
            log.exception("the metrics hub did not apply the rollout metrics")

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            self.flush()

    async def _shutdown(self) -> None:
        if self._ctx is not None:
            self.flush()
            await self._ctx.backend.aclose()
            aclose = getattr(self._ctx.sessions, "aclose", None)
            if aclose is not None:
                await aclose()

    def close(self) -> None:
        self._thread.call(self._shutdown())
        self._thread.close()
