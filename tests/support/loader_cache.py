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

That major is the one of the nvidia wheels in this Python's site-packages when it holds any,
since no pod can hide them (they are the test venv's: a CUDA build of torch from PyPI brings
`nvidia-cuda-runtime`), else the highest the cache names, else 12. With a fake cu12 runtime
wheel beside a cache naming CUDA 13, the healthy gang failed its CUDA pin ("1 failed, 27
passed, 8 skipped" for `pytest -x tests/bundle/launch` without the upstream snapshots).
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from pathlib import Path

from agentrl.bundle.launch import cuda, probe

DEFAULT_MAJOR = 12  # a pod's toolkit where this machine has no CUDA runtime at all
LDCONFIG = """#!/bin/sh
exec cat "$(dirname "$0")/../ldconfig.txt"
"""


def one_major(text: str, wheels: Collection[int] = ()) -> tuple[int, str]:
    """The CUDA major of a pod whose site-packages hold runtime wheels of the majors `wheels`
    and whose loader cache prints `text` (`ldconfig -p`): the wheels' (the highest, if they
    disagree: the launcher then names them), else the highest `text` names, else 12. And
    `text` without the libcudart entries of any other major."""
    cached = [c.major for c in cuda.parse_ldconfig(text)]
    keep = max(wheels) if wheels else max(cached, default=DEFAULT_MAJOR)
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if all(c.major == keep for c in cuda.parse_ldconfig(line))
    ]
    return keep, "".join(kept)


@functools.cache
def _pod() -> tuple[int, str]:
    """`one_major` of this machine (read once per test process)."""
    wheels = cuda.find_cudarts(Path("/"), [], "", probe.site_dirs())  # the wheels alone
    return one_major(probe.ldconfig_text(), {c.major for c in wheels})


def pod_major() -> int:
    """The CUDA major of a test pod, and of its toolkit."""
    return _pod()[0]


def pod_text() -> str:
    """A test pod's `ldconfig -p`: this machine's, with one CUDA runtime."""
    return _pod()[1]


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
