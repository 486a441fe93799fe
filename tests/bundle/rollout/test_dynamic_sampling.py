"""Dynamic sampling on the real rollout path: over-sampling, filtering, straggler cuts.

Every test calls `generate_rollout` as slime does, with slime's own data-source class at
both pinned commits (`slime_upstream.py` executes `slime/rollout/data_source.py` from the
snapshots) and the stub agent and gateway doubles, on looptime's simulated clock: an agent
"working" for 1,000 s costs no wall time, and nothing asserts on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink
from tests.support.shared import require

from agentrl.api.constants import GROUP_OUTCOMES
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.filters import FilterError
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.source import SourceError
from agentrl.bundle.rollout.types import PlainSample, slime_types

from .doubles import FakeGateway, StubAgent, runtime_config, simulated_clock
from .slime_upstream import (
    COMMITS,
    UPSTREAM,
    buffered_source,
    data_source_module,
    install_filter,
    read_only_source,
    slime_args,
    write_rows,
)


def args(batch: int) -> SimpleNamespace:
    return SimpleNamespace(
        rollout_batch_size=batch,
        rollout_max_response_len=64,
        rollout_temperature=1.0,
        reward_key=None,
    )


@dataclass
class Rig:
    gateway: FakeGateway
    agent: StubAgent
    metrics: BundleMetrics
    runtime: RolloutRuntime

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@pytest.fixture
def make_rig() -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(max_concurrent: int = 16, **grpo: Any) -> Rig:
        config = runtime_config(max_concurrent=max_concurrent, timeout=3600, **grpo)
        gateway = FakeGateway()
        agent = StubAgent(gateway)

        async def build() -> RolloutContext:
            return RolloutContext(gateway, agent, asyncio.Semaphore(max_concurrent))

        metrics = BundleMetrics()
        runtime = RolloutRuntime(build, LocalSink(metrics), loop_factory=simulated_clock)
        install_runtime(runtime, config, slime_types(prefer_plain=True))
        rigs.append(Rig(gateway, agent, metrics, runtime))
        return rigs[-1]

    yield make
    install_runtime(None)
    for rig in rigs:
        rig.runtime.close()


def groups_of(out: Any) -> list[int]:
    return [g[0].group_index for g in out.samples]


# Four prompts, two episodes each: 0 and 1 finish fast; 2 has one fast and one slow
# episode; 3 only slow ones. Lists are per attempt of the row (episodes run again after a
# cut are the next attempts).
STRAGGLER_ROWS = [
    {"id": 0, "sleep": 10, "reward": [0, 1]},
    {"id": 1, "sleep": 20, "reward": [1, 0]},
    {"id": 2, "sleep": [5, 1000, 7], "reward": [0, 1, 1]},
    {"id": 3, "sleep": [1000, 1000, 50, 60], "reward": [1, 0, 1, 0]},
]


@pytest.mark.parametrize("commit", COMMITS)
def test_a_batch_fills_from_over_sampled_groups_and_carries_the_stragglers_over(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver")
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)

    out = generate_rollout(args(2), 0, source)

    # The two fast groups fill the batch; the two slow ones are cut at t=20.
    assert groups_of(out) == [0, 1] and [len(g) for g in out.samples] == [2, 2]
    assert len(rig.agent.requests) == 8
    assert len(rig.agent.cancelled) == 3  # group 2's slow episode, both of group 3
    assert not rig.gateway.open and sorted(rig.gateway.closed) == sorted(rig.gateway.created)
    # The cut groups went back to slime's buffer as the samples they came as.
    assert [[(s.group_index, s.index) for s in g] for g in source.buffer] == [
        [(2, 4), (2, 5)],
        [(3, 6), (3, 7)],
    ]
    assert all(
        s.status == PlainSample().status and s.reward is None for g in source.buffer for s in g
    )
    assert rig.metric("agentrl_groups_total", outcome="kept") == 2
    assert rig.metric("agentrl_groups_total", outcome="carried_over") == 2
    assert rig.metric("agentrl_aborted_episodes_total", split="train", reason="batch_full") == 3
    assert rig.metric("agentrl_episodes_total", split="train", outcome="succeeded") == 5
    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="cancelled") == 0
    assert rig.metric("agentrl_sessions_in_flight", split="train") == 0
    # Cut at t=20: group 2's slow episode ran 20 s, group 3's two episodes 20 s each.
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="cut") == 60
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 0
    assert out.metrics["agentrl/groups_cut"] == 2 and out.metrics["agentrl/episodes_cut"] == 3
    first_step_sids = set(rig.gateway.created)

    out = generate_rollout(args(2), 1, source)

    # The cut groups come back first and are waited for, however slow: nothing starves.
    # Only their unfinished episodes run again; group 2's finished one is reused as it was.
    assert groups_of(out) == [2, 3]
    assert len(rig.agent.requests) == 8 + 3
    reused = [s for s in out.samples[0] if s.session_id in first_step_sids]
    assert len(reused) == 1 and reused[0].reward == 0.0
    assert [s.reward for g in out.samples for s in g] == [0.0, 1.0, 1.0, 0.0]
    # The fresh groups fetched with them were never started (the batch was spoken for):
    # handed straight back, nothing run, nothing counted.
    assert [[s.metadata["id"] for s in g] for g in source.buffer] == [[0, 0], [1, 1]]
    assert rig.metric("agentrl_groups_total", outcome="kept") == 4
    assert rig.metric("agentrl_groups_total", outcome="carried_over") == 2
    assert rig.metric("agentrl_aborted_episodes_total", split="train", reason="batch_full") == 3
    assert not rig.gateway.open


@pytest.mark.parametrize("commit", COMMITS)
def test_abort_hands_the_whole_group_back_and_reruns_every_episode(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="abort")
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)

    out = generate_rollout(args(2), 0, source)

    assert groups_of(out) == [0, 1] and len(rig.agent.cancelled) == 3
    assert rig.metric("agentrl_groups_total", outcome="aborted") == 2
    # Group 2's finished episode (5 s) is thrown away with the cut ones (3 x 20 s).
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="cut") == 60
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 5
    out = generate_rollout(args(2), 1, source)
    assert groups_of(out) == [2, 3]
    assert len(rig.agent.requests) == 8 + 4  # both of group 2's episodes ran again
    assert not rig.gateway.open


@pytest.mark.parametrize("commit", COMMITS)
def test_zero_variance_groups_are_filtered_and_replaced_from_the_data_source(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(dynamicSamplingFilter="zeroRewardVariance")
    rows = [
        {"id": 0, "sleep": 5, "reward": 1},  # all-1: no signal
        {"id": 1, "sleep": 10, "reward": [0, 1]},
        {"id": 2, "sleep": 20, "reward": [1, 0]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2), 0, source)

    assert groups_of(out) == [1, 2]  # group 0 dropped at t=5, group 2 started in its place
    assert source.buffer == []  # a filtered group is consumed, not handed back
    assert rig.metric("agentrl_groups_total", outcome="filtered") == 1
    assert rig.metric("agentrl_groups_total", outcome="kept") == 2
    assert rig.metric("agentrl_zero_variance_group_share") == pytest.approx(1 / 3)
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="filtered") == 10
    assert out.metrics["rollout/dynamic_filter/drop_zero_std_1.0"] == 1  # slime's own key
    assert out.metrics["agentrl/zero_variance_share"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("commit", COMMITS)
def test_refills_stop_at_the_cap_and_the_batch_is_backfilled(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(dynamicSamplingFilter="zeroRewardVariance", maxRefillRounds=1)
    rows = [{"id": i, "sleep": 10 * (i + 1), "reward": 0} for i in range(6)]  # all-0
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2), 0, source)

    # (1 + 1 round) x 2 = 4 groups at most; the last two fill the batch, zero advantage.
    assert len(rig.agent.requests) == 8
    assert groups_of(out) == [2, 3]
    assert rig.metric("agentrl_groups_total", outcome="filtered") == 2
    assert rig.metric("agentrl_groups_total", outcome="backfilled") == 2
    assert rig.metric("agentrl_zero_variance_group_share") == 1.0
    # No token of a backfill trains: its time is thrown away like the dropped groups'.
    assert all(not any(s.loss_mask) for g in out.samples for s in g)
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="filtered") == 2 * (
        10 + 20 + 30 + 40
    )


@pytest.mark.parametrize("commit", COMMITS)
def test_a_step_that_trains_no_episode_has_no_length_bias(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """Step 1's two groups are all-0 and no refill may replace them: both are backfills, no
    token of the batch trains, and the step has no trained episode to measure. The gauge says
    so (NaN), as it does before any step; it showed step 0's bias as step 1's."""
    rig = make_rig(dynamicSamplingFilter="zeroRewardVariance", maxRefillRounds=0)
    rows = [
        {"id": 0, "sleep": 10, "reward": [0, 1]},
        {"id": 1, "sleep": [10, 30], "reward": [1, 0]},
        {"id": 2, "sleep": 20, "reward": 0},
        {"id": 3, "sleep": 40, "reward": 0},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)
    assert math.isnan(rig.metric("agentrl_episode_length_bias"))  # no step yet

    out = generate_rollout(args(2), 0, source)

    assert groups_of(out) == [0, 1]
    # Trained: 10, 10, 10, 30 s, everything the step ran: no bias.
    assert out.metrics["agentrl/length_bias"] == pytest.approx(0.0)
    assert rig.metric("agentrl_episode_length_bias") == pytest.approx(0.0)

    out = generate_rollout(args(2), 1, source)

    assert groups_of(out) == [2, 3]
    assert rig.metric("agentrl_groups_total", outcome="backfilled") == 2
    assert all(not any(s.loss_mask) for g in out.samples for s in g)
    assert "agentrl/length_bias" not in out.metrics
    assert math.isnan(rig.metric("agentrl_episode_length_bias"))


USER_FILTER = """
from slime_filter_types import DynamicFilterOutput

