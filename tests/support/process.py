"""Ports and processes for tests that run servers of their own (agents, apps, stand-ins)."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

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
