"""Episode-level reward normalisation (slime's --custom-reward-post-process-path)."""

from __future__ import annotations

import atexit
import math
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.rewards import (
    episode_key,
    normalization_settings,
    post_process_rewards,
)


@dataclass
class S:
    """Duck-typed slime Sample: only the attributes the post-process reads."""

    group_index: int | None
    rollout_id: int | None
    reward: Any
    index: int = 0
    session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def write_config(directory: Path, mode: str, std: bool, **grpo: Any) -> str:
    """A runtime config whose spec.grpo.rewardNormalization is (mode, std), plus `grpo`."""
    config = RuntimeConfig.model_validate(
        {
            "experiment": "exp",
            "namespace": "ns",
            "bundleVersion": "t",
            "gatewayUrl": "http://gw",
            "spec": {
                "model": {"path": "/m", "type": "qwen2.5-0.5B"},
                "data": {"train": "/d.jsonl"},
                "agent": {"http": {"url": "http://agent"}},
                "grpo": {
                    "numRollouts": 1,
                    "rewardNormalization": {"mode": mode, "std": std},
                    **grpo,
                },
            },
        }
    )
    extra = "".join(f"-{k}={v}" for k, v in sorted(grpo.items()))
    path = directory / f"config-{mode}-{std}{extra}.json"
    path.write_text(config.to_json(), encoding="utf-8")
    return str(path)


# One config per setting, written once (hypothesis re-runs tests without fixtures).
_CONFIGS = Path(tempfile.mkdtemp(prefix="agentrl-rewards-"))
atexit.register(shutil.rmtree, _CONFIGS, ignore_errors=True)


def args(
    mode: str = "grpo", std: bool = False, grpo: dict[str, Any] | None = None, **kw: Any
) -> SimpleNamespace:
    """slime's args as the launcher leaves them: the custom config names the runtime config."""
    return SimpleNamespace(
        agentrl_config_path=write_config(_CONFIGS, mode, std, **(grpo or {})), **kw
    )


def episode(group: int, rid: int, reward: float, segments: int = 1) -> list[S]:
    return [S(group, rid, reward) for _ in range(segments)]


def test_an_episode_with_three_segments_weighs_the_same_as_one_with_one() -> None:
    samples = [*episode(0, 1, 1.0, segments=3), *episode(0, 2, 0.0, segments=1)]
    raw, rewards = post_process_rewards(args(), samples)
    assert raw == [1.0, 1.0, 1.0, 0.0]
    # Episode mean is 0.5 (two episodes); a per-sample mean would be 0.75.
    assert rewards == [0.5, 0.5, 0.5, -0.5]


def test_failed_episodes_count_in_their_group() -> None:
    samples = [*episode(3, 1, 1.0), *episode(3, 2, 0.0), *episode(3, 3, 0.0), *episode(3, 4, 0.0)]
    _, rewards = post_process_rewards(args(), samples)
    assert rewards == [0.75, -0.25, -0.25, -0.25]


def test_groups_are_normalised_independently_and_interleaving_does_not_matter() -> None:
    samples = [S(0, 1, 1.0), S(1, 2, 4.0), S(0, 3, 3.0), S(1, 4, 4.0), S(0, 1, 1.0)]
    _, rewards = post_process_rewards(args(), samples)
    assert rewards == [-1.0, 0.0, 1.0, 0.0, -1.0]


def test_std_on_divides_by_the_episode_sample_std() -> None:
    samples = [*episode(0, 1, 1.0, 2), *episode(0, 2, 0.0), *episode(0, 3, 0.0)]
    _, rewards = post_process_rewards(args(std=True), samples)
    values = [1.0, 0.0, 0.0]
    std = statistics.stdev(values)
    mean = statistics.fmean(values)
    expected = [(v - mean) / (std + 1e-6) for v in (1.0, 1.0, 0.0, 0.0)]
    assert rewards == pytest.approx(expected)


def test_std_on_leaves_a_zero_variance_group_at_zero() -> None:
    _, rewards = post_process_rewards(args(std=True), episode(0, 1, 1.0) + episode(0, 2, 1.0))
    assert rewards == [0.0, 0.0]
    _, single = post_process_rewards(args(std=True), episode(0, 1, 1.0, 2))
    assert single == [0.0, 0.0]


def test_identity_returns_raw_rewards() -> None:
    samples = [*episode(0, 1, 1.0, 2), *episode(0, 2, 0.25)]
    raw, rewards = post_process_rewards(args("identity"), samples)
    assert raw == rewards == [1.0, 1.0, 0.25]
    assert rewards is not raw


def test_padding_is_untouched() -> None:
    samples = [*episode(0, 1, 1.0), S(-1, None, 0.0), *episode(0, 2, 0.0), S(-1, None, 0.5)]
    _, rewards = post_process_rewards(args(), samples)
    assert rewards == [0.5, 0.0, -0.5, 0.5]
    raw, rewards = post_process_rewards(args(), [S(-1, None, None), *episode(0, 1, 1.0)])
    assert raw == [0.0, 1.0] and rewards == [0.0, 0.0]


def test_dict_rewards_use_the_reward_key() -> None:
    samples = [S(0, 1, {"acc": 1.0, "len": 3}), S(0, 2, {"acc": 0.0, "len": 9})]
    raw, rewards = post_process_rewards(args(reward_key="acc"), samples)
    assert raw == [1.0, 0.0] and rewards == [0.5, -0.5]
    with pytest.raises(ValueError, match="--reward-key"):
        post_process_rewards(args(), samples)