SEEN = []


def at_least(args, samples, **kwargs):
    SEEN.append(samples)
    total = sum(s.get_reward_value(args) for s in samples)
    keep = total >= args.min_reward_total
    return DynamicFilterOutput(keep=keep, reason=None if keep else "too_low")


def varied_with_fallback(args, samples, **kwargs):
    # slime 624b824's check_reward_nonzero_std_with_fallback, without torch.
    rewards = [s.get_reward_value(args) for s in samples]
    keep = max(rewards) - min(rewards) > 1e-6
    return DynamicFilterOutput(
        keep=keep, reason=None if keep else "zero_std", keep_when_insufficient=True
    )


def broken(args, samples, **kwargs):
    raise KeyError("label")


def plain_bool(args, samples, **kwargs):
    return samples[0].metadata["id"] != 0
"""


@pytest.fixture
def user_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A filter module as runtime.extraCode ships it (a directory on sys.path), returning
    slime's own `DynamicFilterOutput` class (its base_types.py has no torch)."""
    import importlib.util

    types_file = (
        UPSTREAM / "slime" / "624b824" / "slime" / "rollout" / "filter_hub" / "base_types.py"
    )
    require(types_file, "slime's snapshot at 624b824")
    spec = importlib.util.spec_from_file_location("slime_filter_types", types_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "slime_filter_types", module)
    spec.loader.exec_module(module)
    code = tmp_path / "extra_code"
    code.mkdir()
    (code / "my_filters.py").write_text(USER_FILTER)
    monkeypatch.syspath_prepend(str(code))
    yield
    sys.modules.pop("my_filters", None)


