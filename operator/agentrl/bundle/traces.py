"""Turns recorded by the gateway, and their merge into training sequences.

The gateway records every model call of an episode as a `Turn` holding the exact token ids
the engine saw and sampled; `merge_turns` folds an episode's turns into `Segment`s, the
sequences slime trains on. The contract (names, fields and rules) is docs/traces.md.

A model call the gateway refused because its prompt alone filled the model's context is in
the trace too, as a `Turn` with finish reason `CONTEXT_FULL`, no completion, and as prompt ids
the conversation it continued (the prompt + completion of that turn; none for a new one): it
adds no token, and that conversation's segment ends truncated (unless a later call extends it).

Nothing that cannot be a sampled token is trained on: a turn whose logprobs are missing,
misaligned, non-finite, positive or not numbers (booleans included) is kept with mask 0 and
counted; ids that are not non-negative integers (floats, booleans) make the whole trace
invalid (`InvalidTrace`): there is no sequence to put them in.

A turn the engine aborted (finish reason `ABORT`) is kept with mask 0 and counted (`ABORTED`):
the gateway answered its call 503, so the agent never saw that completion.

Each turn keeps the weight version the engine reported with it (SGLang's
`meta_info.weight_version`, which slime sets at every weight update), and each segment the
versions of its turns (slime's `Sample.weight_versions`). slime updates the engines only
between rollout steps, so one episode's turns share one version; a turn whose version is not
the one the episode's last completed (not aborted) turn reported was sampled by other weights
than that turn (the weights changed mid-episode, or the router spread the episode over
engines holding different weights): kept with mask 0 and counted (`WEIGHT_CHANGED`), as
slime's `--mask-offpolicy-in-partial-rollout` masks what an older version sampled.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentrl.api import constants
from agentrl.bundle.trace_index import Match, PrefixIndex


@dataclass(frozen=True)
class Turn:
    """One model call inside an episode, as the gateway recorded it."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    logprobs: Sequence[float] | None  # one per completion token, None if the engine gave none
    finish_reason: str  # "stop", "length", "abort", ..., CONTEXT_FULL (refused, nothing sampled)
    # The policy that sampled it: the rollout step whose weights the engines held (slime
    # updates them only between steps); stamped by the rollout, None where unknown.
    policy_version: int | None = None
    # The engine's `meta_info.weight_version` with the completion (None: not reported).
    weight_version: str | None = None


@dataclass
class Segment:
    """One training sequence."""

    tokens: list[int]  # prompt + response
    response_length: int
    loss_mask: list[int]  # len == response_length
    logprobs: list[float]  # len == response_length; 0.0 where loss_mask is 0
    num_turns: int
    truncated: bool
    policy_version: int | None = None  # the oldest policy among its turns; None if unknown
    # The engine's weight version of each of its turns that reported one, in order (slime's
    # `Sample.weight_versions`: one per generate call).
    weight_versions: list[str] = field(default_factory=list)


# The finish reason of a call the gateway refused because its prompt filled the model's
# context (answered `length` with nothing sampled, as slime's agent adapter does): its turn
# adds no token; its prompt ids are the conversation it continued, whose segment it truncates.
CONTEXT_FULL = "context_full"

# The finish reason of a generation the engine aborted (by request id, `abort_all`): the
# gateway keeps the partial turn and answers 503, so the agent retries.
ABORT = "abort"


def reached_agent(turn: Turn) -> bool:
    """Whether the agent got a completion from this call: not one whose prompt filled the
    context (nothing sampled) nor one the engine aborted (answered 503)."""
    return turn.finish_reason not in (CONTEXT_FULL, ABORT)


# Why a turn started a new segment instead of extending one (label of trace_breaks_total;
# the labels' home is agentrl.api.constants, which the metrics pre-create from).
# retry, n>1 sibling, parallel call on one state
IDENTICAL_PROMPT = constants.BREAK_IDENTICAL_PROMPT
# prompt is a strict prefix of an open segment: back to an earlier state
REWOUND = constants.BREAK_REWOUND
# extends a last prompt, not its sampled completion
EDITED_COMPLETION = constants.BREAK_EDITED_COMPLETION
# a new conversation (sub-agent) or context surgery
DIVERGED_PREFIX = constants.BREAK_DIVERGED_PREFIX
BREAK_REASONS = constants.MERGE_BREAK_REASONS


# Why a turn's completion was kept but not trained (MergeStats.mask_reasons).
NO_LOGPROBS = "no_logprobs"  # the engine returned none
MISALIGNED = "misaligned"  # not one logprob per completion token
NOT_A_NUMBER = "not_a_number"  # a None, a boolean, a string... where a logprob belongs
NON_FINITE = "non_finite"  # NaN or an infinity (SGLang's JSON null reads as NaN)
POSITIVE = "positive"  # a log-probability above 0: the probability would exceed 1
# sampled under another weight version than the episode's last completed turn's
WEIGHT_CHANGED = "weight_changed"
# the engine aborted the generation (finish reason "abort"): the gateway answered 503, so the
# agent never saw this completion and the episode's reward owes nothing to it
ABORTED = "aborted"
MASK_REASONS = (
    NO_LOGPROBS,
    MISALIGNED,
    NOT_A_NUMBER,
    NON_FINITE,
    POSITIVE,
    WEIGHT_CHANGED,
    ABORTED,
)