def test_nested_groups_are_flattened_in_order() -> None:
    raw, rewards = post_process_rewards(args(), [[S(0, 1, 1.0)], [S(0, 2, 0.0), S(0, 2, 0.0)]])
    assert raw == [1.0, 0.0, 0.0] and rewards == [0.5, -0.5, -0.5]


def test_episode_falls_back_to_the_session_id_without_rollout_id() -> None:
    samples = [
        S(0, None, 1.0, session_id="a"),
        S(0, None, 1.0, metadata={"gateway_session_id": "a"}),
        S(0, None, 0.0, metadata={"session_id": "b"}),
    ]
    assert episode_key(samples[0], 0) == episode_key(samples[1], 1)
    _, rewards = post_process_rewards(args(), samples)
    assert rewards == [0.5, 0.5, -0.5]
    # Without any id each sample is its own episode.
    assert episode_key(S(0, None, 1.0), 4) != episode_key(S(0, None, 1.0), 5)


@pytest.mark.parametrize(
    ("samples", "error"),
    [
        ([S(0, 1, 1.0), S(0, 1, 0.0)], "carries rewards"),
        ([S(None, 1, 1.0)], "no group_index"),
        ([S(0, 1, None)], "must be a number"),
        ([S(0, 1, math.nan)], "reward is nan"),
    ],
)
def test_bad_samples_fail_loudly(samples: list[S], error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        post_process_rewards(args(), samples)


def test_settings_come_only_from_the_runtime_config_named_in_the_custom_config(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, "identity", True)
    assert normalization_settings(SimpleNamespace(agentrl_config_path=path)) == ("identity", True)
    # slime's own flags and custom-config keys of older agentrl releases change nothing.
    ns = SimpleNamespace(
        agentrl_config_path=path,
        rewards_normalization=True,
        grpo_std_normalization=False,
        agentrl_reward_normalization="grpo",
    )
    assert normalization_settings(ns) == ("identity", True)
    raw, rewards = post_process_rewards(ns, [*episode(0, 1, 1.0), *episode(0, 2, 0.0)])
    assert raw == rewards == [1.0, 0.0]


def test_without_the_runtime_config_the_post_process_refuses_to_guess() -> None:
    with pytest.raises(ValueError, match=r"agentrl_config_path.*agentrl.bundle.launch"):
        post_process_rewards(SimpleNamespace(rewards_normalization=True), episode(0, 1, 1.0))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.floats(-5, 5), st.integers(1, 4)), min_size=1, max_size=24
    ),
    st.booleans(),
)
def test_segments_per_episode_never_change_advantages(
    episodes: list[tuple[int, float, int]], std: bool
) -> None:
    """Fanning an episode out into k samples gives each the value it has with k = 1, and
    the episode advantages of every group sum to zero."""
    fanned = [S(g, rid, r) for rid, (g, r, k) in enumerate(episodes) for _ in range(k)]
    single = [S(g, rid, r) for rid, (g, r, _) in enumerate(episodes)]
    _, fanned_rewards = post_process_rewards(args(std=std), fanned)
    _, single_rewards = post_process_rewards(args(std=std), single)
    by_episode = {s.rollout_id: v for s, v in zip(fanned, fanned_rewards, strict=True)}
    assert [by_episode[s.rollout_id] for s in single] == pytest.approx(single_rewards)
    for group in {g for g, _, _ in episodes}:
        values = [v for s, v in zip(single, single_rewards, strict=True) if s.group_index == group]
        assert math.fsum(values) == pytest.approx(0.0, abs=1e-6)


def failed(group: int, rid: int, reason: str = "timeout") -> S:
    """The stand-in sample of an episode that failed (what the rollout builds)."""
    return S(group, rid, 0.0, metadata={"episode_error": reason})


@pytest.mark.parametrize("std", [False, True])
def test_an_infrastructure_failure_does_not_shift_its_siblings_advantages(std: bool) -> None:
    """The issue's case: rewards {1,1,1,0,0,0,0} and one timeout. The siblings get exactly the
    advantages of the seven alone (mean 3/7, not 3/8), the failed episode gets 0."""
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    seven = [S(0, rid, r) for rid, r in enumerate(rewards)]
    _, alone = post_process_rewards(args(std=std), seven)
    _, with_failure = post_process_rewards(args(std=std), [*seven, failed(0, 7)])
    assert with_failure[:7] == alone and with_failure[7] == 0.0
    assert alone[0] == pytest.approx((1 - 3 / 7) / (statistics.stdev(rewards) + 1e-6 if std else 1))


def test_zero_reward_keeps_a_failure_in_the_group_as_a_zero() -> None:
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    samples = [*(S(0, rid, r) for rid, r in enumerate(rewards)), failed(0, 7)]
    _, out = post_process_rewards(args(grpo={"failedEpisodes": "zeroReward"}), samples)
    assert out[0] == pytest.approx(1 - 3 / 8) and out[7] == pytest.approx(-3 / 8)


def test_a_group_with_too_few_task_outcomes_gets_no_advantage_anywhere() -> None:
    group0 = [S(0, 1, 1.0), failed(0, 2), failed(0, 3, "agent_error"), S(0, 4, 0.0)]
    group1 = [S(1, 5, 1.0), failed(1, 6), failed(1, 7), failed(1, 8)]  # one task outcome
    _, out = post_process_rewards(args(grpo={"minValidSamplesPerGroup": 2}), group0 + group1)
    assert out[:4] == [0.5, 0.0, 0.0, -0.5] and out[4:] == [0.0] * 4
    _, strict = post_process_rewards(
        args(grpo={"minValidSamplesPerGroup": 3, "samplesPerPrompt": 4}), group0
    )
    assert strict == [0.0] * 4
