"""Where the tests find upstream material they read as data, and what they do without it.

The upstream tier reads slime at each supported commit, Megatron-LM's argument code, SGLang's
argument modules and KubeRay's RayJob CRD per release (pinned in images/upstream.toml; found
as tests/support/upstream.py says: a snapshot folder, else what hack/setup.sh fetched). CI has
the snapshot folder, so there these tests always run. Without the sources, a test that needs
them skips with a reason starting with `TIER`, and the run prints one line naming the tier and
how to get its inputs (tests/conftest.py): never a failure for want of an input, never a
silent skip, and never because a path was guessed wrong (every such path is derived here).
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest
from tests.support import upstream

TIER = "upstream tier"
SHARED = upstream.snapshot_root()
UPSTREAM = SHARED / "upstream"
KUBERAY_SCHEMAS = SHARED / "schemas" / "kuberay"


def missing(path: Path, what: str) -> NoReturn:
    """Skip the calling test (or module): `what` should be at `path` and is not."""
    pytest.skip(f"{TIER}: {what} not found at {path}", allow_module_level=True)


def require(path: Path, what: str) -> Path:
    """`path`, which must exist (see `missing`)."""
    if not path.exists():
        missing(path, what)
    return path


def skip_summary(reasons: list[str]) -> str | None:
    """The one line a run prints when it skipped upstream-tier tests (None when it did not)."""
    ours = [r for r in reasons if TIER in r]
    if not ours:
        return None
    return (
        f"{TIER} skipped ({len(ours)} tests or modules): its sources are not under "
        f"{SHARED}; {upstream.FETCH_HINT}"
    )
