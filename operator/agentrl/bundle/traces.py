"""Turns recorded by the gateway, and their merge into training sequences.

The gateway records every model call of an episode as a `Turn` holding the exact token ids
the engine saw and sampled; `merge_turns` folds an episode's turns into `Segment`s, the
sequences slime trains on. The contract (names and fields) is fixed by DESIGN §5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    """One model call inside an episode, as the gateway recorded it."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    logprobs: Sequence[float] | None  # one per completion token, None if the engine gave none
    finish_reason: str  # "stop", "length", "abort", ...


@dataclass
class Segment:
    """One training sequence."""

    tokens: list[int]  # prompt + response
    response_length: int
    loss_mask: list[int]  # len == response_length
    logprobs: list[float]  # len == response_length; 0.0 where loss_mask is 0
    num_turns: int
    truncated: bool
