"""Pure parts shared by the backends: result parsing, the poll schedule, the TPS limiter."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest

from agentrl.bundle.agents.base import AgentError, parse_result, poll_delays
from agentrl.bundle.agents.ratelimit import TpsLimiter

TOKEN = "episode-token-" + "t" * 20


@pytest.mark.parametrize(
    ("doc", "reward"),
    [
        ({"rewards": 1}, 1.0),
        ({"rewards": [0.1, 0.2, 0.9]}, 0.9),
        ({"reward": -0.5, "status_code": 200}, -0.5),
        # What agentcore-rl-toolkit's @rollout_entrypoint saves for a handler's return.
        ({"rewards": 1.0, "status_code": 200, "stop_reason": "end_turn", "payload": {}}, 1.0),
        ({"rewards": 0.5, "reward": 9.0}, 0.5),  # `rewards` is the toolkit's key: it wins
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
        # A JSON integer too large for a float: json.loads keeps it an int, float() raised
        # OverflowError, and the episode was counted as agentrl's own bug (internal_error).
        ({"rewards": 10**400}, "bad_result"),
        ({"rewards": [0, -(10**309)]}, "bad_result"),
        ({"rewards": None}, "bad_result"),
        ({"rewards": "1.0"}, "bad_result"),
        ({"rewards": 1.0, "status_code": 500}, "agent_error"),
        ({"rewards": 1.0, "status_code": 204}, "agent_error"),  # the toolkit: only 200 is ok
        ({"rewards": 1.0, "status_code": "200"}, "agent_error"),
        ({"error": "tool failed"}, "agent_error"),
    ],
)
def test_invalid_results(doc: Any, reason: str) -> None:
    with pytest.raises(AgentError) as err:
        parse_result(doc)
    assert err.value.reason == reason
    # The document travels with the error: a rehearsal shows the reward as it was received.
    assert err.value.document is (doc if isinstance(doc, dict) else None)


def test_a_handler_that_raised_is_reported_with_its_exception_type() -> None:
    """The document the toolkit saves when the handler raises: stop_reason is str(exc),
    the traceback's last line also names the type."""
    doc = {
        "status_code": 500,
        "stop_reason": "tool crashed",
        "traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: tool crashed\n",
    }
    with pytest.raises(AgentError) as err:
        parse_result(doc)
    assert err.value.reason == "agent_error"
    assert "status_code 500" in str(err.value) and "RuntimeError: tool crashed" in str(err.value)
    without_trace = {"status_code": 422, "stop_reason": "payload invalid"}
    with pytest.raises(AgentError, match="payload invalid"):
        parse_result(without_trace)


def test_poll_delays_grow_cap_and_jitter() -> None:
    plain = list(itertools.islice(poll_delays(0.5, 1.5, 30.0, 0.0), 12))
    assert plain[:3] == [0.5, 0.75, 1.125]
    assert plain[-1] == 30.0 and plain == sorted(plain)
    jittered = list(itertools.islice(poll_delays(0.5, 1.5, 30.0, 0.2, random.Random(7)), 12))
    assert all(0.8 * p <= j <= 1.2 * p for p, j in zip(plain, jittered, strict=True))
    assert jittered != plain
    # Two episodes started together look at different times.
    a, b = (list(itertools.islice(poll_delays(0.5, 1.5, 30, 0.2), 3)) for _ in range(2))
    assert a != b
    with pytest.raises(ValueError, match="jitter"):
        next(poll_delays(0.5, 1.5, 30.0, 1.0))


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


@pytest.mark.parametrize(
    "doc",
    [
        {"status_code": 500, "stop_reason": "y" * 295 + TOKEN},
        {"error": "y" * 295 + TOKEN},
        {"rewards": "y" * 74 + TOKEN},  # quoted as its repr: "'" first
    ],
)
def test_the_episodes_tokens_go_before_the_agents_text_is_cut(doc: dict[str, object]) -> None:
    """A token across the cut of the agent's text leaves none of itself (redacted first)."""
    with pytest.raises(AgentError) as err:
        parse_result(doc, (TOKEN,))
    assert TOKEN[:5] not in str(err.value) and str(err.value).endswith("y<reda")
