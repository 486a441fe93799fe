"""A corpus of traces that cannot come from an engine: each is masked and counted, or refused.

Logprobs that cannot belong to a sampled token (positive, booleans, non-numbers,
non-finite) keep the completion in the sequence untrained, counted by reason. Ids that
cannot be tokens (floats, booleans, negative numbers) refuse the whole trace, naming the
turn and position. Budgets that are not positive integers are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest

from agentrl.bundle.traces import (
    IDENTICAL_PROMPT,
    MISALIGNED,
    NO_LOGPROBS,
    NON_FINITE,
    NOT_A_NUMBER,
    POSITIVE,
    InvalidTrace,
    Turn,
    merge_turns,
    merge_turns_with_stats,
)

SYS = [1, 2, 3]
GOOD = Turn([*SYS, 10], [11, 12], [-0.5, -0.25], "stop")


def _second(logprobs: Any) -> list[Turn]:
    """A good first turn, then a continuation whose completion carries `logprobs`."""
    return [GOOD, Turn([*SYS, 10, 11, 12, 20], [21, 22], logprobs, "stop")]


# (case, logprobs of the second turn's two tokens, the reason it is masked)
MASKED: list[tuple[str, Any, str]] = [
    ("positive", [-0.5, 0.25], POSITIVE),
    ("tiny positive", [1e-12, -0.5], POSITIVE),
    ("probability not log", [0.9, 0.1], POSITIVE),
    ("true", [True, -0.5], NOT_A_NUMBER),
    ("false (would read as 0.0)", [-0.5, False], NOT_A_NUMBER),
    ("all booleans", [False, False], NOT_A_NUMBER),
    ("numpy booleans", np.array([False, False]), NOT_A_NUMBER),
    ("string", ["-0.5", -0.5], NOT_A_NUMBER),
    ("none inside", [None, -0.5], NOT_A_NUMBER),
    ("nested list", [[-0.5], -0.5], NOT_A_NUMBER),
    ("a generator", (x for x in (-0.5, -0.25)), NOT_A_NUMBER),
    ("a map object", map(float, (-0.5, -0.25)), NOT_A_NUMBER),
    ("nan", [-0.5, math.nan], NON_FINITE),
    ("minus inf", [-math.inf, -0.5], NON_FINITE),
    ("plus inf", [math.inf, -0.5], NON_FINITE),
    ("numpy float nan", np.array([np.nan, -0.5]), NON_FINITE),
    ("missing", None, NO_LOGPROBS),
    ("short", [-0.5], MISALIGNED),
    ("long", [-0.5, -0.5, -0.5], MISALIGNED),
]


@pytest.mark.parametrize(
    ("logprobs", "reason"), [c[1:] for c in MASKED], ids=[c[0] for c in MASKED]
)
def test_unusable_logprobs_keep_the_tokens_untrained_and_counted(
    logprobs: Any, reason: str
) -> None:
    segments, stats = merge_turns_with_stats(_second(logprobs))
    (seg,) = segments
    assert seg.tokens == [*SYS, 10, 11, 12, 20, 21, 22]
    assert seg.loss_mask == [1, 1, 0, 0, 0]  # the bridge and the bad turn: never trained
    assert seg.logprobs == [-0.5, -0.25, 0.0, 0.0, 0.0]
    assert (stats.masked_turns, stats.masked_tokens) == (1, 2)
    assert stats.mask_reasons == {reason: 1}


@pytest.mark.parametrize(
    "logprobs",
    [
        [0.0, -0.0],
        [0, -1],
        np.array([-0.5, 0.0], dtype=np.float32),
        (-0.5, -1.5),
        [-1e308, -1e308],  # finite, though their sum overflows to -inf
        [-1.7e308, -0.5],
    ],
    ids=["zeros", "integers", "numpy float32", "tuple", "huge finite", "huge and small"],
)
def test_valid_logprobs_in_any_numeric_form_train_as_floats(logprobs: Any) -> None:
    (seg,), stats = merge_turns_with_stats(_second(logprobs))
    assert seg.loss_mask == [1, 1, 0, 1, 1] and stats.masked_turns == 0
    assert all(type(x) is float for x in seg.logprobs)
    assert seg.logprobs[3:] == [float(x) for x in logprobs]


# (case, turns, the turn and field named in the error)
REFUSED: list[tuple[str, list[Turn], str]] = [
    ("float completion id", [Turn(SYS, [4.0], [-0.5], "stop")], r"turn 0: completion_ids\[0\]"),
    ("fractional id", [Turn(SYS, [4, 4.5], [-0.5] * 2, "stop")], r"completion_ids\[1\] = 4.5"),
    ("boolean completion id", [Turn(SYS, [True], [-0.5], "stop")], r"completion_ids\[0\] = True"),
    ("boolean prompt id", [Turn([1, False, 3], [4], [-0.5], "stop")], r"prompt_ids\[1\] = False"),
    ("float prompt id", [Turn([1.0, 2, 3], [4], [-0.5], "stop")], r"prompt_ids\[0\] = 1.0"),
    (
        "float in a bridge",
        [GOOD, Turn([*SYS, 10, 11, 12, 20.5], [21], [-0.5], "stop")],
        r"turn 1: prompt_ids\[6\] = 20.5",
    ),
    (
        "ignore-index label",
        [GOOD, Turn([*SYS, 10, 11, 12, -100], [21], [-0.5], "stop")],
        r"turn 1: prompt_ids\[6\] = -100",
    ),
    ("negative completion id", [Turn(SYS, [-1], [-0.5], "stop")], r"completion_ids\[0\] = -1"),
    (
        "numpy float ids",
        [Turn(cast(Sequence[int], np.array([1.0, 2.0])), [3], [-0.5], "stop")],
        r"prompt_ids\[0\] = 1.0",
    ),
    ("string id", [Turn(SYS, cast(Sequence[int], ["4"]), [-0.5], "stop")], r"= '4'"),
    ("none id", [Turn(SYS, cast(Sequence[int], [None]), [-0.5], "stop")], r"= None"),
]


@pytest.mark.parametrize(("turns", "where"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_ids_that_cannot_be_tokens_refuse_the_trace(turns: list[Turn], where: str) -> None:
    with pytest.raises(InvalidTrace, match=where):
        merge_turns_with_stats(turns)
    assert issubclass(InvalidTrace, ValueError)


def test_a_prefix_equal_in_value_to_recorded_ids_is_those_ids() -> None:
    # Compared as values, 11.0 == 11: the segment is spelled from the ids already recorded
    # (checked ints), so nothing but ints ever reaches a sequence.
    turns = [GOOD, Turn([*SYS, 10, 11.0, 12, 20], [21], [-0.5], "stop")]
    (seg,) = merge_turns(turns)
    assert seg.tokens == [*SYS, 10, 11, 12, 20, 21]
    assert all(type(t) is int for t in seg.tokens)


BUDGETS: list[tuple[str, Any]] = [
    ("nan", math.nan),
    ("float", 512.0),
    ("fraction", 0.5),
    ("inf", math.inf),
    ("bool", True),
    ("string", "512"),
    ("zero", 0),
    ("negative", -1),
]


@pytest.mark.parametrize("value", [b[1] for b in BUDGETS], ids=[b[0] for b in BUDGETS])
@pytest.mark.parametrize("name", ["max_response_len", "max_context_len"])
def test_budgets_must_be_positive_integers(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=name):
        merge_turns_with_stats([GOOD], **{name: value})


def test_numpy_integer_budgets_are_integers() -> None:
    (seg,) = merge_turns([GOOD, *_second([-0.5, -0.5])[1:]], cast(int, np.int64(3)))
    assert seg.response_length == 3 and seg.truncated


def test_many_identical_retries_are_one_segment_each() -> None:
    # 2,000 retries of one turn (aborted ones, then sampled ones): each sampled retry is
    # its own segment, trained once; the index keeps their marks in O(1) per turn
    # (benchmarks/merge.py measures the cost per retry against a short run).
    prompt = [*SYS, 10]
    aborted = [Turn(prompt, [], [], "abort") for _ in range(1000)]
    sampled = [Turn(prompt, [11 + i % 3], [-0.5], "stop") for i in range(1000)]
    segments, stats = merge_turns_with_stats([*aborted, *sampled])
    assert len(segments) == 1000 and stats.dropped_empty == 1000
    assert stats.breaks == {IDENTICAL_PROMPT: 1999}
    assert [s.tokens[-1] for s in segments] == [11 + i % 3 for i in range(1000)]
    # A continuation joins the newest retry that sampled its completion.
    (tail,) = merge_turns([*sampled[:4], Turn([*prompt, 11, 30], [31], [-0.5], "stop")])[3:]
    assert tail.tokens == [*prompt, 11, 30, 31] and tail.num_turns == 2
