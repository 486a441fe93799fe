"""Progress from the trainer's metrics, as tables: parsing, the failed ratio, step time, ETA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from agentrl.controller import progress
from agentrl.controller.progress import Pace, pace_after

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def exposition(
    rollout: float | None = None,
    rewards: dict[str, float] | None = None,
    episodes: dict[tuple[str, str], float] | None = None,
    failures: dict[tuple[str, str], float] | None = None,
) -> str:
    """What the head pod serves, written by prometheus_client as the bundle writes it."""
    registry = CollectorRegistry()
    step = Gauge("agentrl_rollout_step", "", registry=registry)
    if rollout is not None:
        step.set(rollout)
    else:
        step.set(float("nan"))
    reward = Gauge("agentrl_batch_reward_mean", "", ["split"], registry=registry)
    for split, value in (rewards or {}).items():
        reward.labels(split).set(value)
    eps = Counter("agentrl_episodes", "", ["split", "outcome"], registry=registry)
    for labels, value in (episodes or {}).items():
        eps.labels(*labels).inc(value)
    failed = Counter("agentrl_failed_sessions", "", ["split", "reason"], registry=registry)
    for labels, value in (failures or {}).items():
        failed.labels(*labels).inc(value)
    return generate_latest(registry).decode()


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        pytest.param(exposition(), {}, id="nothing-set-yet"),
        pytest.param(exposition(rollout=3), {"rollout": 3.0}, id="rollout"),
        pytest.param(
            exposition(rewards={"train": 0.5, "gsm8k": 0.25, "math": 0.75}),
            {"trainReward": 0.5, "evalReward": 0.5},
            id="eval-sets-averaged",
        ),
        pytest.param(
            exposition(
                episodes={
                    ("train", "succeeded"): 90,
                    ("train", "failed"): 10,
                    ("gsm8k", "failed"): 50,
                },
                failures={
                    ("train", "timeout"): 6,
                    ("train", "agent_error"): 4,
                    ("gsm8k", "timeout"): 50,
                },
            ),
            {
                "episodes": 100.0,
                "failed": 10.0,
                "failed:timeout": 6.0,
                "failed:agent_error": 4.0,
            },
            id="train-episodes-only",
        ),
    ],
)
def test_parse_progress(text: str, raw: dict[str, float]) -> None:
    assert progress.parse_progress(text) == raw


def test_a_fresh_head_pod_reports_no_rollout_done() -> None:
    """The bundle's own registry before rollout 0 finished: no rollout in the progress (it
    exported 0 there, which `kubectl get rlx` showed as 1/200 done before any was)."""
    from agentrl.bundle.metrics import BundleMetrics

    raw = progress.parse_progress(generate_latest(BundleMetrics().registry).decode())
    assert raw == {}
    assert progress.progress_fields(raw, None, 200) == {"totalRollouts": 200}


def test_parse_progress_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        progress.parse_progress("this is { not prometheus")


@pytest.mark.parametrize(
    ("raw", "previous", "ratio"),
    [
        pytest.param({"episodes": 100, "failed": 10}, None, 0.1, id="whole-run"),
        pytest.param(
            {"episodes": 200, "failed": 60},
            {"episodes": 100, "failed": 10},
            0.5,
            id="since-previous",
        ),
        # Counters went back (the trainer restarted): the whole run again, not a negative.
        pytest.param(
            {"episodes": 20, "failed": 2}, {"episodes": 100, "failed": 10}, 0.1, id="counters-reset"
        ),
        # Nothing finished since (the trainer's step, a slow agent): no figure, so the status
        # keeps the last one instead of jumping to the whole run's.
        pytest.param(
            {"episodes": 100, "failed": 10},
            {"episodes": 100, "failed": 10},
            None,
            id="no-new-episodes",
        ),
        pytest.param({}, None, None, id="no-episodes"),
    ],
)
def test_failed_session_ratio(
    raw: dict[str, float], previous: dict[str, float] | None, ratio: float | None
) -> None:
    assert progress.progress_fields(raw, previous, 10).get("failedSessionRatio") == ratio


@pytest.mark.parametrize(
    ("rollout", "total", "text"),
    [
        pytest.param(0, 200, "1/200", id="first"),
        pytest.param(11, 200, "12/200", id="twelve"),
        pytest.param(199, 200, "200/200", id="last"),
        pytest.param(4, None, "5", id="no-total"),
    ],
)
def test_rollout_text(rollout: int, total: int | None, text: str) -> None:
    assert progress.rollout_text(rollout, total) == text
    assert progress.progress_fields({"rollout": rollout}, None, total)["rolloutText"] == text


# (rollout, seconds) readings -> (rollout, since, moved, step_seconds) after the last one.
PACES: list[Any] = [
    pytest.param([(4, 0)], (4, 0, False, None), id="first-reading-starts-nothing"),
    pytest.param([(4, 0), (4, 30)], (4, 0, False, None), id="no-move"),
    pytest.param([(4, 0), (5, 30)], (5, 30, True, None), id="first-move-starts-the-clock"),
    pytest.param([(4, 0), (5, 30), (6, 130)], (6, 130, True, 100.0), id="one-step"),
    pytest.param([(4, 0), (5, 30), (7, 230)], (7, 230, True, 100.0), id="two-steps-at-once"),
    pytest.param(
        [(4, 0), (5, 30), (6, 130), (6, 200), (7, 330)],
        (7, 330, True, 0.3 * 200 + 0.7 * 100),
        id="smoothed",
    ),
    # Restarted from an earlier checkpoint: the clock restarts, the step time is kept.
    pytest.param([(4, 0), (5, 30), (6, 130), (3, 500)], (3, 500, False, 100.0), id="went-back"),
    pytest.param(
        [(4, 0), (5, 30), (6, 130), (3, 500), (4, 560), (5, 640)],
        (5, 640, True, 0.3 * 80 + 0.7 * 100),
        id="resumed",
    ),
]


@pytest.mark.parametrize(("readings", "expected"), PACES)
def test_pace(readings: list[tuple[int, float]], expected: tuple[Any, ...]) -> None:
    pace: Pace | None = None
    for rollout, seconds in readings:
        pace = pace_after(pace, rollout, at(seconds))
    assert pace is not None
    rollout, since, moved, step = expected
    assert (pace.rollout, pace.since, pace.moved) == (rollout, at(since), moved)
    if step is None:
        assert pace.step_seconds is None
    else:
        assert pace.step_seconds == pytest.approx(step)


@pytest.mark.parametrize(
    ("pace", "total", "eta"),
    [
        pytest.param(Pace(9, at(1000), True, 60.0), 20, at(1000 + 10 * 60), id="ten-left"),
        pytest.param(Pace(19, at(1000), True, 60.0), 20, at(1000), id="done"),
        pytest.param(Pace(25, at(1000), True, 60.0), 20, at(1000), id="past-the-total"),
        pytest.param(Pace(9, at(1000), True, None), 20, None, id="no-step-time"),
        pytest.param(Pace(9, at(1000), True, 60.0), None, None, id="no-total"),
    ],
)
def test_eta(pace: Pace, total: int | None, eta: datetime | None) -> None:
    assert progress.eta(pace, total) == eta


def test_progress_fields_carry_step_time_and_eta() -> None:
    pace = Pace(9, at(1000), True, 61.26)
    fields = progress.progress_fields({"rollout": 9, "trainReward": 0.1234567}, None, 20, pace)
    assert fields == {
        "rollout": 9,
        "rolloutText": "10/20",
        "totalRollouts": 20,
        "trainReward": 0.123457,
        "stepSeconds": 61.3,
        "eta": "2026-01-01T00:26:53Z",  # 1000 s + 10 x 61.26 s
    }
    assert "stepSeconds" not in progress.progress_fields({"rollout": 9}, None, 20, None)


def test_a_read_with_no_new_episodes_keeps_the_recent_ratio_shown() -> None:
    """All of the last 100 episodes failed, after 5000 healthy ones; then a read between two
    batches: RECENT FAIL RATIO stays 1.0 (it showed 0.1, the whole run's, until the next
    batch finished, and wrote the status both ways)."""
    from agentrl.controller.status import apply_progress

    before = {"episodes": 5000, "failed": 500}
    failing = {"episodes": 5100, "failed": 600}
    st = apply_progress({}, progress.progress_fields(failing, before, 10), "t1")
    assert st["progress"]["failedSessionRatio"] == 1.0
    between = apply_progress(st, progress.progress_fields(failing, failing, 10), "t2")
    assert between == st


def bundle_reading(finished: int, failed: dict[str, int]) -> dict[str, float]:
    """The operator's reading of the bundle's own registry after `finished` train episodes,
    `failed` of them by reason (every other reason at 0, as the bundle exports them)."""
    from agentrl.bundle.metrics import BundleMetrics

    metrics = BundleMetrics()
    metrics.episodes.labels("train", "failed").inc(sum(failed.values()))
    metrics.episodes.labels("train", "succeeded").inc(finished - sum(failed.values()))
    for reason, n in failed.items():
        metrics.failed_sessions.labels("train", reason).inc(n)
    metrics.failed_sessions.labels("eval", "timeout").inc(1000)  # eval never counts
    return progress.parse_progress(generate_latest(metrics.registry).decode())


def test_the_reading_holds_each_failure_reason_of_the_train_episodes() -> None:
    raw = bundle_reading(40, {"agent_error": 30, "timeout": 8})
    assert raw["failed:agent_error"] == 30 and raw["failed:timeout"] == 8
    assert raw["failed"] == 38 and raw["episodes"] == 40
    assert raw["failed:throttled"] == 0  # exported at 0 from the head's start


def test_a_failure_reason_the_rollout_never_counts_is_other() -> None:
    """A label value is whatever the run's /metrics says (a user's own exporter on the port,
    a newer bundle): it names no key of the reading, so none reaches the condition's reason
    (a metric label), its message or its event, and the reading's keys stay a fixed set."""
    secret = "token=" + "s" * 5000
    failures = {("train", "timeout"): 5, ("train", secret): 20, ("train", "Timeout"): 3,
                ("train", ""): 2, ("eval", secret): 7}  # fmt: skip
    text = exposition(1, {}, {("train", "succeeded"): 10, ("train", "failed"): 30}, failures)
    raw = progress.parse_progress(text)
    reasons = {key for key in raw if key.startswith(progress.FAILED_PREFIX)}
    assert reasons == {"failed:timeout", "failed:other"}
    assert raw["failed:other"] == 25 and raw["failed"] == 30
    _, counted = progress.episodes_window({}, raw)
    assert counted == progress.Episodes(40, 30, (("other", 25), ("timeout", 5)))


