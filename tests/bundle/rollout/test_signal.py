"""The GRPO signal under failure and staleness, on the real rollout path.

`generate_rollout` runs as slime calls it, on slime's own data source at both pinned
commits, with the stub agent and gateway on a simulated clock (see test_dynamic_sampling).
Checked: an infrastructure failure never shapes its group's filter verdict or advantages,
a group with too few task outcomes is replaced or skipped, and a carried-over episode's
tokens are masked (or trained, or the episode run again) by its age.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink, exposition

from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rewards import post_process_rewards
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.filters import FilterError
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import slime_types
from agentrl.controller.progress import parse_progress

from .doubles import FakeGateway, StubAgent, failing_filter, runtime_config, simulated_clock
from .slime_upstream import COMMITS, buffered_source, data_source_module, slime_args, write_rows


def args(batch: int, config_path: Path) -> SimpleNamespace:
    return SimpleNamespace(
        rollout_batch_size=batch,
        rollout_max_response_len=64,
        rollout_temperature=1.0,
        reward_key=None,
        agentrl_config_path=str(config_path),  # what the reward post-process reads
    )


@dataclass
class Rig:
    agent: StubAgent
    metrics: BundleMetrics
    config_path: Path
    runtime: RolloutRuntime

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def advantages(self, out: Any) -> list[float]:
        flat = [s for g in out.samples for s in g]
        return post_process_rewards(args(len(out.samples), self.config_path), flat)[1]


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Any]:
    runtimes: list[RolloutRuntime] = []

    def make(**grpo: Any) -> Rig:
        config = runtime_config(max_concurrent=16, timeout=3600, **grpo)
        path = tmp_path / f"config-{len(runtimes)}.json"
        path.write_text(config.to_json())
        gateway = FakeGateway()
        agent = StubAgent(gateway)

        async def build() -> RolloutContext:
            return RolloutContext(gateway, agent, asyncio.Semaphore(16))

        metrics = BundleMetrics()
        runtime = RolloutRuntime(build, LocalSink(metrics), loop_factory=simulated_clock)
        install_runtime(runtime, config, slime_types(prefer_plain=True))
        runtimes.append(runtime)
        return Rig(agent, metrics, path, runtime)

    yield make
    install_runtime(None)
    for runtime in runtimes:
        runtime.close()


def ids(out: Any) -> list[int]:
    return [g[0].metadata["id"] for g in out.samples]


# ---- infrastructure failures --------------------------------------------------------------


@pytest.mark.parametrize("commit", COMMITS)
def test_a_group_whose_only_variance_is_a_failure_is_filtered_not_trained(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """Prompt 0 scores 1, 1 and a crashed agent's stand-in 0: counting the 0, its rewards
    vary and the filter keeps it, and both successes train on a +1/3 advantage nobody
    earned. Without it the group has no signal: dropped and replaced, like any zero-variance
    group."""
    rig = make_rig(samplesPerPrompt=3, dynamicSamplingFilter="zeroRewardVariance")
    rows = [
        {"id": 0, "sleep": 5, "reward": 1, "behavior": ["ok", "ok", "error"]},
        {"id": 1, "sleep": 10, "reward": [1, 0, 1]},
        {"id": 2, "sleep": 20, "reward": [0, 1, 0]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 3)

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert ids(out) == [1, 2]
    assert rig.metric("agentrl_groups_total", outcome="filtered") == 1
    assert out.metrics["rollout/dynamic_filter/drop_zero_std_1.0"] == 1


@pytest.mark.parametrize("commit", COMMITS)
def test_too_few_task_outcomes_is_replaced_under_dynamic_sampling(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(dynamicSamplingFilter="zeroRewardVariance")
    rows = [
        {"id": 0, "sleep": 5, "behavior": ["ok", "error"], "reward": 1},
        {"id": 1, "sleep": 10, "reward": [1, 0]},
        {"id": 2, "sleep": 20, "reward": [0, 1]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert ids(out) == [1, 2]  # group 0 had one task outcome: dropped, group 2 took its place
    assert out.metrics["rollout/dynamic_filter/drop_too_few_valid"] == 1
    assert out.metrics["agentrl/groups_too_few_valid"] == 1
    assert rig.metric("agentrl_groups_total", outcome="filtered") == 1


@pytest.mark.parametrize("commit", COMMITS)
def test_a_filtered_groups_failed_episodes_count_in_its_discarded_time(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """`agentrl_discarded_episode_seconds_total{reason="filtered"}` is the time of every
    episode of a dropped group: its failed episodes ran as long and trained nothing either.
    Only the task outcomes' time was counted, so a group dropped for its failures (every
    episode timed out: `too_few_valid`) added nothing to the waste it is."""
    rig = make_rig(dynamicSamplingFilter="zeroRewardVariance")
    rows = [
        {"id": 0, "sleep": 5, "behavior": "error"},  # both episodes fail after 5 s
        {"id": 1, "sleep": [3, 7], "behavior": ["ok", "error"], "reward": 1},
        {"id": 2, "sleep": 10, "reward": [1, 0]},
        {"id": 3, "sleep": 20, "reward": [0, 1]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert ids(out) == [2, 3]
    assert out.metrics["rollout/dynamic_filter/drop_too_few_valid"] == 2
    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="agent_error") == 3
    # Group 0: 2 x 5 s; group 1: 3 s (its task outcome) + 7 s (its failure).
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="filtered") == 20


@pytest.mark.parametrize("commit", COMMITS)
def test_a_step_where_every_episode_failed_reports_no_reward_not_zero(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """The failure's 0 is not a reward, also when no episode reported one: the step's
    reward mean is unknown (NaN in the gauge, absent from W&B), never 0. A reward mean of 0
    read as a collapsed policy, and `status.progress.trainReward` showed it."""
    rig = make_rig()
    rows = [{"id": i, "sleep": 5, "behavior": "error"} for i in range(2)]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)
    rig.metrics.batch_reward_mean.labels("train").set(0.5)  # an earlier step's

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert rig.metric("agentrl_failed_sessions_total", split="train", reason="agent_error") == 4
    assert math.isnan(rig.metric("agentrl_batch_reward_mean", split="train"))
    assert "agentrl/episode_reward_mean" not in out.metrics
    assert "trainReward" not in parse_progress(exposition(rig.metrics))


@pytest.mark.parametrize("commit", COMMITS)
def test_too_few_task_outcomes_without_dynamic_sampling_is_counted_and_skipped(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig()
    rows = [
        {"id": 0, "sleep": 5, "behavior": ["ok", "error"], "reward": 1},
        {"id": 1, "sleep": 10, "reward": [1, 0]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert ids(out) == [0, 1]  # slime still gets rolloutBatchSize groups
    assert rig.advantages(out) == [0.0, 0.0, 0.5, -0.5]  # group 0 trains nothing
    failed = out.samples[0][1]
    assert failed.remove_sample and failed.loss_mask == [0]
    assert rig.metric("agentrl_groups_total", outcome="skipped") == 1
    assert out.metrics["agentrl/groups_skipped"] == 1
    assert rig.metric("agentrl_excluded_episodes_total", reason="agent_error") == 1
    assert rig.metric("agentrl_excluded_episode_share") == pytest.approx(1 / 4)
    assert out.metrics["agentrl/excluded_share"] == pytest.approx(1 / 4)
    # A failure's stand-in 0 is not a reward: not in the reward histogram or the mean.
    assert rig.metric("agentrl_episode_reward_count", split="train") == 3
    assert rig.metric("agentrl_batch_reward_mean", split="train") == pytest.approx(2 / 3)


@pytest.mark.parametrize("commit", COMMITS)
def test_zero_reward_keeps_the_old_behaviour(make_rig: Any, tmp_path: Path, commit: str) -> None:
    rig = make_rig(failedEpisodes="zeroReward")
    rows = [
        {"id": 0, "sleep": 5, "behavior": ["ok", "error"], "reward": 1},
        {"id": 1, "sleep": 10, "reward": [1, 0]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert rig.advantages(out) == [0.5, -0.5, 0.5, -0.5]  # the failure counted as a 0
    assert rig.metric("agentrl_groups_total", outcome="skipped") == 0
    assert rig.metric("agentrl_excluded_episodes_total", reason="agent_error") == 0


@pytest.mark.parametrize("commit", COMMITS)
def test_a_backfills_failed_episode_is_no_trained_groups_exclusion(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    """Prompt 0 has one task outcome: the filter drops it, no refill may replace it, and it
    fills the batch as a backfill (every loss mask 0). Its crashed episode shapes no update,
    so it is not among the trained groups' excluded episodes, nor are its two episodes in
    the share's denominator (they counted 1 of 4 before)."""
    rig = make_rig(dynamicSamplingFilter="zeroRewardVariance", maxRefillRounds=0)
    rows = [
        {"id": 0, "sleep": 5, "behavior": ["ok", "error"], "reward": 1},
        {"id": 1, "sleep": 10, "reward": [1, 0]},
    ]
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2)

    out = generate_rollout(args(2, rig.config_path), 0, source)

    assert ids(out) == [0, 1]
    assert rig.metric("agentrl_groups_total", outcome="backfilled") == 1
    assert not any(any(s.loss_mask) for s in out.samples[0])
    assert rig.metric("agentrl_excluded_episodes_total", reason="agent_error") == 0
    assert out.metrics["agentrl/excluded_episodes"] == 0
    assert out.metrics["agentrl/excluded_share"] == 0.0
    assert rig.metric("agentrl_excluded_episode_share") == 0.0
    # The lag histogram holds the trained group's two episodes, not the backfill's.
    assert rig.metric("agentrl_policy_lag_steps_count") == 2


