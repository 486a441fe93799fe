"""Where the tests find upstream material they read as data, and what they do without it.

The `shared` folder beside the clone holds verbatim upstream snapshots (slime at each
supported commit, Megatron-LM's argument code) and KubeRay's RayJob CRD per release. CI always
has it; `AGENTRL_SHARED` points elsewhere. A test that needs it fails, naming the folder,
when it is missing: a check against upstream that silently skips is no check at all.
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
    """Fail the calling test: `what` should be at `path` and is not."""
    pytest.fail(
        f"{what} not found at {path}: put the shared upstream folder beside the clone "
        "(or set AGENTRL_SHARED)",
        pytrace=False,
    )


def require(path: Path, what: str) -> Path:
    """`path`, which must exist (see `missing`)."""
    if not path.exists():
        missing(path, what)
    return path
