"""The pure parts of dynamic sampling: the plan from the spec, the filters, the carry store,
the step's report, and the batch-size guard."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.api.models import GrpoSpec
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.carry import TTL_STEPS, CarryStore
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeOutcome, segment_samples
from agentrl.bundle.rollout.filters import (
    UserFilter,
    ZeroRewardVariance,
    has_reward_variance,
    load_filter,
)
from agentrl.bundle.rollout.sampling import GroupRun, SamplingPlan, StepReport, _Step, fill_batch
from agentrl.bundle.rollout.source import DataSource, PromptGroup
from agentrl.bundle.rollout.types import PlainSample
from agentrl.bundle.traces import ABORT, Turn, merge_turns

from .doubles import FakeGateway, StubAgent


def grpo(**fields: Any) -> GrpoSpec:
    return GrpoSpec.model_validate({"numRollouts": 1, **fields})


@pytest.mark.parametrize(
    ("fields", "batch", "in_flight"),
    [
        ({}, 32, 32),
        ({"overSamplingBatchSize": 36, "stragglerPolicy": "carryOver"}, 32, 36),
        ({"overSamplingBatchSize": 36}, 32, 32),  # wait never over-samples
        ({"overSamplingBatchSize": 36, "stragglerPolicy": "abort"}, 40, 40),  # args' batch wins
        ({"overSamplingBatchSize": 64, "stragglerPolicy": "abort"}, 16, 32),  # at most 2 B
    ],
)
def test_the_plan_follows_the_spec_and_slimes_batch_size(
    fields: dict[str, Any], batch: int, in_flight: int
) -> None:
    plan = SamplingPlan.from_spec(grpo(**fields), batch)
    assert (plan.batch_size, plan.in_flight) == (batch, in_flight)
    assert plan.max_groups == (1 + 3) * in_flight


@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 0.25]), min_size=2, max_size=16))
def test_reward_variance_is_slimes_sample_std_test(rewards: list[float]) -> None:
    assert has_reward_variance(rewards) == (statistics.stdev(rewards) > 1e-6)


def test_one_reward_has_no_variance_as_torch_std_is_nan() -> None:
    assert not has_reward_variance([1.0]) and not has_reward_variance([])


def test_the_built_in_filter_reports_slimes_reasons() -> None:
    f = ZeroRewardVariance()
    assert f([1.0, 1.0], list).reason == "zero_std_1.0"
    assert f([0.0, 0.0, 0.0], list).reason == "zero_std_0.0"
    assert f([0.0, 1.0], list).keep


def test_a_user_filter_is_called_lazily_with_slimes_arguments() -> None:
    calls: list[tuple[Any, list[Any]]] = []

    def fn(args: Any, samples: list[Any], **kwargs: Any) -> Any:
        calls.append((args, samples))
        return 0  # falsy, like slime's legacy bool form

    verdict = UserFilter("m.fn", fn, "ARGS")([1.0], lambda: ["s"])
    assert not verdict.keep and calls == [("ARGS", ["s"])]
    assert load_filter(None, None) is None
    assert isinstance(load_filter("zeroRewardVariance", None), ZeroRewardVariance)


def outcome(
    sid: str,
    reward: float = 1.0,
    seconds: float = 1.0,
    turns: list[Turn] | None = None,
    policy_version: int = 0,
) -> EpisodeOutcome:
    """A task outcome of step `policy_version` whose samples the merge made of `turns` (one
    trained turn if None)."""
    inp = EpisodeInput("p", {}, None, group_index=0, index=0)
    trace = merge_turns(turns or [Turn([1, 2], [3, 4], [-0.5, -0.5], "stop")])
    samples = segment_samples(inp, trace, sid, reward, rollout_id=0)
    return EpisodeOutcome(
        sid, samples, reward, failure=None, seconds=seconds, policy_version=policy_version
    )


def test_the_carry_store_hands_back_once_and_forgets_after_its_ttl() -> None:
    store = CarryStore()
    store.put(3, 7, {(7, 14): outcome("a", seconds=5.0)})
    assert store.take((7, 15)) is None
    assert store.take((7, 14)) is not None and store.take((7, 14)) is None
    assert store.was_cut(7) and not store.was_cut(7) and not store.was_cut(None)
    store.put(3, 8, {(8, 16): outcome("b", seconds=5.0)})
    assert store.expire(3 + TTL_STEPS - 1) == []
    (dropped,) = store.expire(3 + TTL_STEPS)
    assert dropped.session_id == "b" and not store.episodes and not store.cut_groups


class NoPrompts:
    """A data source that has run out (and never hands anything back)."""

    def get_samples(self, n: int) -> list[list[Any]]:
        return []


def step_without_prompts(ctx: RolloutContext, step: int, *, last: bool = False) -> StepReport:
    """A carryOver train step whose data source has no prompts left: what it does with the
    carry store alone."""
    plan = SamplingPlan(batch_size=1, in_flight=1, max_refill_rounds=0, policy="carryOver")
    _, report = asyncio.run(
        fill_batch(
            ctx,
            DataSource(NoPrompts()),
            plan,
            spec=None,  # type: ignore[arg-type]
            group_filter=None,
            to_samples=list,
            step=step,
            last=last,
        )
    )
    return report


def test_a_carried_episode_that_expires_is_logged_once_with_its_session_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(1))
    ctx.carry.put(0, 7, {(7, 14): outcome("sid-kept-too-long", seconds=5.0)})
    caplog.set_level("INFO", logger="agentrl.rollout")

    report = step_without_prompts(ctx, TTL_STEPS)

    assert report.aborted_seconds == 5.0 and not ctx.carry.episodes
    (line,) = [r.getMessage() for r in caplog.records if "sid-kept-too-long" in r.getMessage()]
    assert "reason=carry_expired" in line


def test_the_runs_last_step_throws_away_what_the_carry_store_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After the last step (slime's num_rollout - 1) no step reuses a carried episode: it is
    counted as aborted and logged once, and not saved with the step's state. An earlier step
    keeps it."""
    from types import SimpleNamespace

    from agentrl.bundle.rollout.driver import last_step

    assert last_step(SimpleNamespace(num_rollout=8), 7)
    assert not last_step(SimpleNamespace(num_rollout=8), 6)
    assert not last_step(SimpleNamespace(), 7)  # unknown: not the last
    caplog.set_level("INFO", logger="agentrl.rollout")
    for last in (False, True):
        gateway = FakeGateway()
        ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(1))
        ctx.carry.put(0, 7, {(7, 14): outcome("sid-left-over", seconds=5.0)})
        report = step_without_prompts(ctx, 1, last=last)
        assert report.aborted_seconds == (5.0 if last else 0.0)
        assert bool(ctx.carry.episodes) is not last
        assert ctx.carry.cut_groups == {7: 0}  # the group is still waited for if it comes back
    (line,) = [r.getMessage() for r in caplog.records if "sid-left-over" in r.getMessage()]
    assert "reason=run_ended" in line


