"""Ports and processes for tests that run servers of their own (agents, apps, stand-ins),
and the benchmarks' quick modes (run by the tests so that none of them can rot)."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

STOP_GRACE_S = 30.0


# The OS hands out ports for bind(0) and for every outgoing connection from its ephemeral
# range. A port picked there can be taken by any process between the pick and the server's own
# bind: in CI a Ray worker, started by ray.init() in between, took the gateway's port. Tests
# pick below that range instead, and above Ray's default worker ports (10002-19999).
PICK_LOW = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_next_pick: list[int] = []  # this process's next candidate, so two calls never return one port


def _pick_range() -> tuple[int, int]:
    try:
        ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768  # Linux's default
    return PICK_LOW, min(ephemeral_low, 65536) - 1


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing listens on at 127.0.0.1 right now, outside the OS's ephemeral range, so
    that no process's bind(0) or outgoing connection takes it before the caller binds it."""
    low, high = _pick_range()
    if high - low < 1000:  # an unusual ephemeral range leaves no room below it: let the OS pick
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    if not _next_pick:
        _next_pick.append(random.randint(low, high))
    for _ in range(high - low + 1):
        port = _next_pick[0]
        _next_pick[0] = low if port >= high else port + 1
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {low}-{high}")


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
