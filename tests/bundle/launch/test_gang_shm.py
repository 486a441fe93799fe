"""The gang harness's pod /dev/shm (tests/support/ray_gang.SITECUSTOMIZE): a process of the
pod sees the pod's size, with the right to mount (a real tmpfs in its own mount namespace)
and without it (another user, or a container without CAP_SYS_ADMIN, where statvfs answers
the pod's size). Before, a process that could not mount read this machine's /dev/shm: as
a user other than root in a container with Docker's 64 MiB, the healthy gang failed its
shm check ("1 failed, 27 passed, 8 skipped" for `pytest -x tests/bundle/launch`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import ray_gang

# Root keeps CAP_SYS_ADMIN unless setpriv drops it from what the child may have.
NO_MOUNT = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin"]


@pytest.mark.parametrize("may_mount", [True, False], ids=["as this user", "without CAP_SYS_ADMIN"])
def test_a_pods_processes_see_the_pods_shm_size(tmp_path: Path, may_mount: bool) -> None:
    site = tmp_path / "pod" / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(ray_gang.SITECUSTOMIZE)
    (tmp_path / "pod" / "shm").write_text("64m")
    code = (
        "import ctypes, os\n"
        "st = os.statvfs('/dev/shm')\n"
        "print(st.f_blocks * st.f_frsize, ctypes.CDLL(None).unshare(0x20000) == 0)\n"
    )
    drop = NO_MOUNT if not may_mount and os.geteuid() == 0 else []
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [*drop, sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    size, could_mount = out.stdout.split()
    assert int(size) == 64 << 20, out.stderr
    if not may_mount:
        assert could_mount == "False"  # the stand-in was what answered
