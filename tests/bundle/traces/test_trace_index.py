"""The radix-tree index against a brute-force scan of every open chain (differential test),
with the tree's structural invariants checked after every update."""

from __future__ import annotations

from hypothesis import given, settings

from agentrl.bundle.trace_index import PrefixIndex, _Node
from agentrl.bundle.traces import (
    DIVERGED_PREFIX,
    EDITED_COMPLETION,
    IDENTICAL_PROMPT,
    REWOUND,
    _break_reason,
)

from .episodes import Episode, episodes


class BruteForce:
    """The rule as written in docs/traces.md, scanning every chain."""

    def __init__(self) -> None:
        self.tips: list[tuple[list[int], list[int]]] = []
        self.stamp: list[int] = []

    def lookup(self, p: list[int]) -> int:
        best, key = -1, (-1, -1)
        for c, (tip, comp) in enumerate(self.tips):
            full = tip + comp
            if len(p) > len(tip) and p[: len(full)] == full and (len(full), self.stamp[c]) > key:
                best, key = c, (len(full), self.stamp[c])
        return best

    def reason(self, p: list[int]) -> str:
        fulls = [tip + comp for tip, comp in self.tips]
        if any(tip == p for tip, _ in self.tips):
            return IDENTICAL_PROMPT
        if any(len(p) < len(f) and f[: len(p)] == p for f in fulls):
            return REWOUND
        if any(len(p) > len(tip) and p[: len(tip)] == tip for tip, _ in self.tips):
            return EDITED_COMPLETION
        return DIVERGED_PREFIX

    def record(self, chain: int, p: list[int], comp: list[int], now: int) -> None:
        if chain == len(self.tips):
            self.tips.append((p, comp))
            self.stamp.append(now)
        else:
            self.tips[chain], self.stamp[chain] = (p, comp), now


def _check_tree(index: PrefixIndex, oracle: BruteForce) -> None:
    def spell(node: _Node) -> list[int]:
        parts = []
        while node.parent is not None:
            parts.append(node.label)
            node = node.parent
        return [t for label in reversed(parts) for t in label]

    stack = [index.root]
    while stack:
        node = stack.pop()
        for key, child in node.children.items():
            assert child.parent is node and child.label and child.label[0] == key
            assert child.depth == node.depth + len(child.label)
            # Compressed: an unmarked inner node branches.
            assert child.ends or child.bare or child.tips or len(child.children) != 1
            stack.append(child)
    for c, (tip, comp) in enumerate(oracle.tips):
        assert spell(index._end[c]) == tip + comp
        assert spell(index._tip[c]) == tip and index.tip_len[c] == len(tip)


@settings(max_examples=150, deadline=None)
@given(episodes())
def test_index_agrees_with_a_full_scan(ep: Episode) -> None:
    index, oracle = PrefixIndex(), BruteForce()
    for now, turn in enumerate(ep.turns):
        p, comp = list(turn.prompt_ids), list(turn.completion_ids)
        match = index.lookup(p)
        assert match.chain == oracle.lookup(p)
        chain = match.chain
        if chain < 0:
            if oracle.tips:
                assert _break_reason(match) == oracle.reason(p)
            chain = len(oracle.tips)
        index.record(chain, p, comp, match)
        oracle.record(chain, p, comp, now)
        _check_tree(index, oracle)
