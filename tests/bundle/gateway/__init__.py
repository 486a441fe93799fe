"""Gateway tests: a package, so its conftest and helpers never shadow other test dirs.

The repo root goes on sys.path so `tests.support` (the stub engine, shared with the
benchmarks) imports the same way here as in `benchmarks/gateway.py`.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