def test_a_user_filter_with_slimes_signature_gets_args_and_the_groups_samples(
    make_rig: Any, tmp_path: Path, user_filter: Any
) -> None:
    rig = make_rig(dynamicSamplingFilter="my_filters.at_least")
    rows = [
        {"id": 0, "sleep": 5, "reward": [0, 1]},  # total 1: dropped
        {"id": 1, "sleep": 10, "reward": 1},
        {"id": 2, "sleep": 20, "reward": [1, 0.5]},
    ]
    source = buffered_source("624b824", write_rows(tmp_path / "rows.jsonl", rows), 2)
    slime_args = args(2)
    slime_args.min_reward_total = 1.5

    out = generate_rollout(slime_args, 0, source)

    import my_filters  # type: ignore[import-not-found]

    assert groups_of(out) == [1, 2]
    assert [[s.reward for s in g] for g in my_filters.SEEN] == [[0.0, 1.0], [1.0, 1.0], [1.0, 0.5]]
    assert all(isinstance(s, PlainSample) for g in my_filters.SEEN for s in g)
    assert out.metrics["rollout/dynamic_filter/drop_too_low"] == 1
    assert rig.metric("agentrl_groups_total", outcome="filtered") == 1


def test_a_filter_that_cannot_be_imported_stops_the_step_before_anything_runs(
    make_rig: Any, tmp_path: Path
) -> None:
    rig = make_rig(dynamicSamplingFilter="missing_module.fn")
    source = buffered_source("fa3c990", write_rows(tmp_path / "rows.jsonl", [{"id": 0}]), 2)
    with pytest.raises(FilterError, match=r"spec.grpo.dynamicSamplingFilter.*runtime.extraCode"):
        generate_rollout(args(2), 0, source)
    assert rig.agent.requests == [] and source.sample_offset == 0


@pytest.mark.parametrize("commit", COMMITS)
def test_a_read_only_data_source_is_refused_before_anything_runs_when_groups_are_cut(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS)
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver")
    source = read_only_source(commit, rows, 2)
    with pytest.raises(SourceError, match=r"RolloutDataSourceWithBuffer.*stragglerPolicy: wait"):
        generate_rollout(args(2), 0, source)
    assert rig.agent.requests == [] and source.sample_offset == 0


