"""Pure parts shared by the backends: result parsing, backoff, and the TPS limiter."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from agentrl.bundle.agents.base import AgentError, backoff_delays, parse_result
from agentrl.bundle.agents.ratelimit import TpsLimiter


@pytest.mark.parametrize(
    ("doc", "reward"),
    [
        ({"rewards": 1}, 1.0),
        ({"rewards": [0.1, 0.2, 0.9]}, 0.9),
        ({"reward": -0.5, "status_code": 200}, -0.5),
    ],
)
def test_valid_results(doc: dict[str, Any], reward: float) -> None:
    assert parse_result(doc).reward == reward


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ([1.0], "bad_result"),
        ({}, "bad_result"),
        ({"rewards": []}, "bad_result"),
        ({"rewards": "high"}, "bad_result"),
        ({"rewards": True}, "bad_result"),
        ({"rewards": float("nan")}, "bad_result"),
        ({"rewards": 1.0, "status_code": 500}, "agent_error"),
        ({"error": "tool failed"}, "agent_error"),
    ],
)
def test_invalid_results(doc: Any, reason: str) -> None:
    with pytest.raises(AgentError) as err:
        parse_result(doc)
    assert err.value.reason == reason


def test_backoff_grows_and_caps() -> None:
    delays = list(itertools.islice(backoff_delays(0.5, 1.5, 30.0), 12))
    assert delays[:3] == [0.5, 0.75, 1.125]
    assert delays[-1] == 30.0 and delays == sorted(delays)


def test_limiter_spaces_calls_evenly_and_keeps_only_a_burst_of_credit() -> None:
    now = [100.0]
    limiter = TpsLimiter(rate=4.0, burst=2, clock=lambda: now[0])
    assert [limiter.reserve() for _ in range(4)] == [0.0, 0.0, 0.25, 0.5]
    now[0] += 60.0  # a long idle spell earns at most `burst` free calls
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.25]


@pytest.mark.looptime
async def test_limiter_paces_concurrent_callers_on_the_loop_clock() -> None:
    limiter = TpsLimiter(rate=10.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    stamps: list[float] = []

    async def call() -> None:
        await limiter.acquire()
        stamps.append(loop.time() - start)

    await asyncio.gather(*(call() for _ in range(5)))
    assert stamps == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_limiter_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="tps limit"):
        TpsLimiter(0)
