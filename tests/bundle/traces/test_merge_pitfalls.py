"""Table tests: each named pitfall of trace merging, with the exact expected sequences."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest

from agentrl.bundle.traces import (
    ABORTED,
    CONTEXT_FULL,
    DIVERGED_PREFIX,
    EDITED_COMPLETION,
    IDENTICAL_PROMPT,
    MASK_REASONS,
    REWOUND,
    Segment,
    Turn,
    merge_turns,
    merge_turns_with_stats,
)

SYS = [1, 2, 3]


def turn(prompt: Sequence[int], completion: Sequence[int], finish: str = "stop") -> Turn:
    return Turn(prompt, completion, [-0.5] * len(completion), finish)


def seg(tokens: list[int], mask: list[int], num_turns: int = 1, truncated: bool = False) -> Segment:
    lps = [-0.5 if m else 0.0 for m in mask]
    return Segment(tokens, len(mask), mask, lps, num_turns, truncated)


def test_a_chain_keeps_bridges_masked_and_completions_trained() -> None:
    turns = [turn([*SYS, 10], [11, 12]), turn([*SYS, 10, 11, 12, 20, 21], [22])]
    assert merge_turns(turns) == [seg([*SYS, 10, 11, 12, 20, 21, 22], [1, 1, 0, 0, 1], 2)]


def test_n_samples_siblings_with_one_prompt_are_never_folded() -> None:
    # Two samples of one prompt, then the second continues: the continuation must not
    # swallow the first sibling (the mis-merge a chain-tip rule produces).
    p = [*SYS, 10]
    turns = [turn(p, [11]), turn(p, [12]), turn([*p, 12, 30], [31])]
    segments, stats = merge_turns_with_stats(turns)
    assert segments == [seg([*p, 11], [1]), seg([*p, 12, 30, 31], [1, 0, 1], 2)]
    assert stats.breaks == {IDENTICAL_PROMPT: 1}


def test_a_retry_after_an_empty_completion_is_its_own_segment() -> None:
    p = [*SYS, 10]
    turns = [turn(p, [], "abort"), turn(p, [11])]
    segments, stats = merge_turns_with_stats(turns)
    assert segments == [seg([*p, 11], [1])]  # the empty one trains nothing and is dropped
    assert stats.breaks == {IDENTICAL_PROMPT: 1} and stats.dropped_empty == 1


def test_an_aborted_partial_completion_is_kept_masked_and_counted() -> None:
    # The engine aborted the first call after two tokens: the gateway answered 503, the
    # agent never saw [11, 12] and asked again. Those tokens stay in the trace but earn no
    # share of the episode's reward; only the retry's completion trains.
    p = [*SYS, 10]
    turns = [turn(p, [11, 12], "abort"), turn(p, [13])]
    segments, stats = merge_turns_with_stats(turns)
    assert segments == [seg([*p, 11, 12], [0, 0]), seg([*p, 13], [1])]
    assert stats.masked_turns == 1 and stats.masked_tokens == 2
    assert stats.mask_reasons == {ABORTED: 1} and ABORTED in MASK_REASONS
    assert stats.breaks == {IDENTICAL_PROMPT: 1}


def test_retrying_an_earlier_turn_rewinds_into_a_new_segment() -> None:
    turns = [turn([*SYS, 10], [11]), turn([*SYS, 10, 11, 20], [21]), turn([*SYS, 10], [12])]
    segments, stats = merge_turns_with_stats(turns)
    assert [s.tokens for s in segments] == [[*SYS, 10, 11, 20, 21], [*SYS, 10, 12]]
    assert stats.breaks == {REWOUND: 1}


def test_context_surgery_starts_a_new_segment_and_is_counted() -> None:
    turns = [turn([*SYS, 10], [11]), turn([1, 2, 99, 10, 11, 20], [21])]  # history edited
    segments, stats = merge_turns_with_stats(turns)
    assert segments == [seg([*SYS, 10, 11], [1]), seg([1, 2, 99, 10, 11, 20, 21], [1])]
    assert stats.breaks == {DIVERGED_PREFIX: 1}


def test_a_re_tokenised_completion_starts_a_new_segment() -> None:
    # TITO drift: the sampled [40, 41] comes back re-encoded as [45] in the next prompt.
    turns = [turn([*SYS, 10], [40, 41]), turn([*SYS, 10, 45, 20], [21])]
    segments, stats = merge_turns_with_stats(turns)
    assert [s.tokens for s in segments] == [[*SYS, 10, 40, 41], [*SYS, 10, 45, 20, 21]]
    assert segments[1].loss_mask == [1]  # the drifted reply is prompt, never trained
    assert stats.breaks == {EDITED_COMPLETION: 1}


@pytest.mark.parametrize(
    "logprobs",
    [None, [-0.5], [-0.5, -0.5, -0.5], [-0.5, math.nan], [-math.inf, -0.5], [None, -0.5]],
)
def test_missing_misaligned_or_non_finite_logprobs_mask_the_turn(logprobs: Any) -> None:
    turns = [turn([*SYS, 10], [11]), Turn([*SYS, 10, 11, 20], [21, 22], logprobs, "stop")]
    segments, stats = merge_turns_with_stats(turns)
    assert segments == [seg([*SYS, 10, 11, 20, 21, 22], [1, 0, 0, 0], 2)]
    assert (stats.masked_turns, stats.masked_tokens) == (1, 2)


def test_interleaved_sub_agents_sharing_a_system_prompt_stay_apart() -> None:
    a1, b1 = turn([*SYS, 10], [11]), turn([*SYS, 50], [51])
    a2, b2 = turn([*SYS, 10, 11, 12], [13]), turn([*SYS, 50, 51, 52], [53])
    segments, stats = merge_turns_with_stats([a1, b1, b2, a2])
    assert segments == [
        seg([*SYS, 10, 11, 12, 13], [1, 0, 1], 2),
        seg([*SYS, 50, 51, 52, 53], [1, 0, 1], 2),
    ]
    assert stats.breaks == {DIVERGED_PREFIX: 1}


def test_the_longest_qualifying_segment_wins() -> None:
    p = [*SYS, 10]
    # Sibling B sampled A's completion and more; a prompt extending both joins B.
    turns = [turn(p, [11]), turn(p, [11, 12]), turn([*p, 11, 12, 13], [14])]
    segments = merge_turns(turns)
    assert [s.tokens for s in segments] == [[*p, 11], [*p, 11, 12, 13, 14]]


def test_the_response_is_clipped_and_the_prompt_kept_whole() -> None:
    turns = [turn([*SYS, 10], [11, 12]), turn([*SYS, 10, 11, 12, 20], [21, 22])]
    segments, stats = merge_turns_with_stats(turns, max_response_len=4)
    assert segments == [seg([*SYS, 10, 11, 12, 20, 21], [1, 1, 0, 1], 2, truncated=True)]
    assert (stats.clipped_segments, stats.clipped_tokens) == (1, 1)


def test_a_prompt_over_the_context_budget_drops_its_segment() -> None:
    turns = [turn([*SYS, 10], [11, 12]), turn([*SYS, 60, 61, 62, 63], [64])]
    segments, stats = merge_turns_with_stats(turns, max_context_len=6)
    assert segments == [seg([*SYS, 10, 11, 12], [1, 1])]
    assert stats.dropped_over_budget == 1
    clipped, _ = merge_turns_with_stats(turns, max_context_len=5)
    assert clipped == [seg([*SYS, 10, 11], [1], truncated=True)]


def test_length_finish_on_the_last_turn_marks_truncated() -> None:
    assert merge_turns([turn(SYS, [4], "length")])[0].truncated
    stopped = [turn(SYS, [4], "length"), turn([*SYS, 4, 5], [6])]
    assert not merge_turns(stopped)[0].truncated


def refused(conversation: Sequence[int] = ()) -> Turn:
    """A call whose prompt filled the context, continuing `conversation` (that turn's prompt
    + completion, as the gateway's trace names it; empty: a new conversation)."""
    return Turn(conversation, (), None, CONTEXT_FULL)


def test_a_call_refused_for_a_full_context_truncates_the_segment_it_continued() -> None:
    """No token of its own (its prompt never reached the engine), but the conversation it
    continued was cut by the context: that segment ends truncated, and only that one."""
    a1, b1 = turn([*SYS, 10], [11]), turn([*SYS, 50], [51])
    segments, stats = merge_turns_with_stats([a1, b1, refused([*SYS, 50, 51])])
    assert segments == [seg([*SYS, 10, 11], [1]), seg([*SYS, 50, 51], [1], truncated=True)]
    assert stats.context_full == 1 and stats.breaks == {DIVERGED_PREFIX: 1}
    assert merge_turns([a1, b1, refused([*SYS, 50, 51])]) == segments


def test_a_sub_agent_cut_by_the_context_is_the_one_truncated_not_the_last_caller() -> None:
    # Sub-agent A's second call fills the context after B called: A's segment was cut.
    # It marked B's, the latest sampled turn's (slime marks A's: test_merge_upstream).
    a1, b1 = turn([*SYS, 10], [11]), turn([*SYS, 50], [51])
    segments = merge_turns([a1, b1, refused([*SYS, 10, 11])])
    assert segments == [seg([*SYS, 10, 11], [1], truncated=True), seg([*SYS, 50, 51], [1])]


def test_a_new_conversation_cut_by_the_context_truncates_no_other() -> None:
    # A sub-agent's first call (its prompt alone) fills the context: it continued nothing.
    segments = merge_turns([turn([*SYS, 10], [11]), refused()])
    assert segments == [seg([*SYS, 10, 11], [1])]


def test_a_refused_call_the_conversation_then_goes_past_truncates_nothing() -> None:
    # The agent dropped the long tool result and went on in the same conversation.
    turns = [turn([*SYS, 10], [11]), refused([*SYS, 10, 11]), turn([*SYS, 10, 11, 12], [13])]
    segments, stats = merge_turns_with_stats(turns)
    assert segments == [seg([*SYS, 10, 11, 12, 13], [1, 0, 1], 2)]
    assert stats.context_full == 1


def test_a_refused_call_on_a_turn_its_conversation_went_past_truncates_nothing() -> None:
    # It went back to the first turn's state, which its conversation has gone past since.
    turns = [turn([*SYS, 10], [11]), turn([*SYS, 10, 11, 12], [13]), refused([*SYS, 10, 11])]
    assert merge_turns(turns) == [seg([*SYS, 10, 11, 12, 13], [1, 0, 1], 2)]


def test_refused_calls_alone_are_no_segment() -> None:
    segments, stats = merge_turns_with_stats([refused(), refused()])
    assert segments == [] and stats.context_full == 2 and stats.dropped_empty == 0


def test_empty_completions_invent_no_tokens() -> None:
    turns = [
        turn([*SYS, 10], [11]),
        turn([*SYS, 10, 11, 20], []),
        turn([*SYS, 10, 11, 20, 30], [31]),
    ]
    assert merge_turns(turns) == [seg([*SYS, 10, 11, 20, 30, 31], [1, 0, 0, 1], 3)]
    assert merge_turns([turn(SYS, [])]) == []


def test_any_int_sequence_type_gives_plain_lists() -> None:
    lists = [turn([*SYS, 10], [11]), turn([*SYS, 10, 11, 20], [21])]
    others = [
        Turn(
            tuple(lists[0].prompt_ids),
            array("i", [11]),
            cast(Sequence[float], np.array([-0.5])),
            "stop",
        ),
        Turn(
            cast(Sequence[int], np.array([*SYS, 10, 11, 20], dtype=np.int32)),
            (21,),
            (-0.5,),
            "stop",
        ),
    ]
    assert merge_turns(others) == merge_turns(lists)
    out = merge_turns(others)[0]
    assert all(type(t) is int for t in out.tokens) and all(type(x) is float for x in out.logprobs)


def test_inputs_are_not_aliased_or_mutated() -> None:
    prompt, completion = [*SYS, 10], [11]
    segments = merge_turns([turn(prompt, completion)])
    segments[0].tokens.append(0)
    assert prompt == [*SYS, 10] and completion == [11]


@pytest.mark.parametrize("kwargs", [{"max_response_len": 0}, {"max_context_len": -1}])
def test_budgets_must_be_positive(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        merge_turns_with_stats([turn(SYS, [4])], **kwargs)


def test_no_turns_no_segments() -> None:
    segments, stats = merge_turns_with_stats([])
    assert segments == [] and (stats.turns, stats.segments, sum(stats.breaks.values())) == (0, 0, 0)


def test_an_empty_first_prompt_still_merges() -> None:
    turns = [turn([], [5]), turn([5, 6], [7]), turn([5, 6, 7, 8], [9])]
    assert merge_turns(turns) == [seg([5, 6, 7, 8, 9], [1, 0, 1, 0, 1], 3)]


def test_a_segment_is_as_old_as_its_oldest_turn() -> None:
    first = Turn([1, 2], [3], [-0.1], "stop", policy_version=4)
    second = Turn([1, 2, 3, 9], [5], [-0.2], "stop", policy_version=5)
    fresh = Turn([7], [8], [-0.3], "stop", policy_version=5)
    (chain, alone) = merge_turns([first, second, fresh])
    assert chain.policy_version == 4 and alone.policy_version == 5
    unknown = Turn([1, 2, 3, 9], [5], [-0.2], "stop")  # recorded without a version
    assert merge_turns([first, unknown])[0].policy_version is None


def versioned(prompt: Sequence[int], completion: Sequence[int], version: str | None) -> Turn:
    return Turn(prompt, completion, [-0.5] * len(completion), "stop", weight_version=version)


def test_a_turn_of_other_weights_than_the_episodes_last_is_masked_and_counted() -> None:
    """The engine's weight version changed mid-episode (slime updates only between steps,
    so something outside its loop did, or the router spread the episode over engines of
    different weights): the turn sampled under the earlier version would train as if the
    weights of the episode's last turn had sampled it. It is masked and counted, as slime's
    --mask-offpolicy-in-partial-rollout masks what an older version sampled; each segment
    keeps its turns' versions, as slime's Sample.weight_versions does."""
    turns = [
        versioned([*SYS, 10], [11, 12], "3"),
        versioned([*SYS, 10, 11, 12, 20], [21], "4"),
        versioned([*SYS, 50], [51], "4"),  # a sub-agent, under the newer weights
    ]
    segments, stats = merge_turns_with_stats(turns)
    assert [s.loss_mask for s in segments] == [[0, 0, 0, 1], [1]]
    assert segments[0].logprobs == [0.0, 0.0, 0.0, -0.5]
    assert [s.weight_versions for s in segments] == [["3", "4"], ["4"]]
    assert (stats.masked_turns, stats.masked_tokens) == (1, 2)
    assert stats.mask_reasons == {"weight_changed": 1}


def test_an_aborted_turn_is_not_the_episodes_weight_reference() -> None:
    """The episode's last call was aborted on an engine reporting other weights, and the
    agent stopped there: everything the agent saw, and so its reward, came from version "3".
    Judged against the aborted turn's "4", every turn it saw would be masked; the aborted
    turn itself stays masked for its abort, counted once under that reason."""
    seen = [versioned([*SYS, 10], [11, 12], "3"), versioned([*SYS, 10, 11, 12, 20], [21], "3")]
    aborted = Turn(
        [*SYS, 10, 11, 12, 20, 21, 30], [31, 32], [-0.5, -0.5], "abort", weight_version="4"
    )
    segments, stats = merge_turns_with_stats([*seen, aborted])
    assert [s.loss_mask for s in segments] == [[1, 1, 0, 1, 0, 0, 0]]
    assert segments[0].weight_versions == ["3", "3", "4"]
    assert stats.mask_reasons == {ABORTED: 1}


def test_turns_of_one_version_or_of_none_reported_are_never_judged() -> None:
    """One version throughout trains everything; a turn whose engine reported none (an older
    gateway, an engine without the field) is not judged, nor are the others against it."""
    turns = [
        versioned([*SYS, 10], [11], "7"),
        versioned([*SYS, 10, 11, 20], [21], None),
        versioned([*SYS, 10, 11, 20, 21, 30], [31], "7"),
    ]
    segments, stats = merge_turns_with_stats(turns)
    assert [s.loss_mask for s in segments] == [[1, 0, 1, 0, 1]]
    assert segments[0].weight_versions == ["7", "7"]
    assert stats.masked_turns == 0
    unversioned = [turn([*SYS, 10], [11]), turn([*SYS, 10, 11, 20], [21])]
    segments, stats = merge_turns_with_stats(unversioned)
    assert segments[0].loss_mask == [1, 0, 1] and segments[0].weight_versions == []
