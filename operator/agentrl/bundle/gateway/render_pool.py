"""Where prompts are rendered: small ones on the event loop, large ones in worker processes.

Rendering costs about a microsecond of Python per token (the `renderers` package walks every
token) plus a tokenizer call that holds the GIL: a 10 MB prompt stalled every session of
the gateway for 12.7 s when it ran on the event loop, and a thread would stall it the same
way through the GIL. So work above `INLINE_RENDER_BYTES` of message text goes to a bounded
pool of worker processes (`render_worker`) running at lower CPU priority, while the event
loop keeps serving everyone else; a session's turns are serialised, so one session holds at
most one worker. Small prompts (the common short call) stay inline, where a round trip to
another process would cost more than the render.

Workers start on first use, are replaced when they exit (a crash, or retiring after a job
left them large), and are killed when the request they serve is cancelled (an agent that
hangs up stops costing CPU). When a worker cannot start, prompts are rendered inline: slower
for everyone under load, never wrong. A worker that starts and reports that it cannot load
the renderer would fail the same way every time, so the pool stays off (`RenderPool.broken`).
Any other failure may pass (the start timed out on a CPU busy with other work, fork failed
with EAGAIN or ENOMEM, the worker was killed while loading), and the pool rests
(`RenderPool.down`) and tries again after a backoff: one slow start used to turn workers off
for the rest of a training run that lasts days. Each change is logged once, never per prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from array import array
from dataclasses import dataclass
from typing import Any

import orjson

from agentrl.bundle.gateway.chat import ApiError
from agentrl.bundle.gateway.render_worker import FRAME, prompt_ids
from agentrl.bundle.gateway.token_view import ids_of

log = logging.getLogger("agentrl.gateway")

INLINE_RENDER_BYTES = 16 * 1024  # message text rendered on the event loop (~ms of work)
WORKER_START_TIMEOUT_S = 120.0  # loading a large tokenizer.json takes seconds
# An idle worker told to stop (stdin closed) gets this long to exit before it is killed. It
# runs at idle priority, so on a saturated CPU it may get no time at all to exit.
WORKER_EXIT_TIMEOUT_S = 5.0
# After a start fails for a reason that may pass, prompts render inline and one start is
# tried again this long after, the wait doubling up to the cap while starts keep failing:
# a failed try costs a process start (up to WORKER_START_TIMEOUT_S of one request's time)
# every few minutes at most, and workers are back within minutes of the CPU freeing up.
WORKER_RETRY_S = 30.0
WORKER_RETRY_MAX_S = 300.0


class RenderFailed(ApiError):
    """The renderer refused the agent's messages (400), or a worker died on them (503)."""


def _refused(exc: BaseException | str) -> RenderFailed:
    what = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return RenderFailed(400, f"messages: the prompt could not be rendered ({what})"[:600])


class WorkersDown(Exception):
    """No worker can take a job now (`RenderPool.broken` or `.down`): render it inline."""