@pytest.mark.parametrize("commit", COMMITS)
def test_wait_for_all_works_with_a_read_only_data_source(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig()  # today's defaults: no over-sampling, no filter, wait
    source = read_only_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    out = generate_rollout(args(2), 0, source)
    assert groups_of(out) == [0, 1] and rig.agent.cancelled == []
    assert rig.metric("agentrl_groups_total", outcome="kept") == 2


def test_eval_is_never_filtered_or_cut(make_rig: Any, tmp_path: Path) -> None:
    eval_rows = tmp_path / "eval.jsonl"
    write_rows(
        eval_rows,
        [
            {"id": "e0", "sleep": 5, "reward": 1},  # zero variance
            {"id": "e1", "sleep": [10, 5000], "reward": [1, 0]},  # a straggler
            {"id": "e2", "sleep": 10, "reward": 0},  # zero variance
        ],
    )
    rig = make_rig(
        overSamplingBatchSize=4,
        dynamicSamplingFilter="zeroRewardVariance",
        stragglerPolicy="carryOver",
    )
    config = runtime_config(
        max_concurrent=16,
        timeout=3600 * 3,
        eval_sets=[{"name": "e", "path": str(eval_rows), "samplesPerPrompt": 2}],
        overSamplingBatchSize=4,
        dynamicSamplingFilter="zeroRewardVariance",
        stragglerPolicy="carryOver",
    )
    install_runtime(rig.runtime, config, slime_types(prefer_plain=True))

    out = generate_rollout(args(2), 0, None, evaluation=True)

    assert out.data["e"]["rewards"] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert rig.agent.cancelled == [] and len(rig.agent.finished) == 6
    assert rig.metric("agentrl_aborted_episodes_total", split="eval", reason="batch_full") == 0
    # eval groups are not sampled (every outcome's series exists at 0 from the start)
    assert {rig.metric("agentrl_groups_total", outcome=o) for o in GROUP_OUTCOMES} == {0}
    assert rig.metric("agentrl_rollout_step_seconds_count", split="eval") == 1
    assert rig.metric("agentrl_episode_seconds_count", split="eval") == 6


def test_keep_when_insufficient_keeps_a_dropped_group_instead_of_starting_another(
    make_rig: Any, tmp_path: Path, user_filter: Any
) -> None:
    """slime 624b824's rule: a rejected group with keep_when_insufficient stays when
    dropping it would leave too few candidates for the batch."""
    rig = make_rig(dynamicSamplingFilter="my_filters.varied_with_fallback")
    rows = [{"id": 0, "sleep": 5, "reward": 1}, {"id": 1, "sleep": 10, "reward": [0, 1]}]
    source = buffered_source("624b824", write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2), 0, source)

    assert groups_of(out) == [0, 1] and len(rig.agent.requests) == 4  # no replacement
    assert rig.metric("agentrl_groups_total", outcome="backfilled") == 1


def test_a_bare_bool_from_a_user_filter_is_slimes_legacy_form(
    make_rig: Any, tmp_path: Path, user_filter: Any
) -> None:
    make_rig(dynamicSamplingFilter="my_filters.plain_bool")
    rows = [{"id": i, "sleep": 10 * (i + 1), "reward": [0, 1]} for i in range(3)]
    source = buffered_source("fa3c990", write_rows(tmp_path / "rows.jsonl", rows), 2)
    out = generate_rollout(args(2), 0, source)
    assert groups_of(out) == [1, 2]
    assert out.metrics["rollout/dynamic_filter/drop_filtered"] == 1


@pytest.mark.parametrize("commit", COMMITS)
def test_a_failing_step_stops_every_episode_and_hands_every_group_back(
    make_rig: Any, tmp_path: Path, user_filter: Any, commit: str
) -> None:
    rig = make_rig(dynamicSamplingFilter="my_filters.broken")
    rows = [{"id": 0, "sleep": 5}, {"id": 1, "sleep": 1000}]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    with pytest.raises(FilterError, match=r"my_filters\.broken raised KeyError"):
        generate_rollout(args(2), 0, source)

    assert len(rig.agent.cancelled) == 2 and not rig.gateway.open
    assert [[s.metadata["id"] for s in g] for g in source.buffer] == [[0, 0], [1, 1]]
    # A cancelled episode is counted as such (not as aborted by the policy).
    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="cancelled") == 2
    assert rig.metric("agentrl_sessions_in_flight", split="train") == 0


