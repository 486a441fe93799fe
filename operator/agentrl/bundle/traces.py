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

    __slots__ = ("finish", "full_len", "logprobs", "mask", "prompt", "sampled", "tokens", "turns")

    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.full_len = len(prompt)  # tip prompt + tip completion
        self.turns = 0
        self.sampled = 0  # completion tokens, trainable or not
        self.finish = ""

    def append(
        self, turn: Turn, prompt: list[int], completion: list[int], stats: MergeStats
    ) -> None:
        """Bridge (observed, mask 0) then the sampled completion (mask 1 iff logprobs align)."""
        bridge = prompt[self.full_len :]  # empty for the first turn
        n = len(completion)
        self.sampled += n
        self.tokens += bridge
        self.tokens += completion
        self.mask += [0] * len(bridge)
        self.logprobs += [0.0] * len(bridge)
        lps = turn.logprobs
        if lps is not None and len(lps) == n:
            self.mask += [1] * n
            # JSON gives lists of floats already; anything else (numpy, array) is converted.
            self.logprobs += lps if type(lps) is list else map(float, lps)
        elif n:
            # Never train on invented logprobs: TIS/off-policy correction would be biased.
            stats.masked_turns += 1
            stats.masked_tokens += n
            self.mask += [0] * n
            self.logprobs += [0.0] * n
        self.full_len = len(prompt) + n
        self.turns += 1
        self.finish = turn.finish_reason

    def segment(self, max_response: int | None, stats: MergeStats) -> Segment | None:
        """The training sequence, response clipped to `max_response` (None: unbounded)."""
        if not self.sampled:
            # Nothing to learn from; and slime slices the response as
            # tokens[-response_length:], where a length of 0 would be the whole sequence.
            stats.dropped_empty += 1
            return None
        tokens, mask, lps = self.tokens, self.mask, self.logprobs
        truncated = self.finish == "length"
        if max_response is not None and len(tokens) > max_response:
            if max_response <= 0:
                stats.dropped_over_budget += 1
                return None
            stats.clipped_segments += 1
            stats.clipped_tokens += len(tokens) - max_response
            tokens, mask, lps = tokens[:max_response], mask[:max_response], lps[:max_response]
            truncated = True
        # The chain is discarded after this: its lists are handed over, not copied.
        return Segment(
            tokens=self.prompt + tokens,
            response_length=len(tokens),
            loss_mask=mask,
            logprobs=lps,
            num_turns=self.turns,
            truncated=truncated,
        )


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
    segments = []
    for c in chains:
        seg = c.segment(_response_budget(len(c.prompt), max_response_len, max_context_len), stats)
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