class InvalidTrace(ValueError):
    """A turn holds something that cannot be a token id (a float, a boolean, a negative
    number such as a -100 "ignore" label): the episode's trace is refused as a whole."""


@dataclass
class MergeStats:
    """What a merge did besides producing segments; the rollout turns it into metrics."""

    turns: int = 0
    segments: int = 0
    breaks: Counter[str] = field(default_factory=Counter)  # reason -> new segments
    masked_turns: int = 0  # logprobs unusable (see MASK_REASONS): kept with mask 0
    masked_tokens: int = 0
    mask_reasons: Counter[str] = field(default_factory=Counter)  # reason -> masked turns
    clipped_segments: int = 0  # response tail cut to the budget
    clipped_tokens: int = 0
    dropped_over_budget: int = 0  # the prompt alone leaves no room for a response token
    dropped_empty: int = 0  # nothing sampled at all (every completion empty)
    context_full: int = 0  # calls refused for a full context (CONTEXT_FULL turns)


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

    __slots__ = (
        "finish",
        "full_len",
        "prompt_len",
        "sampled",
        "spans",
        "versions",
        "weight_versions",
    )

    def __init__(self, prompt: list[int]) -> None:
        self.prompt_len = len(prompt)
        self.full_len = len(prompt)  # tip prompt + tip completion
        # (bridge tokens, completion tokens, their logprobs or None when masked)
        self.spans: list[tuple[int, int, list[float] | None]] = []
        self.sampled = 0  # completion tokens, trainable or not
        self.finish = ""
        self.versions: set[int | None] = set()  # policy versions of its turns
        self.weight_versions: list[str] = []  # engine weight versions, one per turn reported

    def append(
        self,
        turn: Turn,
        prompt: list[int],
        completion: list[int],
        stats: MergeStats,
        weights: str | None = None,
    ) -> None:
        """Bridge (observed, mask 0) then the sampled completion (mask 1 iff the engine did not
        abort it, its logprobs align and its weight version, if reported, is `weights`: the
        episode's last one)."""
        bridge = len(prompt) - self.full_len if self.spans else 0
        n = len(completion)
        lps: list[float] | None = None
        if n:
            if turn.finish_reason == ABORT:
                # The agent was answered 503 and never saw these tokens: the reward cannot
                # credit them. slime never trains an aborted sample either (only
                # --partial-rollout continues one, and it is the continued sample that trains).
                why: str | None = ABORTED
            else:
                lps, why = _logprobs(turn.logprobs, n)
                stale = (
                    None not in (turn.weight_version, weights) and turn.weight_version != weights
                )
                if why is None and stale:
                    lps, why = None, WEIGHT_CHANGED
            if why is not None:
                # Never train on invented logprobs: TIS/off-policy correction would be biased.
                stats.masked_turns += 1
                stats.masked_tokens += n
                stats.mask_reasons[why] += 1
        self.spans.append((bridge, n, lps))
        self.sampled += n
        self.full_len = len(prompt) + n
        self.finish = turn.finish_reason
        self.versions.add(turn.policy_version)
        if turn.weight_version is not None:
            self.weight_versions.append(turn.weight_version)

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
        version = None if None in self.versions else min(v for v in self.versions if v is not None)
        return Segment(
            tokens,
            length,
            mask,
            logprobs,
            len(self.spans),
            truncated,
            version,
            list(self.weight_versions),
        )

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
                logprobs[pos:end] = lps[: end - pos]
            pos += n
        return mask, logprobs


def _logprobs(given: Sequence[float] | None, n: int) -> tuple[list[float] | None, str | None]:
    """The completion's logprobs as a plain list of floats, or None and why they are unusable:
    one finite number <= 0 per completion token (a None, NaN, inf, positive value or boolean
    anywhere poisons TIS)."""
    if given is None:
        return None, NO_LOGPROBS
    if not hasattr(given, "__len__"):  # a generator: one pass, no length, not a sequence
        return None, NOT_A_NUMBER
    if len(given) != n:
        return None, MISALIGNED
    if type(given) is list:
        values: list[Any] = given
    else:  # numpy gives Python scalars (its booleans stay booleans), array/tuple as they are
        tolist: Any = getattr(given, "tolist", None)
        values = list(tolist()) if tolist is not None else list(given)
    kinds = set(map(type, values))  # C-speed; `bool` is its own type here, never `int`
    if not kinds <= {float, int}:
        return None, NOT_A_NUMBER
    # NaN and inf propagate through a sum; a sum of finite values that overflows
    # ([-1e308, -1e308]) is told apart by checking each value, only then.
    if not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
        return None, NON_FINITE
    if max(values) > 0:
        return None, POSITIVE
    if kinds != {float}:
        values = [float(v) for v in values]
    return values, None  # `_layout` copies what it uses: the caller's list is never aliased


