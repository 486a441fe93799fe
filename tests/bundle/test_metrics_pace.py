"""`agentrl_rollout_step_interval_seconds`: the run's pace, timed where the rollout step moves."""

from __future__ import annotations

from agentrl.bundle.metrics import BundleMetrics


def pace(metrics: BundleMetrics) -> tuple[float, float]:
    """(count, sum) of the pace histogram as the registry exports it."""
    count = metrics.registry.get_sample_value("agentrl_rollout_step_interval_seconds_count")
    total = metrics.registry.get_sample_value("agentrl_rollout_step_interval_seconds_sum")
    assert count is not None and total is not None
    return count, total


def test_each_move_is_timed_from_the_one_before() -> None:
    now = [0.0]
    metrics = BundleMetrics(clock=lambda: now[0])
    for at, step in ((900.0, 3), (2100.0, 4), (2200.0, 4), (3600.0, 5), (6000.0, 7)):
        now[0] = at
        metrics.rollout_step.set(step)
    # The first move after the hub started (a resume at rollout 3) holds the model load: not
    # timed. Step 4 again (a second report of it) does not restart the clock; a move of two
    # steps counts as two of half the time.
    assert pace(metrics) == (4, 1200 + 1500 + 2400)


def test_nothing_is_timed_before_a_second_move() -> None:
    now = [0.0]
    metrics = BundleMetrics(clock=lambda: now[0])
    now[0] = 500.0
    metrics.rollout_step.set(0)
    assert pace(metrics) == (0, 0)