def test_the_length_bias_compares_trained_with_everything_the_step_ran() -> None:
    report = StepReport(trained_seconds=[10.0, 10.0], other_seconds=[40.0], episodes_cut=1)
    report.cut_seconds = 30.0
    # trained mean 10; all four episodes (the cut one at its elapsed 30 s) mean 22.5
    assert report.length_bias == pytest.approx(10.0 / 22.5 - 1.0)
    assert StepReport().length_bias is None


def run_of(order: int, protected: bool = False) -> GroupRun:
    inp = EpisodeInput("p", {}, None, group_index=order, index=order)
    prompt = PromptGroup([PlainSample(group_index=order, index=order)], [inp])
    return GroupRun(prompt, order, protected, [outcome(f"s{order}")], [None], [None])


def test_a_batch_never_holds_more_than_b_groups() -> None:
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(1))
    plan = SamplingPlan(batch_size=2, in_flight=4, max_refill_rounds=0, policy="carryOver")
    step = _Step(ctx, None, plan, spec=None, group_filter=None, to_samples=list, step=0)  # type: ignore[arg-type]
    step.kept = [run_of(0), run_of(2), run_of(3)]
    step.backfilled = [run_of(1)]
    step.trim()
    # Backfills go first, then the latest started.
    assert [r.order for r in step.kept] == [0, 2] and step.backfilled == []
    assert sorted(r.order for r in step.cut_runs) == [1, 3]