# ---- stale tokens ---------------------------------------------------------------------------

# Prompt 2 has one fast and one slow episode, prompt 3 only slow ones: with 4 candidates for
# a batch of 2, both are cut at t=20 and come back in the next step; prompt 2's finished
# episode (reward 0, sampled by step 0's policy) is carried over.
STRAGGLER_ROWS = [
    {"id": 0, "sleep": 10, "reward": [0, 1]},
    {"id": 1, "sleep": 20, "reward": [1, 0]},
    {"id": 2, "sleep": [5, 1000, 7], "reward": [0, 1, 1]},
    {"id": 3, "sleep": [1000, 1000, 50, 60], "reward": [1, 0, 1, 0]},
]


def two_steps(rig: Rig, source: Any) -> tuple[Any, Any]:
    first = generate_rollout(args(2, rig.config_path), 0, source)
    return first, generate_rollout(args(2, rig.config_path), 1, source)


@pytest.mark.parametrize("commit", COMMITS)
def test_a_carried_over_episode_is_masked_by_default(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver")
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)

    first, second = two_steps(rig, source)

    assert ids(second) == [2, 3]
    versions = [[s.metadata["policy_version"] for s in g] for g in second.samples]
    assert versions == [[0, 1], [1, 1]]  # prompt 2's first episode ran in step 0
    old = second.samples[0][0]
    assert old.loss_mask == [0] * old.response_length  # sampled by an older policy
    assert any(old.rollout_log_probs)  # logprobs kept exactly as sampled, for TIS
    assert all(any(s.loss_mask) for g in second.samples for s in g if s is not old)
    # Its reward still counts: prompt 2 is (0, 1), so the fresh episode's advantage is +0.5.
    assert rig.advantages(second)[:2] == [-0.5, 0.5]
    tokens = sum(second.samples[0][1].loss_mask)  # what it would train: its sampled tokens
    assert tokens == 4 and rig.metric("agentrl_stale_tokens_total", action="masked") == tokens
    assert rig.metric("agentrl_stale_tokens_total", action="trained") == 0
    assert second.metrics["agentrl/stale_tokens_masked"] == tokens
    # No token of it trains: its 5 s count as thrown away, not as trained.
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="masked") == 5
    assert second.metrics["agentrl/policy_lag_max"] == 1
    assert rig.metric("agentrl_policy_lag_steps_count") == 8
    assert rig.metric("agentrl_policy_lag_steps_bucket", le="0.0") == 7  # 4 + 3 fresh
    assert all(s.metadata["policy_version"] == 0 for g in first.samples for s in g)