def lines_naming(caplog: pytest.LogCaptureFixture, sid: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if sid in r.getMessage()]


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("policy", ["carryOver", "abort"])
def test_every_episode_a_cut_stops_or_throws_away_is_logged_once_with_its_session_id(
    make_rig: Any, tmp_path: Path, commit: str, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy=policy)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    caplog.set_level("INFO", logger="agentrl.rollout")

    out = generate_rollout(args(2), 0, source)

    # The three running episodes the cut stopped: each named once, with why.
    assert len(rig.agent.cancelled) == 3
    for sid in rig.agent.cancelled:
        (line,) = lines_naming(caplog, sid)
        assert "reason=batch_full" in line
    trained = {s.session_id for g in out.samples for s in g}
    (finished_cut,) = set(rig.agent.finished) - trained  # group 2's finished episode
    if policy == "abort":  # thrown away with its group: never trains, named once
        (line,) = lines_naming(caplog, finished_cut)
        assert "reason=group_aborted" in line
    else:  # kept for the group's return: nothing lost, nothing to report
        assert lines_naming(caplog, finished_cut) == []


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("case", ["carryOver", "carryOver, last step", "abort"])
def test_a_step_whose_state_is_not_saved_names_each_finished_episode_once(
    make_rig: Any,
    tmp_path: Path,
    commit: str,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The step above, its rollout state's write failing at its end: every finished episode
    it ran is thrown away with it. Group 2's finished episode, named `group_aborted` at the
    cut under `abort` (under `carryOver`, `run_ended` when the step is the run's last), was
    named again `step_failed` by the failed step: two lines for one session. Each is named
    once, its time counted once."""
    from agentrl.bundle.rollout import driver

    policy, last = case.partition(",")[0], case.endswith("last step")

    def full_disk(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy=policy)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    caplog.set_level("INFO", logger="agentrl.rollout")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(OSError, match="No space left"):
        patch.setattr(driver, "save_step", full_disk)
        step_args = args(2)
        if last:
            step_args.num_rollout = 1  # slime's --num-rollout: step 0 is the run's last
        generate_rollout(step_args, 0, source)

    lines = [r.getMessage() for r in caplog.records if "episode discarded" in r.getMessage()]
    sids = [line.split("session=")[1].split()[0] for line in lines]
    # Groups 0 and 1 (two episodes each) and group 2's finished one.
    assert len(set(sids)) == 5 and len(sids) == 5, lines
    assert set(sids) == set(rig.agent.finished)
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == (
        10 + 10 + 20 + 20 + 5
    )


def newest_group_only(args: Any, rollout_id: Any, buffer: list[Any], num_samples: int) -> list[Any]:
    """A `--buffer-filter-path` function (slime's signature: it takes what it hands out off
    the buffer): the group handed back last, one per call."""
    return [buffer.pop()] if buffer and num_samples > 0 else []


# Step 0: A (id 0) and X (id 1) are cut at t=20, A's first episode finished (kept). Step 1,
# with a buffer filter handing out one group per call, newest first: X and three fresh
# groups; F1 (id 4) is filtered at t=1 and A comes in its place (reserved: X and A are the
# batch of 2), so F2 (id 5, 10 s episodes) and F3 (id 6) are cut then.
TRIM_ROWS = [
    {"id": 0, "sleep": [5, 1000, 35], "reward": [1, 0, 0]},  # A
    {"id": 1, "sleep": [1000, 1000, 30, 40], "reward": [0, 0, 1, 0]},  # X
    {"id": 2, "sleep": 10, "reward": [0, 1]},
    {"id": 3, "sleep": 20, "reward": [1, 0]},
    {"id": 4, "sleep": 1, "reward": 1},  # F1: no variance
    {"id": 5, "sleep": 10, "reward": [0, 1]},  # F2
    {"id": 6, "sleep": 1000, "reward": [0, 1]},  # F3: cut
]


def trim_rig(make_rig: Any, tmp_path: Path, commit: str, policy: str) -> tuple[Any, Any]:
    """TRIM_ROWS' rig (B=2, O=4, one refill round, maxPolicyLag 1) and slime's own data
    source at `commit`, with the buffer filter that hands out one group per call."""
    rig = make_rig(
        overSamplingBatchSize=4,
        stragglerPolicy=policy,
        dynamicSamplingFilter="zeroRewardVariance",
        maxRefillRounds=1,
        maxPolicyLag=1,
    )
    settings = slime_args(write_rows(tmp_path / "rows.jsonl", TRIM_ROWS), 2)
    settings.buffer_filter_path = f"{__name__}.newest_group_only"
    return rig, data_source_module(commit).RolloutDataSourceWithBuffer(settings)


@pytest.mark.parametrize("commit", COMMITS)
def test_a_reserved_group_a_refill_hands_out_trains_in_that_step(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """A group cut once is waited for when it comes back, so it trains within two steps and
    its finished episodes are reused at most one update old, also when a buffer filter hands
    it out only in a refill. Handing it back again (as the latest started of three kept
    groups) made it wait a third step, where its carried episode, two updates old, was thrown
    away (maxPolicyLag 1) and run again."""
    rig, source = trim_rig(make_rig, tmp_path, commit, "carryOver")

    out = generate_rollout(args(2), 0, source)
    assert groups_of(out) == [2, 3]
    assert [g[0].metadata["id"] for g in source.buffer] == [0, 1]
    first_step_sids = set(rig.gateway.created)

    out = generate_rollout(args(2), 1, source)

    # X and A, both cut in step 0, train now; A with its episode of step 0.
    assert [g[0].metadata["id"] for g in out.samples] == [1, 0]
    reused = [s for s in out.samples[1] if s.session_id in first_step_sids]
    assert len(reused) == 1 and reused[0].metadata["policy_version"] == 0
    assert out.metrics["agentrl/policy_lag_max"] == 1
    # F2 and F3 go back (F1 was filtered).
    assert sorted(g[0].metadata["id"] for g in source.buffer) == [5, 6]

    out = generate_rollout(args(2), 2, source)

    # Nothing carried is too old to reuse, and no token of the batch is masked as stale.
    assert out.metrics["agentrl/stale_episodes_restarted"] == 0
    assert out.metrics["agentrl/stale_tokens_masked"] == 0


@pytest.mark.parametrize("policy", ["abort", "carryOver"])
@pytest.mark.parametrize("commit", COMMITS)
def test_the_cut_comes_as_soon_as_a_refill_fills_the_batch_with_reserved_groups(
    make_rig: Any, tmp_path: Path, commit: str, policy: str
) -> None:
    """TRIM_ROWS' step 1: at t=1 F1 is filtered and its refill brings A, so X and A (both
    reserved) are the batch of 2. F2 and F3 are cut then, one second into their episodes.
    Checked only when the next group finished, the cut waited for F2 (t=10): F2 and F3 ran
    nine seconds more per episode, and F2, kept, went back all the same (over B), its two
    finished episodes thrown away under `abort`, under `carryOver` reused a step late with
    every token masked (one update old): its group trained nothing in step 2."""
    rig, source = trim_rig(make_rig, tmp_path, commit, policy)
    generate_rollout(args(2), 0, source)

    def discarded() -> dict[str, float]:
        return {
            reason: rig.metric("agentrl_discarded_episode_seconds_total", reason=reason)
            for reason in ("cut", "aborted")
        }

    before = discarded()

    out = generate_rollout(args(2), 1, source)

    assert [g[0].metadata["id"] for g in out.samples] == [1, 0]  # X and A, as before
    assert sorted(g[0].metadata["id"] for g in source.buffer) == [5, 6]  # F2 and F3
    # F2's and F3's four episodes, cut at t=1, one second each; none of them finished.
    after = discarded()
    assert after["cut"] - before["cut"] == 4 and after["aborted"] == before["aborted"]
    assert out.metrics["agentrl/episodes_cut"] == 4

    out = generate_rollout(args(2), 2, source)

    # Every group of step 2 ran on its policy: no token is masked as stale.
    assert [s.metadata["policy_version"] for g in out.samples for s in g] == [2] * 4
    assert out.metrics["agentrl/stale_tokens_masked"] == 0


def returned_groups_three_at_a_time(
    args: Any, rollout_id: Any, buffer: list[Any], num_samples: int
) -> list[Any]:
    """A `--buffer-filter-path` function (slime's signature) that hands handed-back groups out
    only once three or more wait, then as many as asked (slime's `pop_first` order): groups
    cut in two steps come out together, more of them than the batch holds."""
    if len(buffer) < 3:
        return []
    out = buffer[: min(len(buffer), num_samples)]
    del buffer[: len(out)]
    return out


def _cut_with_one_finished(i: int) -> dict[str, Any]:
    # One fast episode (kept when its group is cut), one slow (cut), then the rerun.
    return {"id": i, "sleep": [5, 1000, 7], "reward": [1, 0, 0]}


# B=2, O=4: each step keeps its two fast groups and cuts the other two at t=20, each with one
# finished episode carried. Step 1 gets no returned group (two wait); step 2 gets all four
# cut so far, two of them more than the batch holds; step 4 gets step 1's two back.
RECUT_ROWS = [
    {"id": 0, "sleep": 10, "reward": [0, 1]},
    {"id": 1, "sleep": 20, "reward": [1, 0]},
    _cut_with_one_finished(2),
    _cut_with_one_finished(3),
    {"id": 4, "sleep": 10, "reward": [0, 1]},
    {"id": 5, "sleep": 20, "reward": [1, 0]},
    _cut_with_one_finished(6),
    _cut_with_one_finished(7),
    {"id": 8, "sleep": 10, "reward": [0, 1]},
    {"id": 9, "sleep": 20, "reward": [1, 0]},
    _cut_with_one_finished(10),
    _cut_with_one_finished(11),
]


def recut_rig(make_rig: Any, tmp_path: Path, commit: str) -> tuple[Any, Any]:
    """RECUT_ROWS' rig (B=2, O=4, carryOver, maxPolicyLag 3) and slime's own data source at
    `commit`, with the buffer filter that holds returned groups back until three wait."""
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver", maxPolicyLag=3)
    settings = slime_args(write_rows(tmp_path / "rows.jsonl", RECUT_ROWS), 2)
    settings.buffer_filter_path = f"{__name__}.returned_groups_three_at_a_time"
    return rig, data_source_module(commit).RolloutDataSourceWithBuffer(settings)


def step_line(caplog: pytest.LogCaptureFixture, step: int) -> dict[str, str]:
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(f"Rollout {step} groups:")
    ]
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


@pytest.mark.parametrize("commit", COMMITS)
def test_a_carried_episode_counts_as_reused_once_when_its_group_trains(
    make_rig: Any, tmp_path: Path, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """More groups cut earlier come back at once than the batch holds: two are waited for,
    the other two go straight back with their carried episodes. Those were counted as reused
    in the step that handed them back and again in the step that trained them, so the step
    line's `episodes_reused` said 4 for a batch reusing 2, and 6 over the run for the 4
    carried episodes that trained. Their age still goes by the step that ran them."""
    rig, source = recut_rig(make_rig, tmp_path, commit)
    caplog.set_level("INFO", logger="agentrl.rollout")
    for step in range(2):
        out = generate_rollout(args(2), step, source)
        assert groups_of(out) == [4 * step, 4 * step + 1]
    ran_before = set(rig.gateway.created)

    out = generate_rollout(args(2), 2, source)

    # 2 and 3 (cut in step 0) train; 6 and 7 (cut in step 1) go back untouched.
    assert [g[0].metadata["id"] for g in out.samples] == [2, 3]
    reused = [s for g in out.samples for s in g if s.session_id in ran_before]
    assert len(reused) == 2 and {s.metadata["policy_version"] for s in reused} == {0}
    assert [g[0].metadata["id"] for g in source.buffer] == [6, 7]
    assert step_line(caplog, 2)["episodes_reused"] == "2"

    out = generate_rollout(args(2), 3, source)  # 6 and 7 wait (two in the buffer)
    assert groups_of(out) == [8, 9] and step_line(caplog, 3)["episodes_reused"] == "0"
    out = generate_rollout(args(2), 4, source)

    # 6 and 7 train with the episodes step 1 ran: three updates old, as sampled, not as
    # old as the step that last handed them back.
    assert [g[0].metadata["id"] for g in out.samples] == [6, 7]
    reused = [s for g in out.samples for s in g if s.session_id in ran_before]
    assert len(reused) == 2 and {s.metadata["policy_version"] for s in reused} == {1}
    assert out.metrics["agentrl/policy_lag_max"] == 3
    assert step_line(caplog, 4)["episodes_reused"] == "2"


@pytest.mark.parametrize("commit", COMMITS)
def test_the_length_bias_leaves_out_carried_episodes_a_step_hands_back_again(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """RECUT_ROWS' step 2 trains 2 and 3: each its carried 5 s episode and a 7 s rerun, the
    only episodes the step ran. 6 and 7 go straight back with their carried 5 s episodes,
    which step 1 ran (and counted) and nothing trains now; counted again as run by step 2,
    they made its trained episodes look 6% longer than the step's (length_bias 0.059)."""
    rig, source = recut_rig(make_rig, tmp_path, commit)
    for step in range(2):
        generate_rollout(args(2), step, source)

    out = generate_rollout(args(2), 2, source)

    assert [g[0].metadata["id"] for g in out.samples] == [2, 3]
    assert [g[0].metadata["id"] for g in source.buffer] == [6, 7]
    assert out.metrics["agentrl/length_bias"] == pytest.approx(0.0)
    assert rig.metric("agentrl_episode_length_bias") == pytest.approx(0.0)


@pytest.mark.parametrize("commit", COMMITS)
def test_a_carried_episode_too_old_to_reuse_counts_as_thrown_away(
    make_rig: Any, tmp_path: Path, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """maxPolicyLag 0 reuses no carried episode: group 2's finished 5 s episode, kept when the
    batch filled in step 0, is one update old when the group comes back, so its prompt runs
    again. Like a kept episode the data source never handed back (carry_expired), its time
    trained nothing: it counts under reason "aborted", once, as its log line says."""
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver", maxPolicyLag=0)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    caplog.set_level("INFO", logger="agentrl.rollout")
    out = generate_rollout(args(2), 0, source)
    (kept,) = set(rig.agent.finished) - {s.session_id for g in out.samples for s in g}
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 0

    out = generate_rollout(args(2), 1, source)

    assert groups_of(out) == [2, 3]
    assert kept not in {s.session_id for g in out.samples for s in g}
    assert out.metrics["agentrl/stale_episodes_restarted"] == 1
    (line,) = lines_naming(caplog, kept)
    assert "reason=carry_stale" in line
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 5


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("policy", ["carryOver", "abort"])
def test_a_cut_groups_failed_episode_counts_as_thrown_away_under_either_policy(
    make_rig: Any, tmp_path: Path, commit: str, policy: str
) -> None:
    """Group 2's first episode fails after 5 s (the agent crashed) and the batch fills at t=20
    while its second runs. The failed one is no outcome to carry over: it runs again with its
    group under `carryOver` as under `abort`, its 5 s trained nothing. `abort` counted them
    (with its finished episodes), `carryOver` nowhere."""
    rows = [dict(r) for r in STRAGGLER_ROWS]
    rows[2]["behavior"] = ["error", "ok", "ok"]
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy=policy)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2), 0, source)

    assert groups_of(out) == [0, 1]
    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="agent_error") == 1
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 5
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="cut") == 60

    out = generate_rollout(args(2), 1, source)

    # It ran again with its group: nothing of step 0's attempt trains.
    assert groups_of(out) == [2, 3] and not {s.session_id for g in out.samples for s in g} & set(
        rig.gateway.created[:8]
    )


