"""Property tests: merge_turns' invariants hold for any interleaving of chains and faults."""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.bundle.traces import Segment, Turn, merge_turns, merge_turns_with_stats

from .episodes import COMPLETION_BASE, Episode, episodes, logprob_of

PROPS = settings(max_examples=150, deadline=None)


def _valid(turn: Turn) -> bool:
    """Trainable: one finite float <= 0 per completion token (the rule in docs/traces.md)."""
    lps = turn.logprobs
    return (
        lps is not None
        and len(lps) == len(turn.completion_ids)
        and all(type(x) is float and math.isfinite(x) and x <= 0 for x in lps)
    )


def _trained(segments: list[Segment]) -> Counter[int]:
    out: Counter[int] = Counter()
    for seg in segments:
        response = seg.tokens[len(seg.tokens) - seg.response_length :]
        out.update(t for t, m in zip(response, seg.loss_mask, strict=True) if m)
    return out


def _check_shapes(segments: list[Segment]) -> None:
    for seg in segments:
        assert 0 < seg.response_length <= len(seg.tokens)
        assert len(seg.loss_mask) == len(seg.logprobs) == seg.response_length
        assert set(seg.loss_mask) <= {0, 1}
        assert all(lp == 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if not m)
        assert seg.num_turns >= 1
        assert type(seg.tokens) is list and all(type(t) is int for t in seg.tokens)


@PROPS
@given(episodes())
def test_every_sampled_token_is_trained_once_with_its_own_logprob(ep: Episode) -> None:
    segments, stats = merge_turns_with_stats(ep.turns)
    _check_shapes(segments)
    expected = Counter(t for turn in ep.turns if _valid(turn) for t in turn.completion_ids)
    assert _trained(segments) == expected  # nothing unsampled, nothing twice, nothing lost
    for seg in segments:
        response = seg.tokens[len(seg.tokens) - seg.response_length :]
        for t, m, lp in zip(response, seg.loss_mask, seg.logprobs, strict=True):
            if m:
                assert t >= COMPLETION_BASE and lp == logprob_of(t)
    bad = [t for t in ep.turns if not _valid(t) and t.completion_ids]
    assert stats.masked_turns == len(bad)
    assert stats.masked_tokens == sum(len(t.completion_ids) for t in bad)


@PROPS
@given(episodes())
def test_tokens_are_an_input_prompt_plus_the_response(ep: Episode) -> None:
    segments, stats = merge_turns_with_stats(ep.turns)
    prompts = {tuple(t.prompt_ids) for t in ep.turns}
    fulls = {tuple(t.prompt_ids) + tuple(t.completion_ids) for t in ep.turns}
    for seg in segments:
        # The prompt is some turn's prompt, untrimmed; the whole sequence is the last
        # turn's prompt + completion (bridges included, nothing re-tokenised).
        assert tuple(seg.tokens[: len(seg.tokens) - seg.response_length]) in prompts
        assert tuple(seg.tokens) in fulls
    kept_turns = sum(s.num_turns for s in segments)
    assert kept_turns <= len(ep.turns)
    assert stats.segments == len(segments)
    assert stats.segments + stats.dropped_empty == 1 + sum(stats.breaks.values())


@PROPS
@given(episodes())
def test_identical_prompts_never_share_a_segment(ep: Episode) -> None:
    segments = merge_turns(ep.turns)
    where: dict[int, int] = {}
    for i, seg in enumerate(segments):
        response = seg.tokens[len(seg.tokens) - seg.response_length :]
        for t, m in zip(response, seg.loss_mask, strict=True):
            if m:
                where[t] = i
    seen: dict[tuple[int, ...], set[int]] = {}
    for turn in ep.turns:
        if not (_valid(turn) and turn.completion_ids):
            continue
        home = where[turn.completion_ids[0]]
        others = seen.setdefault(tuple(turn.prompt_ids), set())
        assert home not in others
        others.add(home)


@PROPS
@given(episodes(perturb=False))
def test_interleaved_chains_come_back_as_one_segment_each(ep: Episode) -> None:
    segments, stats = merge_turns_with_stats(ep.turns)
    finals = {c: f for c, f in ep.finals.items() if _sampled(ep, c)}
    assert sorted(map(tuple, (s.tokens for s in segments))) == sorted(map(tuple, finals.values()))
    for seg in segments:
        chain = next(c for c, f in finals.items() if f == seg.tokens)
        assert seg.num_turns == ep.chain_of_turn.count(chain)
    assert stats.masked_turns == 0 and not stats.clipped_segments


def _sampled(ep: Episode, chain: int) -> bool:
    turns = (t for t, c in zip(ep.turns, ep.chain_of_turn, strict=True) if c == chain)
    return any(t.completion_ids for t in turns)


@PROPS
@given(episodes(), st.integers(1, 12))
def test_clipping_keeps_the_prompt_and_a_prefix_of_the_response(ep: Episode, limit: int) -> None:
    full = merge_turns(ep.turns)
    clipped, stats = merge_turns_with_stats(ep.turns, max_response_len=limit)
    _check_shapes(clipped)
    assert len(clipped) == len(full)
    for c, f in zip(clipped, full, strict=True):
        assert c.response_length == min(limit, f.response_length)
        assert c.tokens == f.tokens[: len(f.tokens) - f.response_length + c.response_length]
        assert c.loss_mask == f.loss_mask[: c.response_length]
        assert c.logprobs == f.logprobs[: c.response_length]
        assert c.truncated == (f.truncated or c.response_length < f.response_length)
    assert stats.clipped_segments == sum(f.response_length > limit for f in full)


@PROPS
@given(episodes(), st.integers(1, 40))
def test_a_context_budget_never_trims_a_prompt(ep: Episode, budget: int) -> None:
    full = merge_turns(ep.turns)
    kept, stats = merge_turns_with_stats(ep.turns, max_context_len=budget)
    fits = [f for f in full if len(f.tokens) - f.response_length < budget]
    assert len(kept) == len(fits)
    assert stats.dropped_over_budget == len(full) - len(fits)
    for k, f in zip(kept, fits, strict=True):
        assert len(k.tokens) <= budget
        assert (
            k.tokens[: len(k.tokens) - k.response_length]
            == f.tokens[: len(f.tokens) - f.response_length]
        )