def test_a_batch_over_b_hands_back_fresh_groups_before_reserved_ones() -> None:
    """The guard keeps a group cut in the step before (reserved) over a fresh one, even the
    latest started: handed back again, it would wait a third step."""
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(1))
    plan = SamplingPlan(batch_size=2, in_flight=4, max_refill_rounds=0, policy="carryOver")
    step = _Step(ctx, None, plan, spec=None, group_filter=None, to_samples=list, step=0)  # type: ignore[arg-type]
    step.kept = [run_of(0, protected=True), run_of(1), run_of(3, protected=True)]
    step.backfilled = [run_of(2)]
    step.trim()
    assert [r.order for r in step.kept] == [0, 3] and step.backfilled == []
    assert sorted(r.order for r in step.cut_runs) == [1, 2]


def test_a_filtered_groups_carried_episode_counts_in_the_length_bias_of_the_step_that_ran_it() -> (
    None
):
    """A group that came back with one carried episode (5 s, run and counted as another
    episode by the step that cut it) and one rerun (7 s), then filtered: of its episodes, this
    step ran the rerun only. Both counted made the trained 10 s episodes look 36% longer than
    the step's episodes, not 18%."""
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(1))
    plan = SamplingPlan(batch_size=1, in_flight=2, max_refill_rounds=0, policy="carryOver")
    step = _Step(ctx, None, plan, spec=None, group_filter=None, to_samples=list, step=1)  # type: ignore[arg-type]
    fresh = outcome("k", seconds=10.0, policy_version=1)
    kept = GroupRun(run_of(0).prompt, 0, False, [fresh], [None], [None])
    inp = EpisodeInput("p", {}, None, group_index=1, index=2)
    prompt = PromptGroup([PlainSample(group_index=1, index=2)] * 2, [inp, inp])
    carried = outcome("c", seconds=5.0)
    filtered = GroupRun(
        prompt, 1, True, [carried, outcome("r", seconds=7.0)], [None] * 2, [None] * 2
    )
    filtered.carried, filtered.taken = 1, {0: (0, carried)}
    step.runs, step.kept = [kept, filtered], [kept]

    step.batch()

    assert step.report.trained_seconds == [10.0] and step.report.other_seconds == [7.0]
    assert step.report.length_bias == pytest.approx(10.0 / 8.5 - 1.0)
    assert step.report.episodes_reused == 1  # used by this step's filter: reused once


def test_an_episode_the_merge_masked_whole_is_masked_time_not_trained_time() -> None:
    """An episode whose only completion the engine aborted (the agent got a 503 and gave its
    result anyway) reaches slime as one sample with every loss mask 0: no token of it trains,
    so its time counts under `masked` and among the length bias's other episodes, as an
    episode `offPolicyTokens: mask` masked whole does. It counted as trained time."""
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(1))
    plan = SamplingPlan(batch_size=1, in_flight=1, max_refill_rounds=0, policy="wait")
    step = _Step(ctx, None, plan, spec=None, group_filter=None, to_samples=list, step=0)  # type: ignore[arg-type]
    inp = EpisodeInput("p", {}, None, group_index=0, index=0)
    prompt = PromptGroup([PlainSample(group_index=0, index=0)] * 2, [inp, inp])
    trained = outcome("t", seconds=10.0)
    aborted = outcome("a", seconds=4.0, turns=[Turn([1, 2], [5, 6], [-0.5, -0.5], ABORT)])
    assert [s.loss_mask for s in aborted.samples] == [[0, 0]]  # one sample, nothing trains
    run = GroupRun(prompt, 0, False, [trained, aborted], [None] * 2, [None] * 2)
    step.runs, step.kept = [run], [run]

    (group,) = step.batch()

    assert [o.session_id for o in group] == ["t", "a"]  # still in its group, for its reward
    assert step.report.trained_seconds == [10.0]
    assert step.report.masked_seconds == 4.0
    assert step.report.other_seconds == [4.0]
    assert step.report.trained_episodes == 2 and step.report.failed_seconds == 0.0
