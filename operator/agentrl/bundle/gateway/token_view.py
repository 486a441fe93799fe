"""Token ids as the gateway keeps them: packed int32 arrays, and `TokenView`s on them.

An open session keeps every token of its conversations until it closes. As a Python list
each id costs a pointer and, from id 256 on (every real vocabulary), an int object of its
own: 36 bytes a token, where the id needs 4. So ids are kept as `array("i")`, which is also
how they travel to and from the render workers; a list exists only while a prompt
is sent to the engine or parsed.

In a long agent episode every prompt starts with the previous prompt + completion, so
storing each turn's prompt as its own array would still cost turns x tokens. Turns of one
conversation instead share a `History` that only ever grows; each turn's prompt and
completion are `TokenView`s, windows on it. Where a turn does not extend the one before (a
full render that re-tokenised an earlier reply differently, a sub-agent with the same system
prompt), its `History` shares the longest prefix it has in common with an earlier one and
keeps only the rest: a 60-turn conversation re-rendered every turn kept 60 growing copies.
A `TokenView` behaves as an immutable `Sequence[int]` (indexing; slicing and `tolist()`
give lists; iteration; equality with any int sequence).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T")


def ids_of(values: Iterable[int]) -> array[int]:
    """A new packed array of `values` (token ids are < 2**31: `sglang.MAX_TOKEN_ID`)."""
    return array("i", values)


def as_list(ids: Sequence[T]) -> list[T]:
    """`ids` (or logprobs) as a plain list (what JSON encoders and `renderers` take)."""
    if type(ids) is list:
        return ids
    tolist: Any = getattr(ids, "tolist", None)
    if tolist is None:
        return list(ids)
    out = tolist()  # array's and TokenView's give a new list: no second copy
    return out if type(out) is list else list(out)


STEP = 4096  # ids compared at once, at C speed


class History(Sequence[int]):
    """A conversation's ids: the first `cut` ids of `parent`, then its own, which only grow.
    A parent's first `cut` ids never change (it only grows too), so the prefix is shared,
    never copied."""

    __slots__ = ("cut", "own", "parent")
    own: array[int]
    parent: History | None
    cut: int

    def __init__(self, own: array[int], parent: History | None = None, cut: int = 0) -> None:
        if not 0 <= cut <= (0 if parent is None else len(parent)):
            raise ValueError(f"History cut {cut} outside its parent")
        while parent is not None and parent.parent is not None and cut <= parent.cut:
            parent = parent.parent  # the prefix lies in an ancestor: forks stay shallow
        self.own, self.parent, self.cut = own, parent, cut

    def __len__(self) -> int:
        return self.cut + len(self.own)

    def extend(self, ids: Iterable[int]) -> None:
        self.own.extend(ids)

    def _pieces(self, start: int, stop: int) -> list[tuple[array[int], int, int]]:
        """(array, start, stop) pieces of ids[start:stop], first to last; walks up the
        parents in a loop (a conversation may fork thousands of times)."""
        pieces: list[tuple[array[int], int, int]] = []
        node: History | None = self
        while node is not None and start < stop:
            if stop > node.cut:
                pieces.append((node.own, max(start, node.cut) - node.cut, stop - node.cut))
                stop = node.cut
            node = node.parent
        pieces.reverse()
        return pieces

    def shared_with(self, ids: array[int], limit: int) -> int:
        """How many leading ids this history's first `limit` and `ids` share; costs what
        they share, never the whole history."""
        done = 0
        for own, a, b in self._pieces(0, min(limit, len(ids))):
            for i in range(a, b, STEP):
                j = min(i + STEP, b)
                at = done + i - a
                if own[i:j] != ids[at : at + j - i]:
                    k = i
                    while own[k] == ids[at + k - i]:
                        k += 1
                    return at + k - i
            done += b - a
        return done

    def packed(self, start: int = 0, stop: int | None = None) -> array[int]:
        """ids[start:stop] as one array (0 <= start <= stop <= len)."""
        out = array("i")
        for own, a, b in self._pieces(start, len(self) if stop is None else stop):
            out.extend(own[a:b])
        return out

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> array[int]: ...
    def __getitem__(self, index: int | slice) -> int | array[int]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("History slices have step 1")
            return self.packed(start, max(start, stop))
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("History index out of range")
        node = self
        while i < node.cut:
            assert node.parent is not None
            node = node.parent
        return node.own[i - node.cut]

    def __iter__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(
            itertools.islice(own, a, b) for own, a, b in self._pieces(0, len(self))
        )

    def tolist(self) -> list[int]:
        return self.packed().tolist()


class TokenView(Sequence[T]):
    """A window on a shared sequence (ids; also a turn's packed logprobs, so that they compare
    equal to the lists the admin API returns)."""

    __slots__ = ("_ids", "_start", "_stop")

    def __init__(self, ids: Sequence[T], length: int, start: int = 0) -> None:
        if not 0 <= start <= start + length <= len(ids):
            raise ValueError(f"TokenView length {length} from {start} outside 0..{len(ids)}")
        self._ids = ids  # shared: only ever appended to, so this window never changes
        self._start = start
        self._stop = start + length

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        n = self._stop - self._start
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:  # the common case, as one C-level copy
                return as_list(self._ids[self._start + start : self._start + max(start, stop)])
            return [self._ids[self._start + i] for i in range(start, stop, step)]
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("TokenView index out of range")
        return self._ids[self._start + i]

    def __iter__(self) -> Iterator[T]:
        if self._start:  # a late window: copy it rather than walk up to it
            return iter(self._ids[self._start : self._stop])
        return itertools.islice(self._ids, self._stop)

    def tolist(self) -> list[T]:
        return as_list(self._ids[self._start : self._stop])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenView) and other._ids is self._ids:
            return (other._start, other._stop) == (self._start, self._stop)
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(other) == len(self) and all(
                a == b for a, b in zip(self, other, strict=False)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"TokenView(len={len(self)})"
