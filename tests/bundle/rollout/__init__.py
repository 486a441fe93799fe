"""Rollout tests: a package, so helpers import relatively and never shadow other test dirs.

The repo root goes on sys.path so `tests.support` (the stub SGLang engine and the tiny
tokenizer the gateway tests also use) imports the same way everywhere.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
