"""Every label set the rollout's step and episode records can count is exported from the start.

A counter series created by its first increment starts at that count, which Prometheus'
rate() and increase() never see; the bundle creates each one at 0 instead (docs/monitoring.md).
These tests drive the rollout's own recording code with every outcome, reason and split it
has and check that nothing it counts is new to a fresh registry.
"""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from agentrl.api.constants import SPLIT_EVAL, SPLIT_TRAIN
from agentrl.bundle.failures import REASONS
from agentrl.bundle.hub import apply_delta
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout.batch import BATCH_FULL
from agentrl.bundle.rollout.driver import record_step
from agentrl.bundle.rollout.report import Recorder
from agentrl.bundle.rollout.sampling import StepReport

COUNTERS = (
    "agentrl_episodes_total",
    "agentrl_failed_sessions_total",
    "agentrl_excluded_episodes_total",
    "agentrl_groups_total",
    "agentrl_discarded_episode_seconds_total",
    "agentrl_aborted_episodes_total",
)


def series(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in registry.collect()
        for s in family.samples
        if s.name in COUNTERS
    }


def test_nothing_the_rollout_counts_is_a_new_series() -> None:
    fresh = series(BundleMetrics().registry)
    rec = Recorder()
    for split in (SPLIT_TRAIN, SPLIT_EVAL):
        for failure in (None, *REASONS):
            rec.episode_started(split)
            rec.episode_finished(split, failure, 0.0, 1, 0, seconds=1.0)
        rec.episode_started(split)
        rec.episode_aborted(split, BATCH_FULL, 1.0)
    groups = ("kept", "filtered", "backfilled", "skipped", "aborted", "carried_over")
    every = StepReport(**dict.fromkeys(groups, 1))  # every group count record_step reads
    every.filtered_seconds = every.aborted_seconds = 1.0
    every.excluded.update(dict.fromkeys(REASONS, 1))
    every.trained_episodes = len(REASONS)
    record_step(SimpleNamespace(recorder=rec), every)  # type: ignore[arg-type]
    metrics = BundleMetrics()
    apply_delta(metrics, rec.take())
    counted = series(metrics.registry)
    assert counted - fresh == set()
    assert {name for name, _ in counted} == set(COUNTERS)


def test_every_trace_break_reason_is_exported_from_the_start() -> None:
    """The merge's and the gateway's reasons for a trace break are the ones the registry
    creates at 0, so one agent's one-off rewrite still moves rate() on the dashboard."""
    from agentrl.api.constants import TRACE_BREAK_REASONS
    from agentrl.bundle.gateway.prompt import PROMPT_BREAK_REASONS
    from agentrl.bundle.traces import BREAK_REASONS

    assert sorted({*BREAK_REASONS, *PROMPT_BREAK_REASONS}) == sorted(TRACE_BREAK_REASONS)
    fresh = {
        s.labels["reason"]: s.value
        for family in BundleMetrics().registry.collect()
        for s in family.samples
        if s.name == "agentrl_trace_breaks_total"
    }
    assert fresh == dict.fromkeys(TRACE_BREAK_REASONS, 0.0)
