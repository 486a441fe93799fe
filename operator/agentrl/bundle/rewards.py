"""Episode-level GRPO reward normalisation: slime's `--custom-reward-post-process-path`.

slime's built-in normaliser reshapes the flat reward list by position into rows of
`n_samples_per_prompt`, which is wrong as soon as one episode yields several samples (an
agent whose trace breaks into segments). Here samples are grouped by `group_index` (the
prompt), then by episode, and every episode counts once in its group's mean and std, however
many segments it produced. The rules and where the knobs come from: docs/traces.md.

An episode that ended in an infrastructure failure (its sample names the reason,
`failures.SAMPLE_KEY`) carries a stand-in reward of 0, not a judgement of the policy. Under
`spec.grpo.failedEpisodes: exclude` (the default) it is left out of its group's mean and
std and gets advantage 0, and a group left with fewer than `minValidSamplesPerGroup` task
outcomes gets advantage 0 everywhere (the rollout has already replaced such groups where
dynamic sampling could); `zeroReward` counts it as a 0 like any other (docs/rollout.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.failures import sample_failure

Mode = Literal["grpo", "identity"]
# slime divides by (std + 1e-6); the same epsilon keeps advantages comparable with it.
STD_EPSILON = 1e-6
PADDING_GROUP = -1  # slime's no-op padding samples (up to a multiple of dp size)


@dataclass(frozen=True)
class Settings:
    """What the post-process reads from the spec (`spec.grpo`)."""

    mode: Mode = "grpo"
    std: bool = False
    exclude_failed: bool = True  # failedEpisodes: exclude
    min_valid: int = 1  # minValidSamplesPerGroup where it applies


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """`(raw_rewards, rewards)`, flat lists aligned with `samples` (nested lists flattened)."""
    flat = list(_flatten(samples))
    raw = [reward_value(args, s) for s in flat]
    settings = spec_settings(args)
    if settings.mode == "identity":
        return raw, list(raw)
    return raw, normalize_episodes(
        flat,
        raw,
        std=settings.std,
        exclude_failed=settings.exclude_failed,
        min_valid=settings.min_valid,
    )


def normalize_episodes(
    samples: Sequence[Any],
    raw: Sequence[float],
    *,
    std: bool,
    exclude_failed: bool = False,
    min_valid: int = 1,
) -> list[float]:
    """Mean-centre (and optionally scale) episode rewards within each group, per sample.

    With `exclude_failed`, episodes whose samples name an infrastructure failure count in no
    statistic and get 0; a group with fewer than `min_valid` counted episodes gets 0."""
    out = list(raw)
    for members in _episodes_by_group(samples, raw).values():
        counted = [
            (reward, positions)
            for reward, positions, failed in members.values()
            if not (exclude_failed and failed)
        ]
        if exclude_failed:
            for _, positions, failed in members.values():
                for i in positions if failed else ():
                    out[i] = 0.0
        if len(counted) < max(1, min_valid):
            for _, positions, _ in members.values():
                for i in positions:
                    out[i] = 0.0
            continue
        values = [reward for reward, _ in counted]
        mean = math.fsum(values) / len(values)
        scale = 1.0
        if std and len(values) > 1:
            # Sample std (n - 1), as torch.std in slime's own normaliser.
            var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
            scale = 1.0 / (math.sqrt(var) + STD_EPSILON)
        for reward, positions in counted:
            advantage = (reward - mean) * scale
            for i in positions:
                out[i] = advantage
    return out


Episode = tuple[float, list[int], bool]  # (reward, sample positions, infrastructure failure)


def _episodes_by_group(
    samples: Sequence[Any], raw: Sequence[float]
) -> dict[int, dict[object, Episode]]:
    """group_index -> episode key -> (episode reward, sample positions, failed); padding
    left out."""
    groups: dict[int, dict[object, Episode]] = {}
    for i, (sample, reward) in enumerate(zip(samples, raw, strict=True)):
        group = getattr(sample, "group_index", None)
        if group is None:
            raise ValueError(
                f"sample {i} has no group_index: the rollout must set it to the prompt's group "
                f"({PADDING_GROUP} for padding)"
            )
        if group == PADDING_GROUP:
            continue
        episodes = groups.setdefault(int(group), {})
        key = episode_key(sample, i)
        if key in episodes:
            first, positions, failed = episodes[key]
            if reward != first:
                raise ValueError(
                    f"sample {i}: episode {key!r} of group {group} carries rewards {first} and "
                    f"{reward}; every sample of an episode must carry the episode's reward"
                )
            positions.append(i)
            episodes[key] = (first, positions, failed or sample_failure(sample) is not None)
        else:
            episodes[key] = (reward, [i], sample_failure(sample) is not None)
    return groups


def episode_key(sample: Any, position: int) -> object:
    """Which episode a sample belongs to: its `rollout_id`, else its gateway session id.

    slime's contract makes every sample of one episode share `rollout_id`; samples built
    without one fall back to `session_id` (the Sample field), then `metadata`'s
    `gateway_session_id` / `session_id`; a sample with none of them is its own episode.
    """
    rollout_id = getattr(sample, "rollout_id", None)
    if rollout_id is not None:
        return ("rollout", rollout_id)
    sid = getattr(sample, "session_id", None)
    metadata = getattr(sample, "metadata", None)
    if sid is None and isinstance(metadata, Mapping):
        sid = metadata.get("gateway_session_id") or metadata.get("session_id")
    return ("session", sid) if sid is not None else ("sample", position)


def reward_value(args: Any, sample: Any) -> float:
    """slime's `Sample.get_reward_value`: the float, or `reward[args.reward_key]`."""
    reward = getattr(sample, "reward", None)
    if reward is None and getattr(sample, "group_index", None) == PADDING_GROUP:
        return 0.0  # a padding sample carries no reward; it never enters a group
    key = getattr(args, "reward_key", None)
    if isinstance(reward, Mapping):
        if not key:
            raise ValueError(
                f"sample {getattr(sample, 'index', '?')}: reward is a dict "
                f"({sorted(reward)}); set slime's --reward-key to the entry to train on"
            )
        reward = reward.get(key)
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise TypeError(
            f"sample {getattr(sample, 'index', '?')} (group {getattr(sample, 'group_index', '?')})"
            f": reward must be a number, got {reward!r}"
        )
    if not math.isfinite(reward):
        raise ValueError(f"sample {getattr(sample, 'index', '?')}: reward is {reward}")
    return float(reward)


