"""slime's own `Dataset` (slime/utils/data.py) at a pinned commit, run in this process.

It is how the pods' slime reads `spec.data.train` and hands the rows to agentrl's rollout,
so the rollout and rehearse tests read the train file with it rather than with an imitation:
its `tools` handling, its label and metadata keys and its JSON parsing are slime's. Only
what it imports around the parsing is stood in for (ray, the timer, slime's `Sample`, here
the plain twin agentrl's rollout uses with the one field the Dataset adds).
"""

from __future__ import annotations

import functools
import importlib.util
import types
from dataclasses import dataclass
from typing import Any

from tests.support.shared import UPSTREAM, require
from tests.support.stand_ins import stand_in

from agentrl.bundle.rollout.types import PlainSample


@dataclass
class DataSample(PlainSample):
    """slime's `Sample` as its Dataset builds one (it also passes `multimodal_inputs`)."""

    multimodal_inputs: Any = None


@functools.cache
def data_module(commit: str) -> types.ModuleType:
    """`slime.utils.data` from slime's snapshot at `commit`, executed for real."""
    source = require(UPSTREAM / "slime" / commit / "slime" / "utils" / "data.py",
                     f"slime's snapshot at {commit}")  # fmt: skip
    spec = importlib.util.spec_from_file_location("slime.utils.data", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    names = ("ray", "slime", "slime.utils", "slime.utils.types", "slime.utils.timer",
             "slime.observability", "slime.observability.timer")  # fmt: skip
    fakes = {name: types.ModuleType(name) for name in names}
    fakes["slime.utils"].__path__ = []  # type: ignore[attr-defined]  # its `from .timer ...`
    fakes["slime.utils.types"].Sample = DataSample  # type: ignore[attr-defined]
    # No multimodal keys are rendered, so slime never looks a type up.
    fakes["slime.utils.types"].MultimodalTypes = None  # type: ignore[attr-defined]
    for timer in ("slime.utils.timer", "slime.observability.timer"):
        fakes[timer].Timer = object  # type: ignore[attr-defined]
    with stand_in({**fakes, "slime.utils.data": module}):
        spec.loader.exec_module(module)
    return module
