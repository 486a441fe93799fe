"""Dynamic-sampling filters: which finished groups carry a GRPO signal.

`spec.grpo.dynamicSamplingFilter` names either the built-in `zeroRewardVariance` (DAPO's
dynamic sampling: a group whose episodes all scored the same has zero advantage everywhere)
or a user function with the signature of slime's `--dynamic-sampling-filter-path`,
`fn(args, samples, **kwargs)`, returning a bool or an object with `keep` (and optionally
`reason` and `keep_when_insufficient`), as slime's `DynamicFilterOutput` at both pinned
commits:
https://github.com/THUDM/slime/blob/fa3c990af/slime/rollout/filter_hub/base_types.py
https://github.com/THUDM/slime/blob/624b824a8/slime/rollout/filter_hub/base_types.py
`samples` is the group's flat list of slime `Sample`s (every sequence of every episode; an
episode that broke into several sequences appears with each, all carrying its reward).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentrl.api.models import ZERO_REWARD_VARIANCE

# slime keeps a group when the std of its rewards exceeds this (torch.std, n - 1).
STD_THRESHOLD = 1e-6


@dataclass(frozen=True)
class Verdict:
    keep: bool
    reason: str | None = None  # why it was dropped (logged, counted by slime as drop_<reason>)
    keep_when_insufficient: bool = False  # keep it rather than start a replacement


KEEP = Verdict(keep=True)


class GroupFilter(Protocol):
    """Decides on one finished group: its episode rewards and, lazily, its slime Samples."""

    name: str

    def __call__(self, rewards: Sequence[float], samples: Callable[[], list[Any]]) -> Verdict: ...


def reward_std(rewards: Sequence[float]) -> float | None:
    """The sample std (n - 1) of a group's rewards, as torch.std; None for fewer than two."""
    if len(rewards) < 2:
        return None
    mean = math.fsum(rewards) / len(rewards)
    return math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))


def has_reward_variance(rewards: Sequence[float]) -> bool:
    """slime's test: the sample std (n - 1) of the rewards exceeds 1e-6."""
    std = reward_std(rewards)
    return std is not None and std > STD_THRESHOLD  # torch.std of one value is NaN: False


class ZeroRewardVariance:
    name = ZERO_REWARD_VARIANCE

    def __call__(self, rewards: Sequence[float], samples: Callable[[], list[Any]]) -> Verdict:
        if has_reward_variance(rewards):
            return KEEP
        # slime's reason string, so logs read the same as with its own filter.
        return Verdict(keep=False, reason=f"zero_std_{round(rewards[0], 1) if rewards else 0}")


class UserFilter:
    """A `--dynamic-sampling-filter-path` function, called as slime calls it."""

    def __init__(self, name: str, fn: Callable[..., Any], args: Any) -> None:
        self.name = name
        self._fn = fn
        self._args = args

    def __call__(self, rewards: Sequence[float], samples: Callable[[], list[Any]]) -> Verdict:
        try:
            out = self._fn(self._args, samples())
        except Exception as exc:
            raise FilterError(
                f"spec.grpo.dynamicSamplingFilter: {self.name} raised "
                f"{type(exc).__name__}: {str(exc)[:300]}"
            ) from exc
        if hasattr(out, "keep"):
            reason = getattr(out, "reason", None)
            return Verdict(
                keep=bool(out.keep),
                reason=None if reason is None else str(reason),
                keep_when_insufficient=bool(getattr(out, "keep_when_insufficient", False)),
            )
        return Verdict(keep=bool(out))  # slime's legacy form: a bare bool


class FilterError(RuntimeError):
    """The user's filter could not be loaded or failed on a group."""


def load_filter(spec_value: str | None, args: Any) -> GroupFilter | None:
    """The filter `spec.grpo.dynamicSamplingFilter` names; import errors name the field."""
    if spec_value is None:
        return None
    if spec_value == ZERO_REWARD_VARIANCE:
        return ZeroRewardVariance()
    module_name, _, attr = spec_value.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise FilterError(
            f"spec.grpo.dynamicSamplingFilter: cannot import {spec_value} "
            f"({type(exc).__name__}: {exc}); ship the module in runtime.extraCode (it is on "
            "PYTHONPATH in every pod) or fix the name"
        ) from exc
    if not callable(fn):
        raise FilterError(f"spec.grpo.dynamicSamplingFilter: {spec_value} is not callable")
    return UserFilter(spec_value, fn, args)