def normalization_settings(args: Any) -> tuple[Mode, bool]:
    """(mode, divide by std) of `spec.grpo.rewardNormalization` (see `spec_settings`)."""
    settings = spec_settings(args)
    return settings.mode, settings.std


def spec_settings(args: Any) -> Settings:
    """`spec.grpo`'s normalisation and failed-episode settings, read from the runtime config
    the launcher names in slime's custom config (`args.agentrl_config_path`). The spec is the
    only source: slime's own normalisation flags never reach this function (slime skips its
    normaliser when a post-process is set), and validation refuses them."""
    path = getattr(args, "agentrl_config_path", None)
    if not path:
        raise ValueError(
            "slime's args carry no agentrl_config_path, so the reward normalisation of "
            "spec.grpo.rewardNormalization is unknown; agentrl's launcher writes it into "
            "--custom-config-path: start training with `python -m agentrl.bundle.launch`"
        )
    return _spec_settings(str(path))


@functools.lru_cache(maxsize=4)
def _spec_settings(path: str) -> Settings:
    # Read once per process: slime calls the post-process every step with the same args.
    grpo = RuntimeConfig.load(path).spec.grpo
    norm = grpo.reward_normalization
    exclude = grpo.failed_episodes == "exclude"
    return Settings(
        norm.mode, norm.std, exclude, grpo.effective_min_valid_samples if exclude else 1
    )


def _flatten(samples: Iterable[Any]) -> Iterable[Any]:
    for s in samples:
        if isinstance(s, list | tuple):
            yield from _flatten(s)
        else:
            yield s
