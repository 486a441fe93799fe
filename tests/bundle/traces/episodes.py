"""Hypothesis strategies for episodes of interleaved chains, with a known ground truth.

Every completion token id is unique across the episode (drawn from a counter above
`COMPLETION_BASE`) and its logprob is a function of the id, so the tests can tell from a
merged segment alone which sampled token sits in each trainable slot and whether it
carries its own logprob. Prompt-only tokens (system prompt, user messages, tool results,
headers) stay below `COMPLETION_BASE`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from agentrl.bundle.traces import Turn

COMPLETION_BASE = 1_000_000
# Values that cannot be a sampled token's logprob: a probability above 1, booleans, None,
# non-finite numbers, a string.
BAD_LOGPROBS: tuple[Any, ...] = (0.25, 1e-9, True, False, None, math.nan, -math.inf, "-0.5")
EDIT_TOKEN = 0  # never drawn otherwise, so an edit always changes the prompt
DRIFT_TOKEN = 99_999


def logprob_of(token: int) -> float:
    return -((token % 997) + 1) / 1000.0


@dataclass
class Episode:
    turns: list[Turn]
    chain_of_turn: list[int]  # which generated conversation each turn belongs to (-1: a copy)
    finals: dict[int, list[int]] = field(default_factory=dict)  # chain -> last prompt+completion


@st.composite
def episodes(draw: st.DrawFn, *, perturb: bool = True, max_steps: int = 14) -> Episode:
    """Interleaved conversations sharing a system prompt; with `perturb`, also retries,
    identical siblings, context surgery, re-rendered completions and bad logprobs."""
    n_chains = draw(st.integers(1, 4))
    system = draw(st.lists(st.integers(1, 99), max_size=6))
    ids = itertools.count(COMPLETION_BASE)
    fulls: dict[int, list[int]] = {}
    ep = Episode([], [])
    for _ in range(draw(st.integers(1, max_steps))):
        chain = draw(st.integers(0, n_chains - 1))
        bridge = draw(st.lists(st.integers(100, 999), min_size=1, max_size=3))
        # A first message unique to each chain keeps the conversations apart.
        head = fulls[chain] if chain in fulls else [*system, 50_000 + chain]
        prompt = head + bridge
        completion = [next(ids) for _ in range(draw(st.integers(0, 4)))]
        ep.turns.append(_turn(draw, prompt, completion, perturb))
        ep.chain_of_turn.append(chain)
        fulls[chain] = prompt + completion
        if perturb:
            _maybe_perturb(draw, ep, prompt, completion, ids)
    ep.finals = fulls
    return ep


def _turn(draw: st.DrawFn, prompt: list[int], completion: list[int], perturb: bool) -> Turn:
    lps: list[Any] | None = [logprob_of(t) for t in completion]
    if perturb:
        kind = draw(st.sampled_from(["ok", "ok", "ok", "ok", "none", "short", "bad_value"]))
        if kind == "none":
            lps = None
        elif kind == "short" and completion:
            lps = lps[:-1] if lps else lps
        elif kind == "bad_value" and lps:
            # One value that cannot be a sampled token's logprob (see BAD_LOGPROBS).
            at = draw(st.integers(0, len(lps) - 1))
            lps[at] = draw(st.sampled_from(BAD_LOGPROBS))
    finish = draw(st.sampled_from(["stop", "stop", "length"]))
    return Turn(prompt, completion, lps, finish)


def _maybe_perturb(
    draw: st.DrawFn,
    ep: Episode,
    prompt: list[int],
    completion: list[int],
    ids: itertools.count[int],
) -> None:
    """Extra turns that must land in segments of their own."""
    kind = draw(st.sampled_from(["none", "none", "retry", "surgery", "rerender"]))
    if kind == "retry":  # same prompt, another sample (retry or n>1 sibling)
        other = [next(ids) for _ in range(draw(st.integers(0, 3)))]
        ep.turns.append(Turn(list(prompt), other, [logprob_of(t) for t in other], "stop"))
    elif kind == "surgery" and len(prompt) > 1:  # the history edited before the tip
        at = draw(st.integers(0, len(prompt) - 2))
        edited = [*prompt[:at], EDIT_TOKEN, *prompt[at + 1 :], *completion, 321]
        other = [next(ids)]
        ep.turns.append(Turn(edited, other, [logprob_of(t) for t in other], "stop"))
    elif kind == "rerender" and completion:  # the sampled reply re-tokenised differently
        drifted = [*prompt, DRIFT_TOKEN, *completion[1:], 321]
        other = [next(ids)]
        ep.turns.append(Turn(drifted, other, [logprob_of(t) for t in other], "stop"))
    else:
        return
    ep.chain_of_turn.append(-1)
