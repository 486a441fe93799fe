"""`memory.freeze_heap`: garbage is collected before the freeze (never frozen for good),
what is alive is left out of later collections, and `thaw_heap` gives it back."""

from __future__ import annotations

import gc
import weakref

from agentrl.bundle.gateway.memory import freeze_heap, thaw_heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def test_freeze_heap_collects_first_then_freezes_what_is_alive() -> None:
    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage  # unreachable, but kept by its own cycle until a collection
    alive = _Node()
    try:
        frozen = freeze_heap()
        assert gone() is None  # collected, not frozen where no collection could reach it
        assert frozen == gc.get_freeze_count() > 0
        assert not any(o is alive for o in gc.get_objects())  # out of every generation
    finally:
        thaw_heap()
    assert gc.get_freeze_count() == 0
    assert any(o is alive for o in gc.get_objects())
