"""Ports and processes for tests that run servers of their own (agents, apps, stand-ins),
and the benchmarks' quick modes (run by the tests so that none of them can rot)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

STOP_GRACE_S = 30.0


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM (if it still runs), then SIGKILL if it has not exited within `grace_s`; always
    reaped."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_benchmark(script: str, *args: str, timeout: float = 600) -> str:
    """`benchmarks/<script>` with `args`, as a user runs it from the repository root; its
    stdout. A failed run fails the calling test with everything the benchmark printed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True, text=True, check=False, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
