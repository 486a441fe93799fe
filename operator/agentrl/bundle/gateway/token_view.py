"""`TokenView`: a turn's prompt ids as a window on its conversation's one growing list.

In a long agent episode every prompt starts with the previous prompt + completion, so
storing each turn's prompt as its own list costs turns x tokens (a 200-turn episode at 50k
tokens is 10M ids). Turns of one conversation instead share one list that only ever grows;
each turn's prompt is the first `length` ids of it. A `TokenView` behaves as an immutable
`Sequence[int]` (indexing, slicing to lists, iteration, equality with any int sequence).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import overload


class TokenView(Sequence[int]):
    __slots__ = ("_ids", "_len")

    def __init__(self, ids: list[int], length: int) -> None:
        if not 0 <= length <= len(ids):
            raise ValueError(f"TokenView length {length} outside 0..{len(ids)}")
        self._ids = ids  # shared: only ever appended to, so this prefix never changes
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step == 1:  # the common case, as one C-level copy
                return self._ids[start:stop]
            return [self._ids[i] for i in range(start, stop, step)]
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError("TokenView index out of range")
        return self._ids[i]

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self._ids, self._len)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenView) and other._ids is self._ids:
            return other._len == self._len
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(other) == self._len and all(
                a == b for a, b in zip(self, other, strict=False)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"TokenView(len={self._len})"