def test_the_first_reading_only_starts_the_count() -> None:
    """After an operator restart the totals reach back to the head's start: a run that
    failed for an hour days ago and recovered since is not judged on them."""
    raw = bundle_reading(1000, {"agent_error": 900})
    start, counted = progress.episodes_window(None, raw)
    assert (start, counted) == (raw, None)


def test_the_count_covers_the_episodes_since_its_start_by_reason() -> None:
    start = bundle_reading(1000, {"agent_error": 10})
    raw = bundle_reading(1040, {"agent_error": 40, "timeout": 8})
    moved, counted = progress.episodes_window(start, raw)
    assert moved == raw
    assert counted == progress.Episodes(40, 38, (("agent_error", 30), ("timeout", 8)))
    assert counted.failing and counted.breakdown() == "agent_error 30, timeout 8"


def test_too_few_episodes_judge_nothing_and_the_count_runs_on() -> None:
    """1 failure of 1 does not flip anything; a slow agent is still judged, later."""
    start = bundle_reading(100, {})
    few = bundle_reading(101, {"agent_error": 1})
    kept, counted = progress.episodes_window(start, few)
    assert (kept, counted) == (start, None)
    enough = bundle_reading(120, {"agent_error": 20})
    _, counted = progress.episodes_window(kept, enough)
    assert counted == progress.Episodes(20, 20, (("agent_error", 20),))


