"""Modules stood in for while a file of upstream code runs in this process, then put back.

slime's files import torch, ray and the rest of slime, which these tests cannot (or need not)
load: each test builds plain twins of what the file touches, and `stand_in` puts them in
`sys.modules` only for the block, so no other test sees them.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def stand_in(modules: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """`sys.modules` with `modules` in place for the block, and as it was afterwards."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