class ContextFull(ApiError):
    """The prompt alone fills the model's context: no room for a single new token. A model
    call answers it as finish reason `length` without calling the engine (`turns`)."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(
            400,
            f"messages: the prompt is {tokens} tokens, the model's context is {limit}; "
            "shorten the conversation",
            param="messages",
        )
        self.tokens = tokens
        self.limit = limit
        # The session's chain the call continued (`prompt.PromptBuilder.build` sets it), so
        # the trace can name the conversation the full context cut.
        self.extends: int | None = None


@dataclass(frozen=True)
class WorkerConfig:
    tokenizer_path: str
    renderer_family: str
    tool_call_parser: str | None
    reasoning_parser: str | None
    # What the gateway's start-up learnt of the hub (`hub.start_answer`): a worker given it
    # loads a hub id's tokenizer from the cache without asking the hub (`hub.hub_told`);
    # None: it asks, as a gateway starting does.
    hub_answer: str | None = None


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    async def call(self, header: bytes, payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        self.stdin.write(FRAME.pack(len(header), len(payload)) + header + payload)
        await self.stdin.drain()
        n_header, n_payload = FRAME.unpack(await self.stdout.readexactly(FRAME.size))
        reply = orjson.loads(await self.stdout.readexactly(n_header))
        body = await self.stdout.readexactly(n_payload) if n_payload else b""
        return reply, body

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


class RenderPool:
    """Up to `size` worker processes, each rendering one prompt at a time."""

    def __init__(self, config: WorkerConfig, size: int) -> None:
        self.config = config
        self.size = size
        self._idle: list[_Worker] = []
        self._live = 0  # started or starting
        self._freed = asyncio.Condition()
        self._reaped: set[asyncio.Task[None]] = set()
        self.workers: set[_Worker] = set()  # live processes, idle or busy
        self.started = 0  # processes started so far (a replaced one counts again)
        self.jobs = 0  # prompts rendered here
        # Why a worker said it cannot load the renderer: every prompt renders inline.
        self.broken: str | None = None
        # Why the last start failed, while the pool rests after it: prompts render inline
        # until `_retry_at`, then one start is tried (the probe) while others still do.
        self.down: str | None = None
        self.clock = time.monotonic
        self._retry_at = 0.0
        self._backoff = 0.0
        self._probing = False

    @property
    def busy(self) -> int:
        return self._live - len(self._idle)

    @property
    def ready(self) -> bool:
        """Whether a job may go to a worker now (else it renders inline)."""
        if self._idle:
            return True
        if self.broken is not None:
            return False
        return self.down is None or (not self._probing and self.clock() >= self._retry_at)

    async def call(
        self, header: dict[str, Any], payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One job on an idle worker (waiting for one if all are busy). Raises
        orjson.JSONEncodeError if `header` cannot travel as JSON, before taking a worker, and
        WorkersDown if no worker can be had (none could start, now or lately)."""
        data = orjson.dumps(header)
        worker = await self._acquire()
        keep = False
        try:
            reply, body = await worker.call(data, payload)
            self.jobs += 1
            keep = not reply.get("retire")
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as exc:
            code = worker.proc.returncode
            raise RenderFailed(
                503,
                f"the prompt renderer exited (code {code}) on this request; retry",
                kind="api_error",
            ) from exc
        finally:  # cancelled (the agent hung up), failed or retiring: replace the process
            await self._release(worker, keep)
        return reply, body

    async def _acquire(self) -> _Worker:
        async with self._freed:
            while not self._idle and self._live >= self.size:
                await self._freed.wait()
            if self._idle:
                return self._idle.pop()
            if not self.ready:  # resting, or given up (perhaps while this job waited)
                raise WorkersDown(self.broken or self.down)
            probe = self.down is not None
            self._probing |= probe
            self._live += 1
        try:
            return await self._start(probe)
        except BaseException:
            async with self._freed:
                self._live -= 1
                # Every waiter looks again: after a failed start each renders inline.
                self._freed.notify_all()
            raise
        finally:
            if probe:
                self._probing = False

    async def _release(self, worker: _Worker, keep: bool) -> None:
        if not keep:
            self.workers.discard(worker)
            worker.kill()
            task = asyncio.get_running_loop().create_task(self._reap(worker))
            self._reaped.add(task)
            task.add_done_callback(self._reaped.discard)
        async with self._freed:
            if keep:
                self._idle.append(worker)
            else:
                self._live -= 1
            self._freed.notify()

    @staticmethod
    async def _reap(worker: _Worker) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            await worker.proc.wait()

    async def _start(self, probe: bool) -> _Worker:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agentrl.bundle.gateway.render_worker",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=1 << 20,
            )
        except OSError as exc:  # fork or exec failed (EAGAIN, ENOMEM...)
            raise WorkersDown(self._rest(exc, probe)) from exc
        worker = _Worker(proc)
        try:
            async with asyncio.timeout(WORKER_START_TIMEOUT_S):
                reply, _ = await worker.call(orjson.dumps(vars(self.config)))
        except BaseException as exc:
            worker.kill()
            await self._reap(worker)
            if isinstance(exc, TimeoutError):  # before OSError: TimeoutError is one
                why: BaseException | str = f"no answer within {WORKER_START_TIMEOUT_S:g} s"
                raise WorkersDown(self._rest(why, probe)) from exc
            if isinstance(exc, (EOFError, OSError)):  # it exited (killed?) while loading
                raise WorkersDown(self._rest(exc, probe)) from exc
            raise  # cancelled: the agent hung up, which says nothing about workers
        if not reply.get("ok"):
            worker.kill()
            await self._reap(worker)
            raise WorkersDown(self._give_up(str(reply.get("error"))))
        if self.down is not None:
            log.info("gateway: render workers start again (after %s)", self.down)
            self.down = None
        self.started += 1
        self.workers.add(worker)
        return worker

    def _rest(self, exc: BaseException | str, probe: bool) -> str:
        """A start failed for a reason that may pass: prompts render inline until a start
        is tried again, after a wait that doubles while the tries fail."""
        why = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        if self.down is None:
            self._backoff = WORKER_RETRY_S
            log.warning(
                "gateway: render workers cannot start (%s); rendering prompts on the event "
                "loop, so large prompts delay other sessions, and trying workers again in "
                "%g s and then less often, up to every %g s, until one starts",
                why,
                self._backoff,
                WORKER_RETRY_MAX_S,
            )
        elif probe:
            self._backoff = min(2 * self._backoff, WORKER_RETRY_MAX_S)
        else:  # a start begun before the pool rested: the rest already counts it
            return why
        self.down = why
        self._retry_at = self.clock() + self._backoff
        return why

    def _give_up(self, why: str) -> str:
        """A worker started and cannot load the renderer: every one would say the same."""
        if self.broken is None:
            log.warning(
                "gateway: render workers cannot load the renderer (%s); rendering every "
                "prompt on the event loop from now on, so large prompts delay other sessions",
                why,
            )
            self.broken = why
        return why

    async def _stop(self, worker: _Worker) -> None:
        """Wait for a worker told to exit, killing it after the grace period."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WORKER_EXIT_TIMEOUT_S):
                await self._reap(worker)
        worker.kill()
        # Killed or not, wait for its exit: a process not waited for stays a zombie, and its
        # pipe transport outlives the event loop (closed on a closed loop when collected).
        await self._reap(worker)

    async def close(self) -> None:
        async with self._freed:
            idle, self._idle = self._idle, []
            self._live -= len(idle)
        for worker in idle:
            self.workers.discard(worker)
            worker.stdin.close()  # the worker exits on EOF
        busy = list(self.workers)  # still busy: nothing will want its answer
        self.workers.clear()
        for worker in busy:
            worker.kill()
        # Together: one after another, each idle worker too starved to exit added its whole
        # grace period to the stop.
        await asyncio.gather(
            *(self._stop(worker) for worker in idle), *(self._reap(worker) for worker in busy)
        )
        if self._reaped:
            await asyncio.gather(*self._reaped, return_exceptions=True)


class PromptRenderer:
    """Renders and bridges with a `renderers` Renderer: inline below `inline_bytes` of work,
    in the pool above (if there is one). `max_tokens` (the model's context) refuses a prompt
    that fills it (`ContextFull`) before the gateway keeps it or sends it to the engine."""

    def __init__(
        self,
        renderer: Any,
        pool: RenderPool | None = None,
        *,
        inline_bytes: int = INLINE_RENDER_BYTES,
        max_tokens: int | None = None,
    ) -> None:
        self.renderer = renderer
        self.pool = pool
        self.inline_bytes = inline_bytes
        self.max_tokens = max_tokens

    def _pooled(self, work: int) -> RenderPool | None:
        pool = self.pool
        if pool is None or work <= self.inline_bytes or not pool.ready:
            return None
        return pool

    async def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        work: int,
        *,
        bounded: bool = True,
        continue_final: bool = False,
    ) -> array[int]:
        """The full prompt with the generation prompt (`continue_final`: up to the end of the
        last message, which the model continues; `render_worker.prompt_ids`); `work`: bytes
        of text it renders. `bounded=False` skips the context check (a token count must
        answer any length)."""
        limit = self.max_tokens if bounded else None
        pool = self._pooled(work)
        if pool is not None:
            header: dict[str, Any] = {"op": "render", "messages": messages, "tools": tools}
            if continue_final:
                header["continue_final"] = True
            reply = await self._call(pool, header)
            if reply is not None:
                return self._ids(*reply, limit=limit)
        try:
            ids = ids_of(prompt_ids(self.renderer, messages, tools or None, continue_final))
        except Exception as exc:
            raise _refused(exc) from exc
        _check(len(ids), limit)
        return ids

    async def bridge(
        self,
        prompt_ids: array[int],
        completion_ids: array[int],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        work: int,
    ) -> array[int] | None:
        """prompt + completion + the renderer's bridge for `messages` (None: it refused);
        the result may fail to extend prompt + completion (the caller checks)."""
        pool = self._pooled(work)
        if pool is not None:
            header = {
                "op": "bridge",
                "prompt_len": len(prompt_ids),
                "messages": messages,
                "tools": tools,
            }
            reply = await self._call(pool, header, (prompt_ids + completion_ids).tobytes())
            if reply is not None:
                head, body = reply
                if head.get("refused"):
                    return None
                if head.get("suffix"):
                    ids = prompt_ids + completion_ids
                    ids.frombytes(body)
                    _check(len(ids), self.max_tokens)
                    return ids
                return self._ids(head, body, limit=self.max_tokens)
        try:
            bridged = self.renderer.bridge_to_next_turn(
                prompt_ids.tolist(), completion_ids.tolist(), messages, tools=tools or None
            )
        except Exception as exc:
            raise _refused(exc) from exc
        if bridged is None:
            return None
        ids = ids_of(bridged.token_ids)
        _check(len(ids), self.max_tokens)
        return ids

    @staticmethod
    def _ids(head: dict[str, Any], body: bytes, *, limit: int | None) -> array[int]:
        _check(len(body) // 4, limit)
        return _decode(body)

    async def _call(
        self, pool: RenderPool, header: dict[str, Any], payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes] | None:
        """The worker's reply; None when workers cannot run here (render inline instead)."""
        try:
            head, body = await pool.call(header, payload)
        except orjson.JSONEncodeError:
            return None  # e.g. an integer past 64 bits in tool arguments: render it here
        except WorkersDown:
            return None  # the pool logged why, once
        if not head.get("ok"):
            raise _refused(str(head.get("error")))
        return head, body


def _check(n: int, limit: int | None) -> None:
    if limit is not None and n >= limit:
        raise ContextFull(n, limit)


def _decode(body: bytes) -> array[int]:
    ids = array("i")
    ids.frombytes(body)
    return ids
