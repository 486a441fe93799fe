"""A radix tree over the open segments of one episode, for `traces.merge_turns`.

Finding the segment a new prompt extends is the hot loop of trace merging: prompts grow to
tens of thousands of tokens and an episode may hold dozens of interleaved chains (sub-agents
sharing a long system prompt). Comparing each prompt with every chain costs chains x
prompt length. The tree stores each open chain's full sequence (tip prompt + completion)
once, shared prefixes once, so a lookup compares each prompt token once on the common
path (one C-level list compare per edge; a mismatch inside an edge costs one more pass over
that edge to find where) and branches with a dict lookup: cost linear in the prompt, flat
in the number of chains.

Nodes carry marks: `ends` (chains whose full sequence ends there, after a non-empty
completion), `bare` (chains whose latest completion was empty, so their full sequence ends
at their tip) and `tips` (chains whose latest prompt ends there). The marks tell why a
prompt extends no chain. They are insertion-ordered dicts (add, remove and "most recent"
in O(1)), so n identical retries of one turn, which all mark the same node, cost O(n) in
total, not O(n^2).
"""

from __future__ import annotations

from dataclasses import dataclass

Marks = dict[int, None]  # chain ids in the order they were marked (a dict is an ordered set)
_UNMARKED: Marks = {}  # shared by unmarked nodes; never mutated (see `_mark`)


class _Node:
    __slots__ = ("bare", "children", "depth", "ends", "label", "parent", "tips")

    def __init__(self, label: list[int], depth: int, parent: _Node | None) -> None:
        self.label = label  # tokens on the edge from the parent (owned, never aliased)
        self.depth = depth  # tokens from the root to the end of `label`
        self.parent = parent
        self.children: dict[int, _Node] = {}  # first token of the child's label -> child
        # Most nodes carry no mark: they share one empty dict until marked.
        self.ends = _UNMARKED
        self.bare = _UNMARKED
        self.tips = _UNMARKED


def _mark(marks: Marks, chain: int) -> Marks:
    """`marks` with `chain` added last (a fresh dict when `marks` is the shared empty one)."""
    if marks is _UNMARKED:
        return {chain: None}
    marks[chain] = None
    return marks


def _last(marks: Marks) -> int:
    return next(reversed(marks)) if marks else -1


@dataclass(slots=True)
class Match:
    """Where a prompt's walk down the tree stopped, and what it found on the way."""

    chain: int  # the chain to extend (longest full sequence that prefixes the prompt), or -1
    node: _Node  # deepest node fully matched
    child: _Node | None  # the edge the walk stopped inside, if any
    offset: int  # tokens of `child.label` matched
    pos: int  # prompt tokens matched
    passed_tip: bool  # the prompt strictly extends some chain's latest prompt
    consumed: bool  # the whole prompt lies on a stored path


