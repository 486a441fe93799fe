"""This machine's loader cache as a test pod of one CUDA runtime sees it.

The launcher refuses a second libcudart major wherever a process could load one, the
ldconfig cache included (LD_LIBRARY_PATH cannot hide it). Its tests run it on this machine
and give it the machine's real `ldconfig -p`, so that the parser reads real output. A
machine whose cache names two majors (a workstation with CUDA 12 and 13 both registered in
/etc/ld.so.conf.d) would then fail every healthy launch: 49 launch tests failed and 5
errored with such a cache bind-mounted over /etc/ld.so.cache. So each test pod gets an
`ldconfig` of its own, first on its PATH (the launcher finds it with `shutil.which`): it
prints the pod's `ldconfig.txt`, which is the machine's real output less the libcudart
entries of every major but one, `pod_major()`. A pod's CUDA toolkit is of that major, and a
test that wants another runtime in the cache writes its own `ldconfig.txt`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from agentrl.bundle.launch import cuda, probe

DEFAULT_MAJOR = 12  # a pod's toolkit where this machine's cache holds no CUDA runtime
LDCONFIG = """#!/bin/sh
exec cat "$(dirname "$0")/../ldconfig.txt"
"""


@functools.cache
def machine_text() -> str:
    """This machine's `ldconfig -p` (read once per test process)."""
    return probe.ldconfig_text()


def one_major(text: str) -> tuple[int, str]:
    """The highest libcudart major `ldconfig -p` output names (12 when none), and the output
    without the libcudart entries of the other majors."""
    keep = max((c.major for c in cuda.parse_ldconfig(text)), default=DEFAULT_MAJOR)
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if all(c.major == keep for c in cuda.parse_ldconfig(line))
    ]
    return keep, "".join(kept)


def pod_major() -> int:
    """The CUDA major of a test pod, and of its toolkit."""
    return one_major(machine_text())[0]


def pod_text() -> str:
    """A test pod's `ldconfig -p`: this machine's, with one CUDA runtime."""
    return one_major(machine_text())[1]


def install(pod: Path) -> Path:
    """`pod/bin/ldconfig`, printing `pod/ldconfig.txt` (written as `pod_text()`); the bin
    directory, to put first on the pod's PATH."""
    bin_dir = pod / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "ldconfig").write_text(LDCONFIG)
    (bin_dir / "ldconfig").chmod(0o755)
    reset(pod)
    return bin_dir


def reset(pod: Path) -> None:
    """The pod's loader cache back to `pod_text()` (after a test injected another)."""
    (pod / "ldconfig.txt").write_text(pod_text())
