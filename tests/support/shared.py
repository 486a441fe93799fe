"""Where the tests find upstream material they read as data, and what they do without it.

The `shared` folder beside the clone holds verbatim upstream snapshots (slime at each
supported commit, Megatron-LM's argument code) and KubeRay's RayJob CRD per release. CI always
has it, so there these tests always run; `AGENTRL_SHARED` points elsewhere. Without it, a test
that needs it skips, naming the folder and what it should hold: never silently, and never
because a path was guessed wrong (every such path is derived here).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("AGENTRL_SHARED", ROOT.parent / "shared"))
UPSTREAM = Path(os.environ.get("AGENTRL_UPSTREAM", SHARED / "upstream"))
KUBERAY_SCHEMAS = SHARED / "schemas" / "kuberay"


def missing(path: Path, what: str) -> NoReturn:
    """Skip the calling test (or module): `what` should be at `path` and is not."""
    pytest.skip(
        f"{what} not found at {path}: put the shared upstream folder beside the clone "
        "(or set AGENTRL_SHARED)",
        allow_module_level=True,
    )


def require(path: Path, what: str) -> Path:
    """`path`, which must exist (see `missing`)."""
    if not path.exists():
        missing(path, what)
    return path
