"""The reconcile work queue: dedup, one worker per key, bounded workers, delayed retries."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from agentrl.controller.workqueue import RETRY_MAX_DELAY, WorkQueue, jittered, retry_delay


class Recorder:
    """A handler that records calls and how many ran at once (per key and in all)."""

    def __init__(self, hold: float = 0.0, fail: set[str] | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.hold, self.fail = hold, fail or set()
        self.live: Counter[str] = Counter()
        self.most_per_key = self.most = 0

    async def __call__(self, key: str) -> None:
        self.calls[key] += 1
        self.live[key] += 1
        self.most_per_key = max(self.most_per_key, self.live[key])
        self.most = max(self.most, sum(self.live.values()))
        try:
            await asyncio.sleep(self.hold)
            if key in self.fail:
                raise RuntimeError(f"{key} broke")
        finally:
            self.live[key] -= 1


async def settle(seconds: float = 5.0) -> None:
    await asyncio.sleep(seconds)  # looptime: fake seconds, no real waiting


@pytest.mark.looptime
async def test_a_key_queued_twice_is_handled_once() -> None:
    rec = Recorder()
    queue: WorkQueue[str] = WorkQueue(rec, workers=2)
    for key in ("a", "a", "b", "a"):
        queue.add(key)
    queue.start()
    await settle()
    assert rec.calls == {"a": 1, "b": 1}
    await queue.close()


@pytest.mark.looptime
async def test_a_key_added_while_running_runs_again_after_never_alongside() -> None:
    rec = Recorder(hold=1.0)
    queue: WorkQueue[str] = WorkQueue(rec, workers=4)
    queue.start()
    queue.add("a")
    await asyncio.sleep(0.5)  # "a" is running now
    queue.add("a")
    queue.add("a")
    await settle()
    assert rec.calls["a"] == 2 and rec.most_per_key == 1
    await queue.close()


@pytest.mark.looptime
async def test_workers_bound_the_reconciles_at_once() -> None:
    rec = Recorder(hold=1.0)
    queue: WorkQueue[str] = WorkQueue(rec, workers=3)
    queue.start()
    for i in range(10):
        queue.add(f"k{i}")
    await settle(10)
    assert sum(rec.calls.values()) == 10 and rec.most == 3
    await queue.close()


@pytest.mark.looptime
async def test_delayed_retry_fires_once_carries_its_tag_and_is_superseded_by_add() -> None:
    rec = Recorder()
    queue: WorkQueue[str] = WorkQueue(rec, workers=1)
    queue.start()
    queue.add_after("a", 30, tag=7)
    assert queue.retrying("a") == (True, 7)
    await asyncio.sleep(29)
    assert rec.calls["a"] == 0
    await asyncio.sleep(2)
    assert rec.calls["a"] == 1 and queue.retrying("a") == (False, None)
    queue.add_after("b", 30, tag=1)
    queue.add("b")  # a newer request goes now; the old retry is dropped
    await settle(60)
    assert rec.calls["b"] == 1
    queue.add_after("c", 30)
    queue.cancel("c")
    await settle(60)
    assert rec.calls["c"] == 0
    await queue.close()


@pytest.mark.looptime
async def test_a_failing_handler_does_not_stop_the_workers() -> None:
    rec = Recorder(fail={"bad"})
    queue: WorkQueue[str] = WorkQueue(rec, workers=1)
    queue.start()
    queue.add("bad")
    queue.add("good")
    await settle()
    assert rec.calls == {"bad": 1, "good": 1}
    await queue.close()


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [
        pytest.param(1, 0.5, 1.0, id="first"),
        pytest.param(2, 1.0, 2.0, id="second"),
        pytest.param(4, 4.0, 8.0, id="fourth"),
        pytest.param(7, 30.0, 60.0, id="capped"),
        pytest.param(50, RETRY_MAX_DELAY / 2, RETRY_MAX_DELAY, id="no-overflow"),
    ],
)
def test_retry_delay_is_exponential_capped_and_jittered(
    failures: int, low: float, high: float
) -> None:
    assert retry_delay(failures, lambda: 0.0) == low
    assert retry_delay(failures, lambda: 1.0) == high
    assert low < retry_delay(failures, lambda: 0.5) < high


def test_retries_that_failed_together_spread_out() -> None:
    delays = {round(retry_delay(3), 3) for _ in range(200)}  # the real random source
    assert len(delays) > 100 and min(delays) >= 2.0 and max(delays) <= 4.0
    assert 2.5 <= jittered(5.0, lambda: 0.0) <= jittered(5.0, lambda: 1.0) == 5.0