@pytest.mark.parametrize("commit", COMMITS)
def test_off_policy_tokens_train_keeps_them_trained_and_counted(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver", offPolicyTokens="train")
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)

    _, second = two_steps(rig, source)

    old = second.samples[0][0]
    assert old.metadata["policy_version"] == 0 and sum(old.loss_mask) == 4
    assert rig.metric("agentrl_stale_tokens_total", action="trained") == 4
    assert second.metrics["agentrl/stale_tokens_trained"] == 4
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="masked") == 0


# Step 0 cuts prompts 2 and 3 (as STRAGGLER_ROWS); prompt 2's finished episode (reward 1,
# sampled by step 0's policy) is carried over. In step 1 both come back reserved, so the
# batch is full at once and no replacement may start; prompt 2's rerun scores 1 as well, so
# the filter drops it and it fills the batch as a backfill: every loss mask 0.
BACKFILLED_CARRY_ROWS = [
    {"id": 0, "sleep": 10, "reward": [0, 1]},
    {"id": 1, "sleep": 20, "reward": [1, 0]},
    {"id": 2, "sleep": [5, 1000, 7], "reward": 1},
    {"id": 3, "sleep": [1000, 1000, 50, 60], "reward": [1, 0, 1, 0]},
]


@pytest.mark.parametrize("tokens", ["mask", "train"])
@pytest.mark.parametrize("commit", COMMITS)
def test_a_backfills_carried_episode_counts_no_stale_token_as_trained(
    make_rig: Any, tmp_path: Path, commit: str, tokens: str
) -> None:
    """A backfill trains no token, so neither do the tokens of its carried-over episode:
    under `offPolicyTokens: train` they were counted as stale tokens trained
    (agentrl_stale_tokens_total{action="trained"}, agentrl/stale_tokens_trained) although
    slime got them with loss mask 0."""
    rig = make_rig(
        overSamplingBatchSize=4,
        stragglerPolicy="carryOver",
        dynamicSamplingFilter="zeroRewardVariance",
        maxRefillRounds=0,
        offPolicyTokens=tokens,
    )
    rows = write_rows(tmp_path / "rows.jsonl", BACKFILLED_CARRY_ROWS)
    source = buffered_source(commit, rows, 2)

    _, second = two_steps(rig, source)

    assert ids(second) == [2, 3]
    assert rig.metric("agentrl_groups_total", outcome="backfilled") == 1
    carried = second.samples[0][0]
    assert carried.metadata["policy_version"] == 0  # sampled by step 0's policy
    assert not any(any(s.loss_mask) for s in second.samples[0])  # a backfill
    trained = sum(
        sum(s.loss_mask) for g in second.samples for s in g if s.metadata["policy_version"] < 1
    )
    assert trained == 0
    assert rig.metric("agentrl_stale_tokens_total", action="trained") == trained
    assert second.metrics["agentrl/stale_tokens_trained"] == trained
    # Its tokens are stale and did not train: counted as masked, whatever the setting.
    assert rig.metric("agentrl_stale_tokens_total", action="masked") == 4
    assert second.metrics["agentrl/stale_tokens_masked"] == 4
    # Its age is no trained episode's: the lag histogram ("per trained episode") holds step
    # 0's four episodes and the trained group's two, none of them stale.
    assert second.metrics["agentrl/policy_lag_max"] == 0
    assert rig.metric("agentrl_policy_lag_steps_count") == 6


