"""The render pool after a failed worker start: inline for now, workers again after a backoff
(a slow start, a failed fork), or inline for good (a worker that cannot load the renderer).

One slow start (past WORKER_START_TIMEOUT_S, easy at the idle scheduling policy on a CPU
saturated by other work) used to turn the pool off for the rest of a training run: every
large prompt then rendered on the event loop for days. A stub executable stands in for a
worker that never answers; the pool's clock is a variable, so nothing here waits on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrl.bundle.gateway import render_pool, render_worker
from agentrl.bundle.gateway.render_pool import (
    INLINE_RENDER_BYTES,
    WORKER_RETRY_MAX_S,
    WORKER_RETRY_S,
    PromptRenderer,
    RenderPool,
    WorkerConfig,
)
from agentrl.bundle.gateway.render_worker import FRAME

from .gateway_helpers import until

MEDIUM = [{"role": "user", "content": "a few words that render to tokens " * 2000}]
WORK = 2 * INLINE_RENDER_BYTES  # above the inline limit: a worker's job


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every worker process the pool starts (on top of the autouse fixture's record)."""
    calls: list[tuple[Any, ...]] = []
    spawn = render_pool.asyncio.create_subprocess_exec

    async def counted(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        calls.append(args)
        return await spawn(*args, **kwargs)

    monkeypatch.setattr(render_pool.asyncio, "create_subprocess_exec", counted)
    return calls


class Gate:
    """Workers hang without answering (`sleep`, a start that gets no CPU) until it opens,
    then start for real; the start timeout is short until it opens."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened = tmp_path / "opened"
        self.monkeypatch = monkeypatch
        stub = tmp_path / "python"
        lines = ["#!/bin/sh", f'[ -e "{self.opened}" ] && exec "{sys.executable}" "$@"']
        stub.write_text("\n".join([*lines, "exec sleep 600", ""]))
        stub.chmod(0o755)
        monkeypatch.setattr(render_pool.sys, "executable", str(stub))
        self.timeout(0.5)

    def timeout(self, seconds: float) -> None:
        self.monkeypatch.setattr(render_pool, "WORKER_START_TIMEOUT_S", seconds)

    def open(self) -> None:
        self.opened.touch()
        self.timeout(120.0)


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gate:
    return Gate(tmp_path, monkeypatch)


def inline_ids(renderer: Any) -> list[int]:
    ids: list[int] = renderer.render_ids(MEDIUM, tools=None, add_generation_prompt=True)
    return ids


def pool_for(checkpoint: Path, size: int = 1, family: str = "qwen3") -> tuple[RenderPool, Clock]:
    pool = RenderPool(WorkerConfig(str(checkpoint), family, None, None), size)
    clock = Clock()
    pool.clock = clock
    return pool, clock


def logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


async def test_after_a_start_that_times_out_workers_are_tried_again_with_a_backoff(
    checkpoint: Path,
    renderer: Any,
    gate: Gate,
    spawns: list[tuple[Any, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "agentrl.gateway")
    pool, clock = pool_for(checkpoint)
    prompts = PromptRenderer(renderer, pool)
    want = inline_ids(renderer)
    try:
        # The start times out: this prompt, and every one until the retry, render inline.
        assert list(await prompts.render(MEDIUM, None, WORK)) == want
        assert pool.down is not None and "no answer within" in pool.down
        clock.now += WORKER_RETRY_S - 1
        assert list(await prompts.render(MEDIUM, None, WORK)) == want
        assert (len(spawns), pool.jobs, pool.broken) == (1, 0, None)
        # The retry fails as well: the next one waits twice as long.
        clock.now += 1
        assert list(await prompts.render(MEDIUM, None, WORK)) == want
        assert len(spawns) == 2
        clock.now += 2 * WORKER_RETRY_S - 1
        assert list(await prompts.render(MEDIUM, None, WORK)) == want
        assert len(spawns) == 2
        # The CPU has room again: the next try starts a worker, which renders from then on.
        gate.open()
        clock.now += 1
        for _ in range(2):
            assert list(await prompts.render(MEDIUM, None, WORK)) == want
        assert (len(spawns), pool.started, pool.jobs, pool.down) == (3, 1, 2, None)
    finally:
        await pool.close()
    # One line when workers went, one when they came back: none per prompt or per try.
    assert logged(caplog, "render workers cannot start") == 1
    assert logged(caplog, "render workers start again") == 1


async def test_the_backoff_doubles_up_to_its_cap(
    checkpoint: Path, renderer: Any, gate: Gate, spawns: list[tuple[Any, ...]]
) -> None:
    pool, clock = pool_for(checkpoint)
    prompts = PromptRenderer(renderer, pool)
    waits = []
    try:
        await prompts.render(MEDIUM, None, WORK)
        for _ in range(6):
            waits.append(pool._retry_at - clock.now)
            clock.now = pool._retry_at
            await prompts.render(MEDIUM, None, WORK)
    finally:
        await pool.close()
    assert waits == [min(WORKER_RETRY_S * 2**n, WORKER_RETRY_MAX_S) for n in range(6)]
    assert waits[-2:] == [WORKER_RETRY_MAX_S] * 2  # the cap was reached and held
    assert len(spawns) == 7


async def test_jobs_waiting_for_the_failed_start_render_inline_at_once(
    checkpoint: Path, renderer: Any, gate: Gate, spawns: list[tuple[Any, ...]]
) -> None:
    """They do not each try a start of their own (each a whole start timeout more)."""
    pool, _ = pool_for(checkpoint)
    prompts = PromptRenderer(renderer, pool)
    try:
        rendered = await asyncio.gather(*(prompts.render(MEDIUM, None, WORK) for _ in range(3)))
    finally:
        await pool.close()
    assert [list(ids) for ids in rendered] == [inline_ids(renderer)] * 3
    assert (len(spawns), pool.busy) == (1, 0)


async def test_while_one_start_is_tried_other_prompts_render_inline(
    checkpoint: Path,
    renderer: Any,
    gate: Gate,
    spawns: list[tuple[Any, ...]],
) -> None:
    pool, clock = pool_for(checkpoint, size=2)
    prompts = PromptRenderer(renderer, pool)
    try:
        await prompts.render(MEDIUM, None, WORK)
        clock.now += WORKER_RETRY_S
        gate.timeout(600.0)
        trying = asyncio.create_task(prompts.render(MEDIUM, None, WORK))
        await until(lambda: len(spawns) == 2, "the retry started a worker")
        assert list(await prompts.render(MEDIUM, None, WORK)) == inline_ids(renderer)
        assert len(spawns) == 2 and not trying.done()
        trying.cancel()  # its agent hung up: that says nothing about workers
        with pytest.raises(asyncio.CancelledError):
            await trying
        assert pool.ready and pool.busy == 0  # the next prompt tries again
    finally:
        await pool.close()


async def test_a_worker_that_exits_while_loading_is_a_failure_that_may_pass(
    checkpoint: Path,
    renderer: Any,
    tmp_path: Path,
    spawns: list[tuple[Any, ...]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed while it loaded (the OOM killer): the prompt used to fail with an
    IncompleteReadError from deep in the pool."""
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\nkill -9 $$\n")
    stub.chmod(0o755)
    monkeypatch.setattr(render_pool.sys, "executable", str(stub))
    pool, _ = pool_for(checkpoint)
    try:
        assert list(await PromptRenderer(renderer, pool).render(MEDIUM, None, WORK)) == (
            inline_ids(renderer)
        )
    finally:
        await pool.close()
    assert pool.down is not None and pool.broken is None


async def test_a_worker_that_cannot_load_the_renderer_turns_workers_off_for_good(
    checkpoint: Path,
    renderer: Any,
    spawns: list[tuple[Any, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool, clock = pool_for(checkpoint, family="no-such-family")  # every worker says so
    prompts = PromptRenderer(renderer, pool)
    try:
        for _ in range(3):
            assert list(await prompts.render(MEDIUM, None, WORK)) == inline_ids(renderer)
            clock.now += 10 * WORKER_RETRY_MAX_S
    finally:
        await pool.close()
    assert pool.broken is not None and "unknown renderer family" in pool.broken
    assert (len(spawns), pool.down, pool.ready) == (1, None, False)
    assert logged(caplog, "render workers cannot load the renderer") == 1


async def test_closing_waits_for_idle_workers_together(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One after another, an idle worker too starved to exit added its whole grace period
    before the next was even waited for."""
    monkeypatch.setattr(render_pool, "WORKER_EXIT_TIMEOUT_S", 600.0)
    reaped: list[Any] = []
    reap = RenderPool._reap

    async def recorded(worker: Any) -> None:
        await reap(worker)
        reaped.append(worker)

    monkeypatch.setattr(RenderPool, "_reap", staticmethod(recorded))
    pool = RenderPool(WorkerConfig(str(checkpoint), "qwen3", None, None), 2)
    job = {"op": "render", "messages": MEDIUM, "tools": None}
    await asyncio.gather(pool.call(job), pool.call(job))
    starved, other = pool._idle  # closing takes them in this order
    os.kill(starved.proc.pid, signal.SIGSTOP)
    closing = asyncio.create_task(pool.close())
    try:
        await until(lambda: other in reaped, "the other worker was waited for", 60)
        assert starved not in reaped and not closing.done()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(starved.proc.pid, signal.SIGCONT)  # it exits on its closed stdin
        await closing
    assert starved in reaped and starved.proc.returncode == 0


def test_a_worker_loads_at_normal_priority_and_serves_at_idle_priority(
    monkeypatch: pytest.MonkeyPatch, checkpoint: Path
) -> None:
    """Loading is once per worker; at the idle policy a saturated CPU gave it no time, and the
    start timed out. Every job, though, runs at the idle policy: it is lowered before the
    worker says it is ready."""
    events: list[str] = []
    monkeypatch.setattr(render_worker, "lower_priority", lambda: events.append("lower"))
    from agentrl.bundle.gateway import tokenizer

    load = tokenizer.load_renderer

    def loading(*args: Any) -> Any:
        events.append("load")
        return load(*args)

    monkeypatch.setattr(tokenizer, "load_renderer", loading)
    config = render_pool.orjson.dumps(vars(WorkerConfig(str(checkpoint), "qwen3", None, None)))
    stdin = io.BytesIO(FRAME.pack(len(config), 0) + config)

    class Out(io.BytesIO):
        def write(self, data: Any) -> int:
            events.append("ready")
            return super().write(data)

    stdout = Out()
    # Held here: main() replaces sys.stdout, and a collected wrapper closes its buffer.
    wrappers = io.TextIOWrapper(stdin), io.TextIOWrapper(stdout)
    monkeypatch.setattr(sys, "stdin", wrappers[0])
    monkeypatch.setattr(sys, "stdout", wrappers[1])
    render_worker.main()
    assert events == ["load", "lower", "ready"]
    head, _ = render_worker.read_frame(io.BytesIO(stdout.getvalue())) or ({}, b"")
    assert head == {"ok": True}
