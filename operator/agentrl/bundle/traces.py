"""Turns recorded by the gateway, and their merge into training sequences.

The gateway records every model call of an episode as a `Turn` holding the exact token ids
the engine saw and sampled; `merge_turns` folds an episode's turns into `Segment`s, the
sequences slime trains on. The contract (names and fields) is fixed by DESIGN §5; the
rules are in docs/traces.md.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.bundle.trace_index import Match, PrefixIndex


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
    masked_turns: int = 0  # logprobs missing, misaligned or non-finite: kept with mask 0
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
    """An open segment: its first prompt's length, its full length, one span per turn.

    Every prompt of a chain starts with the previous prompt + completion, so the whole
    sequence is always tip prompt + tip completion (the index spells it): nothing is
    accumulated per turn (the hot path stays O(1) here); mask and logprobs are laid out
    once, in `segment`.
    """

    __slots__ = ("finish", "full_len", "prompt_len", "sampled", "spans")

    def __init__(self, prompt: list[int]) -> None:
        self.prompt_len = len(prompt)
        self.full_len = len(prompt)  # tip prompt + tip completion
        # (bridge tokens, completion tokens, their logprobs or None when masked)
        self.spans: list[tuple[int, int, Sequence[float] | None]] = []
        self.sampled = 0  # completion tokens, trainable or not
        self.finish = ""

    def append(
        self, turn: Turn, prompt: list[int], completion: list[int], stats: MergeStats
    ) -> None:
        """Bridge (observed, mask 0) then the sampled completion (mask 1 iff logprobs align)."""
        bridge = len(prompt) - self.full_len if self.spans else 0
        n = len(completion)
        lps = turn.logprobs
        if n and not _usable(lps, n):
            # Never train on invented logprobs: TIS/off-policy correction would be biased.
            stats.masked_turns += 1
            stats.masked_tokens += n
            lps = None
        self.spans.append((bridge, n, lps))
        self.sampled += n
        self.full_len = len(prompt) + n
        self.finish = turn.finish_reason

    def segment(
        self, tokens: list[int], max_response: int | None, stats: MergeStats
    ) -> Segment | None:
        """The training sequence from `tokens` (a fresh copy of tip prompt + completion),
        response clipped to `max_response` (None: unbounded)."""
        if not self.sampled:
            # Nothing to learn from; and slime slices the response as
            # tokens[-response_length:], where a length of 0 would be the whole sequence.
            stats.dropped_empty += 1
            return None
        length = len(tokens) - self.prompt_len
        truncated = self.finish == "length"
        if max_response is not None and length > max_response:
            if max_response <= 0:
                stats.dropped_over_budget += 1
                return None
            stats.clipped_segments += 1
            stats.clipped_tokens += length - max_response
            length, truncated = max_response, True
            del tokens[self.prompt_len + length :]
        mask, logprobs = self._layout(length)
        return Segment(tokens, length, mask, logprobs, len(self.spans), truncated)

    def _layout(self, length: int) -> tuple[list[int], list[float]]:
        """loss_mask and logprobs of the first `length` response tokens: all 0 / 0.0 (bridges
        and masked turns), then each trainable completion written over its slots."""
        mask = [0] * length
        logprobs = [0.0] * length
        pos = 0
        for bridge, n, lps in self.spans:
            pos += bridge
            if pos >= length:
                break
            if lps is not None:
                end = min(pos + n, length)
                mask[pos:end] = [1] * (end - pos)
                # JSON gives lists of floats already; anything else (numpy...) is converted.
                logprobs[pos:end] = (
                    lps[: end - pos] if type(lps) is list else map(float, lps[: end - pos])
                )
            pos += n
        return mask, logprobs


def _usable(logprobs: Sequence[float] | None, n: int) -> bool:
    """One finite number per completion token (a None, NaN or inf anywhere poisons TIS)."""
    if logprobs is None or len(logprobs) != n:
        return False
    try:
        return math.isfinite(sum(logprobs))  # C-speed; NaN and inf propagate through a sum
    except TypeError:  # a None or a non-number inside
        return False


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
    index = PrefixIndex()
    for turn in turns:
        prompt = _as_list(turn.prompt_ids)
        completion = _as_list(turn.completion_ids)
        match = index.lookup(prompt)
        if match.chain >= 0:
            chain = match.chain
        else:
            if chains:
                stats.breaks[_break_reason(match)] += 1
            chain = len(chains)
            chains.append(_Chain(prompt))
        chains[chain].append(turn, prompt, completion, stats)
        index.record(chain, prompt, completion, match)
    sequences = [index.sequence(i) if c.sampled else [] for i, c in enumerate(chains)]
    index.close()
    segments = []
    for c, tokens in zip(chains, sequences, strict=True):
        budget = _response_budget(c.prompt_len, max_response_len, max_context_len)
        seg = c.segment(tokens, budget, stats)
        if seg is not None:
            segments.append(seg)
    stats.segments = len(segments)
    return segments, stats


def _break_reason(match: Match) -> str:
    if match.consumed:
        at_tip = match.child is None and bool(match.node.tips) and match.node.depth == match.pos
        return IDENTICAL_PROMPT if at_tip else REWOUND
    return EDITED_COMPLETION if match.passed_tip else DIVERGED_PREFIX


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