@pytest.mark.parametrize("commit", COMMITS)
def test_an_episode_older_than_max_policy_lag_runs_again_from_its_prompt(
    make_rig: Any, tmp_path: Path, commit: str
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver", maxPolicyLag=0)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)

    _, second = two_steps(rig, source)

    assert ids(second) == [2, 3]
    assert len(rig.agent.requests) == 8 + 4  # prompt 2's finished episode ran again too
    assert all(s.metadata["policy_version"] == 1 for g in second.samples for s in g)
    assert rig.metric("agentrl_stale_episodes_restarted_total") == 1
    assert second.metrics["agentrl/stale_episodes_restarted"] == 1
    assert rig.metric("agentrl_stale_tokens_total", action="masked") == 0


@pytest.mark.parametrize("commit", COMMITS)
def test_a_carried_episode_too_old_to_reuse_is_logged_once_with_its_session_id(
    make_rig: Any, tmp_path: Path, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The finished episode thrown away for maxPolicyLag was only counted: its agent session
    (AgentCore, S3 result key) was named nowhere, unlike an expired or aborted one."""
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver", maxPolicyLag=0)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    caplog.set_level("INFO", logger="agentrl.rollout")

    first, second = two_steps(rig, source)

    lines = [r.getMessage() for r in caplog.records if "reason=carry_stale" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("train episode discarded: session=")
    sid = lines[0].split("session=")[1].split()[0]
    # One of step 0's episodes (its group was cut), trained in neither step.
    assert sid in {r.session_id for r in rig.agent.requests[:8]}
    trained = {s.metadata["gateway_session_id"] for out in (first, second) for g in out.samples
               for s in g}  # fmt: skip
    assert len(trained) == 8 and sid not in trained
    assert sum(sid in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("commit", COMMITS)
def test_episodes_of_a_step_that_fails_are_logged_once_with_their_session_id(
    make_rig: Any,
    tmp_path: Path,
    commit: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Step 1 takes prompt 2's carried-over episode out of the carry store, then the user's
    filter raises on the first group that finishes (prompt 2) and the step fails. Prompt 2's
    fresh episode finished and trains nothing: it went without a word, its agent session
    named nowhere, unlike a cut or expired one. The carried one is no loss (the rollout
    state saved after step 0 holds it for the restart: test_resume): said once, not counted
    as thrown away, and back in the carry store."""
    rig = make_rig(
        overSamplingBatchSize=4,
        stragglerPolicy="carryOver",
        dynamicSamplingFilter=failing_filter(tmp_path, monkeypatch, "step_filters"),
    )
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS), 2)
    first = generate_rollout(SimpleNamespace(**vars(args(2, rig.config_path)), fail_filter=False),
                             0, source)  # fmt: skip
    assert ids(first) == [0, 1]
    step_zero = {r.session_id for r in rig.agent.requests}
    carry = rig.runtime.call(rig.runtime.context()).carry
    kept_before, cut_before = dict(carry.episodes), dict(carry.cut_groups)
    assert len(kept_before) == 1 and cut_before
    caplog.set_level("INFO", logger="agentrl.rollout")

    with pytest.raises(FilterError, match="the user's filter has a bug"):
        generate_rollout(SimpleNamespace(**vars(args(2, rig.config_path)), fail_filter=True),
                         1, source)  # fmt: skip

    lines = [r.getMessage() for r in caplog.records if "reason=step_failed" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("train episode discarded: session="), lines
    sid = lines[0].split("session=")[1].split()[0]
    assert sid not in step_zero  # prompt 2's second episode, run in step 1
    assert sum(sid in r.getMessage() for r in caplog.records) == 1
    ((_, carried),) = kept_before.values()
    said = [r.getMessage() for r in caplog.records if carried.session_id in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("train episode kept: session="), said
    assert carry.episodes == kept_before and carry.cut_groups == cut_before
    # Only the fresh episode's time (7 s in step 1) is finished work thrown away.
    assert rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted") == 7


@pytest.mark.parametrize("commit", COMMITS)
def test_a_cut_groups_episode_is_logged_once_when_handing_it_back_fails(
    make_rig: Any, tmp_path: Path, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A data source (`--data-source-path`) whose add_samples takes the empty probe but
    raises on the cut groups: the step fails as it hands them back. Prompt 2's finished
    episode was logged `group_aborted` ("runs again whole") just before, then again
    `step_failed` by the failed step: two lines for one session."""
    base = data_source_module(commit).RolloutDataSourceWithBuffer

    class Refusing(base):  # type: ignore[misc, valid-type]
        def add_samples(self, samples: list[list[Any]]) -> None:
            if samples:
                raise RuntimeError("this data source has a bug")
            super().add_samples(samples)

    rows = write_rows(tmp_path / "rows.jsonl", STRAGGLER_ROWS)
    source = Refusing(slime_args(rows, 2))
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="abort")
    caplog.set_level("INFO", logger="agentrl.rollout")

    with pytest.raises(RuntimeError, match="this data source has a bug"):
        generate_rollout(args(2, rig.config_path), 0, source)

    lines = [r.getMessage() for r in caplog.records if "episode discarded" in r.getMessage()]
    sids = [line.split("session=")[1].split()[0] for line in lines]
    assert len(sids) == 5 and len(set(sids)) == 5, lines  # prompts 0 and 1, prompt 2's first
    assert all("reason=step_failed" in line for line in lines), lines
    assert (
        rig.metric("agentrl_discarded_episode_seconds_total", reason="aborted")
        == 10 + 10 + 20 + 20 + 5
    )


# Prompt 2's first episode fails at once (the agent crashed) while its sibling is still
# running when the batch fills: the group is cut with one finished episode, a failure.
FAILED_THEN_CUT_ROWS = [
    {"id": 0, "sleep": 10, "reward": [0, 1]},
    {"id": 1, "sleep": 20, "reward": [1, 0]},
    {
        "id": 2,
        "behavior": ["error", "ok", "ok", "ok"],
        "sleep": [5, 1000, 7, 9],
        "reward": [0, 1, 0, 1],
    },
    {"id": 3, "sleep": [1000, 1000, 50, 60], "reward": [1, 0, 1, 0]},
]


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("failed", ["exclude", "zeroReward"])
def test_a_cut_groups_failed_episode_runs_again_instead_of_being_carried_over(
    make_rig: Any, tmp_path: Path, commit: str, failed: str
) -> None:
    rig = make_rig(overSamplingBatchSize=4, stragglerPolicy="carryOver", failedEpisodes=failed)
    source = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", FAILED_THEN_CUT_ROWS), 2)

    first, second = two_steps(rig, source)

    assert ids(first) == [0, 1] and ids(second) == [2, 3]
    # A failure is no outcome to reuse: both of prompt 2's episodes run in step 1, so its
    # group trains on two task outcomes (0, 1) of the current policy, not on one outcome
    # beside a stand-in (skipped for too few outcomes, or a 0 under zeroReward).
    group = second.samples[0]
    assert [s.metadata["episode_error"] for s in group] == [None, None]
    assert [s.metadata["policy_version"] for s in group] == [1, 1]
    assert [s.reward for s in group] == [0, 1]
    assert rig.advantages(second)[:2] == [-0.5, 0.5]
    assert len(rig.agent.requests) == 8 + 4  # prompt 3 ran again whole, prompt 2 too
    assert second.metrics["agentrl/policy_lag_max"] == 0