def _lcp(seq: list[int], start: int, label: list[int]) -> int:
    """Length of the common prefix of seq[start:] and label: O(len) with C-level compares."""
    lo, hi = 0, min(len(label), len(seq) - start)
    while lo < hi:  # [0, lo) matches; the first mismatch, if any, is in [lo, hi]
        mid = (lo + hi + 1) // 2
        if seq[start + lo : start + mid] == label[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _starts_with(prompt: list[int], label: list[int]) -> bool:
    """`prompt[:len(label)] == label` without copying the (long) prompt: the label is
    extended by the prompt's own (short) tail for one whole-list compare, then cut back."""
    k = len(label)
    if k > len(prompt):
        return False
    label += prompt[k:]
    try:
        return label == prompt
    finally:
        del label[k:]


class PrefixIndex:
    """Open chains (by integer id) of one episode, keyed by their full token sequence."""

    def __init__(self) -> None:
        self.root = _Node([], 0, None)
        self._end: list[_Node] = []
        self._tip: list[_Node] = []
        self.tip_len: list[int] = []
        self._stamp: list[int] = []  # when each chain was last recorded (ties: newest wins)
        self._clock = 0

    def lookup(self, prompt: list[int]) -> Match:
        """The chain `prompt` extends: the longest whose full sequence prefixes it, among
        those whose latest prompt is shorter (an identical prompt never extends)."""
        node, pos, n = self.root, 0, len(prompt)
        best, passed_tip = -1, False
        while True:
            if node.ends or node.bare:
                c = self._newest_end(node, n)
                if c >= 0:
                    best = c
            if node.tips and node.depth < n:
                passed_tip = True
            if pos == n:
                return Match(best, node, None, 0, pos, passed_tip, True)
            child = node.children.get(prompt[pos])
            if child is None:
                return Match(best, node, None, 0, pos, passed_tip, False)
            label = child.label
            k = len(label)
            if pos == 0 and 2 * k >= n:
                matched = _starts_with(prompt, label)
            else:
                matched = prompt[pos : pos + k] == label
            if matched:
                node, pos = child, pos + k
                continue
            j = _lcp(prompt, pos, label)
            return Match(best, node, child, j, pos + j, passed_tip, pos + j == n)

    def _newest_end(self, node: _Node, n: int) -> int:
        """The most recently recorded chain whose full sequence ends at `node` and whose
        latest prompt is shorter than `n` (the walk only reaches nodes with depth <= n).
        A chain in `ends` has a non-empty completion below its tip, so its prompt is shorter
        than `node.depth`; a `bare` one's prompt is `node.depth` long."""
        end = _last(node.ends)
        if node.bare and node.depth < n:
            bare = _last(node.bare)
            if end < 0 or self._stamp[bare] > self._stamp[end]:
                return bare
        return end

    def record(self, chain: int, prompt: list[int], completion: list[int], at: Match) -> None:
        """`chain`'s tip is now (prompt, completion); `at` is prompt's lookup, just made."""
        self._clock += 1
        old = (self._end[chain], self._tip[chain]) if chain < len(self._end) else None
        if old is not None and self._extend_in_place(chain, prompt, completion, at):
            self._stamp[chain] = self._clock
            return
        if old is not None:
            old[0].ends.pop(chain, None)
            old[0].bare.pop(chain, None)
            old[1].tips.pop(chain, None)
        node = self._split(at.node, at.child, at.offset)
        if at.pos < len(prompt):
            tip = self._leaf(node, prompt[at.pos :])
            end = self._leaf(tip, list(completion)) if completion else tip
        else:
            tip = node
            walk = self._walk(tip, completion)
            node = self._split(walk.node, walk.child, walk.offset)
            end = self._leaf(node, completion[walk.pos :]) if walk.pos < len(completion) else node
        tip.tips = _mark(tip.tips, chain)
        if completion:
            end.ends = _mark(end.ends, chain)
        else:
            end.bare = _mark(end.bare, chain)
        if old is None:
            self._end.append(end)
            self._tip.append(tip)
            self.tip_len.append(len(prompt))
            self._stamp.append(self._clock)
        else:
            self._end[chain], self._tip[chain], self.tip_len[chain] = end, tip, len(prompt)
            self._stamp[chain] = self._clock
            self._compact(old[0])
            if old[1] is not old[0]:
                self._compact(old[1])

    def sequence(self, chain: int) -> list[int]:
        """A fresh list of `chain`'s full sequence, spelled from the tree's labels: a prefix
        shared by many chains (a system prompt) is then the same, cache-hot int objects in
        every output instead of each prompt's own copy."""
        parts = []
        node: _Node | None = self._end[chain]
        while node is not None:
            parts.append(node.label)
            node = node.parent
        out: list[int] = []
        for label in reversed(parts):
            out += label
        return out

    def close(self) -> None:
        """Break the parent <-> child cycles so the tree is freed by reference counting
        at once, instead of waiting for (and costing) a cyclic garbage collection."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            node.children = {}
            node.parent = None
        self._end.clear()
        self._tip.clear()

    def _extend_in_place(
        self, chain: int, prompt: list[int], completion: list[int], at: Match
    ) -> bool:
        """The common case, without new nodes: a chain alone on its own tail (tip node ->
        end leaf) grows by a bridge and a completion. The tip node's label absorbs the old
        completion and the bridge; the end leaf now holds the new completion."""
        end, tip = self._end[chain], self._tip[chain]
        if not (
            completion
            and at.child is None
            and at.node is end
            and at.pos < len(prompt)
            and end.parent is tip
            and tip.parent is not None  # never grow the root's (empty) label
            and not end.children
            and len(end.ends) == 1
            and not end.bare
            and not end.tips
            and len(tip.tips) == 1
            and not tip.ends
            and not tip.bare
            and len(tip.children) == 1
        ):
            return False
        tip.label += end.label
        tip.label += prompt[at.pos :]
        tip.depth = len(prompt)
        tip.children = {completion[0]: end}
        end.label = list(completion)
        end.depth = len(prompt) + len(completion)
        self.tip_len[chain] = len(prompt)
        return True

    def _walk(self, node: _Node, seq: list[int]) -> Match:
        """Follow `seq` down from `node` as far as stored paths go (no marks consulted)."""
        pos, n = 0, len(seq)
        while pos < n:
            child = node.children.get(seq[pos])
            if child is None:
                break
            label = child.label
            if seq[pos : pos + len(label)] == label:
                node, pos = child, pos + len(label)
                continue
            j = _lcp(seq, pos, label)
            return Match(-1, node, child, j, pos + j, False, pos + j == n)
        return Match(-1, node, None, 0, pos, False, pos == n)

    def _split(self, node: _Node, child: _Node | None, offset: int) -> _Node:
        """A node at `offset` tokens into the edge to `child` (node itself when no edge)."""
        if child is None or offset == 0:
            return node
        label = child.label
        mid = _Node(label[:offset], node.depth + offset, node)
        child.label = label[offset:]
        child.parent = mid
        mid.children[child.label[0]] = child
        node.children[label[0]] = mid
        return mid

    def _leaf(self, node: _Node, tokens: list[int]) -> _Node:
        """A new edge below `node`; it owns `tokens` (callers pass a fresh list)."""
        leaf = _Node(tokens, node.depth + len(tokens), node)
        node.children[tokens[0]] = leaf
        return leaf

    def _compact(self, node: _Node) -> None:
        """Fold a node that lost its marks into its only child, keeping paths compressed."""
        if node.ends or node.bare or node.tips or node.parent is None or len(node.children) != 1:
            return
        (child,) = node.children.values()
        node.label.extend(child.label)  # grows in place: amortised O(new tokens)
        node.depth = child.depth
        node.children = child.children
        for grandchild in node.children.values():
            grandchild.parent = node
        node.ends, node.bare, node.tips = child.ends, child.bare, child.tips
        for c in (*node.ends, *node.bare):
            self._end[c] = node
        for c in node.tips:
            self._tip[c] = node