INT64_MAX = 2**63 - 1  # torch.long, which slime's token tensors are
_DIGITS = b"0123456789,[]"


def _check_ids(ids: list[Any], turn: int, what: str, offset: int = 0) -> None:
    """Refuse anything in `ids` that is not a token id (a plain non-negative int64).

    One C-level pass: serialised by orjson, a list of such ints is digits and commas only;
    a boolean reads `true`/`false`, a float has a `.` or an `e`, a negative number a `-`,
    None and NaN read `null`, and other types (or ints past 64 bits) do not serialise.
    That is ~4x cheaper than checking each element's type in Python; the loop below runs
    only to name the culprit."""
    if not ids:
        return
    try:
        if not orjson.dumps(ids).translate(None, _DIGITS):
            return
    except TypeError:
        pass
    j, t = next(
        ((j, t) for j, t in enumerate(ids) if type(t) is not int or not 0 <= t <= INT64_MAX),
        (0, ids[0]),  # not reached: only non-ints and out-of-range ints fail above
    )
    raise InvalidTrace(
        f"turn {turn}: {what}[{offset + j}] = {t!r} is not a token id (a non-negative "
        "integer); the gateway records only the ids the engine saw and sampled, so this "
        "trace did not come from it unaltered"
    )


def _budget(name: str, value: Any) -> int | None:
    """A token budget: None, or a positive integer (never a float, NaN or boolean)."""
    if value is None:
        return None
    if isinstance(value, bool | float):
        raise ValueError(
            f"{name} must be a positive token count (an integer) or None, got {value!r}"
        )
    try:
        count = operator.index(value)  # int and numpy integers; refuses str, Decimal, ...
    except TypeError:
        raise ValueError(
            f"{name} must be a positive token count (an integer) or None, got {value!r}"
        ) from None
    if count < 1:
        raise ValueError(f"{name} must be a positive token count or None, got {value!r}")
    return count


def merge_turns_with_stats(
    turns: Sequence[Turn],
    max_response_len: int | None = None,
    max_context_len: int | None = None,
) -> tuple[list[Segment], MergeStats]:
    """`merge_turns`, plus what it counted; `max_context_len` also bounds prompt + response.
    Raises `InvalidTrace` if a token id is not a non-negative integer, ValueError for a
    budget that is not a positive integer."""
    max_response_len = _budget("max_response_len", max_response_len)
    max_context_len = _budget("max_context_len", max_context_len)
    stats = MergeStats(turns=len(turns))
    chains: list[_Chain] = []
    index = PrefixIndex()
    # The weights of the episode's last sampled turn that reported a version: any other
    # version is older (slime only ever moves the engines forward) or another engine's. An
    # aborted turn is not that reference: the agent never saw its completion, so its version
    # says nothing of the weights the episode's reward was earned with (taken as the
    # reference, it would mask every turn the agent did see).
    weights = next(
        (
            t.weight_version
            for t in reversed(turns)
            if reached_agent(t) and isinstance(t.weight_version, str)
        ),
        None,
    )
    for i, turn in enumerate(turns):
        if turn.finish_reason == CONTEXT_FULL:
            # Nothing was sampled and its prompt never reached the engine: no token. The
            # conversation it continued (its ids: that conversation so far) was cut by the
            # context, as a completion cut at its token limit is: that segment ends
            # truncated. Only an exact tip: a conversation that went on since is not it.
            stats.context_full += 1
            cut = _as_list(turn.prompt_ids)
            if cut:
                at = index.lookup(cut).chain
                if at >= 0 and chains[at].full_len == len(cut):
                    chains[at].finish = "length"
            continue
        prompt = _as_list(turn.prompt_ids)
        completion = _as_list(turn.completion_ids)
        match = index.lookup(prompt)
        # Only tokens new to the index are checked (linear in the output, not in the
        # prompts): the rest compared equal to checked ids, and every output sequence is
        # spelled from the index's own (checked) lists, never from a later prompt.
        _check_ids(prompt[match.pos :] if match.pos else prompt, i, "prompt_ids", match.pos)
        _check_ids(completion, i, "completion_ids")
        if match.chain >= 0:
            chain = match.chain
        else:
            if chains:
                stats.breaks[_break_reason(match)] += 1
            chain = len(chains)
            chains.append(_Chain(prompt))
        chains[chain].append(turn, prompt, completion, stats, weights)
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
    """Fold an episode's turns into training sequences (the rules: docs/traces.md)."""
    return merge_turns_with_stats(turns, max_response_len)[0]
