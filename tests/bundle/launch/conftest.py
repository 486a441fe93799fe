"""Fixtures of the launcher tests: where the upstream SGLang trees are prepared, once."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_pod import slime_upstream


@pytest.fixture(scope="session")
def upstream_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session directory for each slime row's patched SGLang source; skips without the
    upstream snapshots (CI has them)."""
    slime_upstream.require_upstream()
    return tmp_path_factory.mktemp("upstream")