@pytest.mark.parametrize("commit", COMMITS)
def test_a_failing_step_counts_the_time_of_every_episode_it_throws_away(
    make_rig: Any, tmp_path: Path, user_filter: Any, commit: str
) -> None:
    """Group 0's two episodes end at t=5, one of them failed (the agent crashed), and the
    filter raises on the group: the step fails while group 1's two episodes run. The
    finished task outcome's 5 s counted as thrown away, the failed one's nowhere, though a
    cut group's failed episode counts its time; nor the two stopped ones' 5 s each, though
    an episode the cut stops counts its time."""
    rig = make_rig(dynamicSamplingFilter="my_filters.broken", minValidSamplesPerGroup=1)
    rows = [{"id": 0, "sleep": 5, "behavior": ["error", "ok"]}, {"id": 1, "sleep": 1000}]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    with pytest.raises(FilterError, match=r"my_filters\.broken raised KeyError"):
        generate_rollout(args(2), 0, source)

    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="agent_error") == 1
    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="cancelled") == 2
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 10
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="cut") == 10


@pytest.fixture
def told_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user filter (slime's signature) that keeps every group, and raises (the step
    fails) while the step's args say `fail_filter`."""

    def fails_when_told(args: Any, samples: list[Any], **kwargs: Any) -> bool:
        if getattr(args, "fail_filter", False):
            raise RuntimeError("the user's filter has a bug")
        return True

    install_filter(monkeypatch, "told_filters", fails_when_told)