def test_a_reading_with_no_new_episodes_judges_nothing() -> None:
    raw = bundle_reading(100, {"timeout": 100})
    assert progress.episodes_window(raw, raw) == (raw, None)


def test_counters_that_went_back_count_from_zero() -> None:
    """A new head (KubeRay's retry, a resume): its counters start at 0, so everything it
    counted is new, as Prometheus' increase() reads a counter reset."""
    old_head = bundle_reading(5000, {"agent_error": 100})
    new_head = bundle_reading(30, {"throttled": 30})
    start, counted = progress.episodes_window(old_head, new_head)
    assert counted == progress.Episodes(30, 30, (("throttled", 30),))
    # Too few on the new head yet: the count runs from 0, not from the old head's totals.
    start, counted = progress.episodes_window(old_head, bundle_reading(5, {"throttled": 5}))
    assert counted is None and start == {}
    _, counted = progress.episodes_window(start, bundle_reading(6000, {"throttled": 30}))
    assert counted == progress.Episodes(6000, 30, (("throttled", 30),))
    assert not counted.failing


@pytest.mark.parametrize(
    ("finished", "failed", "failing"),
    [(40, 20, True), (40, 19, False), (20, 20, True), (20, 0, False)],
)
def test_failing_from_the_threshold(finished: int, failed: int, failing: bool) -> None:
    from agentrl.api.constants import EPISODES_FAILING_RATIO

    assert EPISODES_FAILING_RATIO == 0.5
    assert progress.Episodes(finished, failed).failing is failing
