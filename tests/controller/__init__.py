"""Operator tests on the kmock emulator and pure status-machine tables.

The repo root goes on sys.path so `tests.support` imports the same way here as elsewhere.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