@pytest.mark.parametrize("commit", COMMITS)
def test_a_carried_episode_too_old_to_reuse_in_a_step_that_fails_counts_once(
    make_rig: Any,
    tmp_path: Path,
    commit: str,
    told_filter: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Step 1 finds group 2's kept 5 s episode too old (maxPolicyLag 0), then fails when
    group 2's two new episodes end (7 s and 5 s, thrown away with the step). The kept one was
    named thrown away (carry_stale) and its time counted with the failed step's report, which
    nothing records, and it was not put back with the step's other carried episodes: the
    store no longer matched the rollout state saved after step 0 (a restart finds it, and
    names it again), and step 1 run again did not count it. It is thrown away once, when a
    step that ran its prompt again ends."""
    rig = make_rig(
        overSamplingBatchSize=4,
        stragglerPolicy="carryOver",
        maxPolicyLag=0,
        dynamicSamplingFilter="told_filters.fails_when_told",
    )
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    caplog.set_level("INFO", logger="agentrl.rollout")
    out = generate_rollout(args(2), 0, source)
    (kept,) = set(rig.agent.finished) - {s.session_id for g in out.samples for s in g}
    failing = args(2)
    failing.fail_filter = True

    with pytest.raises(FilterError, match="the user's filter has a bug"):
        generate_rollout(failing, 1, source)

    assert lines_naming(caplog, kept) == []
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 12

    out = generate_rollout(args(2), 1, source)  # the step again, in the same process

    assert groups_of(out) == [2, 3]
    (line,) = lines_naming(caplog, kept)
    assert "reason=carry_stale" in line
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 12 + 5
    assert rig.metric("agentrl_stale_episodes_restarted_total") == 1
