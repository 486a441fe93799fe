"""Turns recorded by the gateway, and their merge into training sequences.

The gateway records every model call of an episode as a `Turn` holding the exact token ids
the engine saw and sampled; `merge_turns` folds an episode's turns into `Segment`s, the
sequences slime trains on. The contract (names and fields) is fixed by DESIGN §5; the
rules are in docs/traces.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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


# Why a turn started a new segment instead of extending one (label of trace_breaks_total).
IDENTICAL_PROMPT = "identical_prompt"  # retry, n>1 sibling, parallel call on one state
REWOUND = "rewound"  # prompt is a strict prefix of an open segment: back to an earlier state
EDITED_COMPLETION = "edited_completion"  # extends a last prompt, not its sampled completion
DIVERGED_PREFIX = "diverged_prefix"  # a new conversation (sub-agent) or context surgery
BREAK_REASONS = (IDENTICAL_PROMPT, REWOUND, EDITED_COMPLETION, DIVERGED_PREFIX)


@dataclass
class MergeStats:
    """What a merge did besides producing segments; the rollout turns it into metrics."""

    turns: int = 0
    segments: int = 0
    breaks: Counter[str] = field(default_factory=Counter)  # reason -> new segments
    masked_turns: int = 0  # logprobs missing or misaligned: completion kept with mask 0
    masked_tokens: int = 0
    clipped_segments: int = 0  # response tail cut to the budget
    clipped_tokens: int = 0
    dropped_over_budget: int = 0  # the prompt alone leaves no room for a response token
    dropped_empty: int = 0  # nothing sampled at all (every completion empty)


def _as_list(ids: Sequence[int]) -> list[int]:
    """Plain `list[int]` (list compare is the fast exact check; numpy scalars never leak)."""
    if type(ids) is list:
        return ids
    tolist: Any = getattr(ids, "tolist", None)
    return list(tolist()) if tolist is not None else list(ids)


class _Chain:
    """An open segment: its first prompt, the response built so far, and its tip."""

    __slots__ = (
        "logprobs",
        "mask",
        "prompt",
        "sampled",
        "tip_completion",
        "tip_prompt",
        "tokens",
        "turns",
    )  # fmt: skip

    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.tip_prompt = prompt
        self.tip_completion: list[int] = []
        self.turns: list[Turn] = []
        self.sampled = 0  # completion tokens, trainable or not

    @property
    def full_len(self) -> int:
        return len(self.tip_prompt) + len(self.tip_completion)

    def append(
        self, turn: Turn, prompt: list[int], completion: list[int], stats: MergeStats
    ) -> None:
        """Bridge (observed, mask 0) then the sampled completion (mask 1 iff logprobs align)."""
        bridge = prompt[self.full_len :] if self.turns else []
        n = len(completion)
        self.sampled += n
        self.tokens += bridge
        self.tokens += completion
        self.mask += [0] * len(bridge)
        self.logprobs += [0.0] * len(bridge)
        lps = turn.logprobs
        if lps is not None and len(lps) == n:
            self.mask += [1] * n
            self.logprobs.extend(map(float, lps))
        elif n:
            # Never train on invented logprobs: TIS/off-policy correction would be biased.
            stats.masked_turns += 1
            stats.masked_tokens += n
            self.mask += [0] * n
            self.logprobs += [0.0] * n
        self.tip_prompt = prompt
        self.tip_completion = completion
        self.turns.append(turn)

    def segment(self, max_response: int | None, stats: MergeStats) -> Segment | None:
        """The training sequence, response clipped to `max_response` (None: unbounded)."""
        if not self.sampled:
            # Nothing to learn from; and slime slices the response as
            # tokens[-response_length:], where a length of 0 would be the whole sequence.
            stats.dropped_empty += 1
            return None
        tokens, mask, lps = self.tokens, self.mask, self.logprobs
        truncated = self.turns[-1].finish_reason == "length"
        if max_response is not None and len(tokens) > max_response:
            if max_response <= 0:
                stats.dropped_over_budget += 1
                return None
            stats.clipped_segments += 1
            stats.clipped_tokens += len(tokens) - max_response
            tokens, mask, lps = tokens[:max_response], mask[:max_response], lps[:max_response]
            truncated = True
        return Segment(
            tokens=[*self.prompt, *tokens],
            response_length=len(tokens),
            loss_mask=list(mask),
            logprobs=list(lps),
            num_turns=len(self.turns),
            truncated=truncated,
        )


def _extends(chain: _Chain, prompt: list[int]) -> bool:
    """`prompt` starts with the chain's tip prompt + completion and is longer than the tip."""
    tp, tc = chain.tip_prompt, chain.tip_completion
    k, n = len(tp), len(tp) + len(tc)
    return len(prompt) > k and len(prompt) >= n and prompt[:k] == tp and prompt[k:n] == tc


def _break_reason(chains: Sequence[_Chain], prompt: list[int]) -> str:
    reason = DIVERGED_PREFIX
    for c in chains:
        tp, k = c.tip_prompt, len(c.tip_prompt)
        if prompt == tp:
            return IDENTICAL_PROMPT
        head = prompt[:k]
        if len(prompt) > k and head == tp:
            reason = EDITED_COMPLETION
        elif reason == DIVERGED_PREFIX and len(prompt) < c.full_len:
            full_head = (c.prompt + c.tokens)[: len(prompt)]
            if full_head == prompt:
                reason = REWOUND
    return reason


def merge_turns_with_stats(
    turns: Sequence[Turn],
    max_response_len: int | None = None,
    max_context_len: int | None = None,
) -> tuple[list[Segment], MergeStats]:
    """`merge_turns`, plus what it counted; `max_context_len` also bounds prompt + response."""
    for name, value in (
        ("max_response_len", max_response_len),
        ("max_context_len", max_context_len),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be a positive token count or None, got {value}")
    stats = MergeStats(turns=len(turns))
    chains: list[_Chain] = []
    for turn in turns:
        prompt = _as_list(turn.prompt_ids)
        completion = _as_list(turn.completion_ids)
        best: _Chain | None = None
        for c in chains:
            if (best is None or c.full_len >= best.full_len) and _extends(c, prompt):
                best = c
        if best is None:
            if chains:
                stats.breaks[_break_reason(chains, prompt)] += 1
            best = _Chain(prompt)
            chains.append(best)
        best.append(turn, prompt, completion, stats)
    segments = []
    for c in chains:
        seg = c.segment(_response_budget(len(c.prompt), max_response_len, max_context_len), stats)
        if seg is not None:
            segments.append(seg)
    stats.segments = len(segments)
    return segments, stats


def _response_budget(
    prompt_len: int, max_response: int | None, max_context: int | None
) -> int | None:
    if max_context is None:
        return max_response
    room = max_context - prompt_len
    return room if max_response is None else min(room, max_response)


def merge_turns(turns: Sequence[Turn], max_response_len: int | None = None) -> list[Segment]:
    """Fold an episode's turns into training sequences (DESIGN §5; see docs/traces.md)."""
    return merge_turns_with_stats(turns, max_response_len)[0]
