"""benchmarks/hostile_specs.py loaded as a module, for the tests that judge the corpus with it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hostile_specs.py"


def load() -> ModuleType:
    """The script as the module `hostile_specs` (loaded once per process)."""
    if "hostile_specs" in sys.modules:
        return sys.modules["hostile_specs"]
    spec = importlib.util.spec_from_file_location("hostile_specs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hostile_specs"] = module  # its dataclasses look themselves up by module
    spec.loader.exec_module(module)
    return module
