"""Launcher log capture: how fast slime's output can flow through it, against no capture.

Workload: a child process prints log lines (120 bytes, like Megatron's and SGLang's) as
fast as it can; its stdout and stderr are one regular file, as in Ray's job log.

Measured in the same run, wall clock, best of `--rounds`; a run printing nothing is
timed too, so the throughput leaves out process start-up and the final fsync (shown apart):
- direct:  the child writes straight to the file (what `exec` gave: no copy at all);
- capture: the child runs under `agentrl.bundle.launch.capture` (the pipe, the pump with
           secret redaction of two secrets, the file on the volume written by its own
           thread), as the launcher runs slime when spec.checkpoint.path is set.
`ratio` is capture throughput / direct throughput: the ceiling capture puts on how fast
slime can print. A training driver prints kilobytes per second, so anything above a few
MiB/s never slows it. The job log must get every byte (else the run is void); the file
may lack some at a flood like this one, when its writer thread falls more than 16 MiB
behind (the file marks the gap): `file_lacks` reports how much, worst round.

    python benchmarks/logcapture.py           # 256 MiB per round
    python benchmarks/logcapture.py --quick   # 8 MiB (run by the test suite)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

LINE = b"[2025-03-04 05:06:07] INFO rollout 17 step 123/200: loss=0.1234 reward=0.567 " + (
    b"x" * 41 + b"\n"
)
WRITER = textwrap.dedent(
    f"""
    import os, sys
    line = {LINE!r}
    block = line * 512
    left = int(sys.argv[1])
    while left > 0:
        os.write(1, block[: min(left, len(block))])
        left -= len(block)
    """
)
DRIVER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from agentrl.bundle.launch import capture
    log = capture.Capture.start(
        Path(sys.argv[1]), "bench", ["s3cr3t-value-0123", "Bearer tok-abcdefgh"],
        capture.now_utc(),
    )
    code = capture.run_child([sys.executable, "-c", sys.argv[2], sys.argv[3]], os.environ)
    log.finish()
    sys.exit(capture.exit_like(code))
    """
)


def _run(cmd: list[str], out: Path) -> float:
    with out.open("wb") as f:
        start = time.perf_counter()
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
        return time.perf_counter() - start


def measure(size: int, rounds: int) -> tuple[dict[str, float], dict[str, float], int]:
    """Best wall times of each mode printing `size` bytes and printing nothing."""
    best = {k: float("inf") for k in ("direct", "capture", "direct_0", "capture_0")}
    lacks = 0
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as tmp:
        root = Path(tmp)
        for i in range(rounds):
            for n, suffix in ((size, ""), (0, "_0")):
                job_log = root / f"job-{i}{suffix}.log"
                direct = _run([sys.executable, "-c", WRITER, str(n)], job_log)
                best["direct" + suffix] = min(best["direct" + suffix], direct)
                job_log.unlink()
                logs = root / f"logs-{i}{suffix}"
                cmd = [sys.executable, "-c", DRIVER, str(logs), WRITER, str(n)]
                best["capture" + suffix] = min(best["capture" + suffix], _run(cmd, job_log))
                [kept] = logs.iterdir()
                if job_log.stat().st_size != n:
                    raise SystemExit("capture lost job-log output: the benchmark is void")
                lacks = max(lacks, _lacks(kept.read_bytes()))
                job_log.unlink()
                kept.unlink()
    streaming = {k: best[k] - best[f"{k}_0"] for k in ("direct", "capture")}
    fixed = {k: best[f"{k}_0"] for k in ("direct", "capture")}
    return streaming, fixed, lacks


def _lacks(kept: bytes) -> int:
    """Bytes the file says it lacks (its gap notes)."""
    return sum(int(n) for n in re.findall(rb"(\d+) bytes of output are missing here", kept))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 MiB, 2 rounds")
    parser.add_argument("--mib", type=int, default=256, help="MiB printed per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    mib, rounds = (8, 2) if args.quick else (args.mib, args.rounds)
    size = mib * 1024 * 1024
    streaming, fixed, lacks = measure(size, rounds)
    rates = {k: mib / max(v, 1e-9) for k, v in streaming.items()}
    for name, rate in rates.items():
        print(f"{name:8s} {rate:8.1f} MiB/s  (+{fixed[name]:.2f} s to start and finish)")
    print(f"ratio    {rates['capture'] / rates['direct']:.2f} (capture / direct)")
    print(f"file_lacks {lacks} bytes (worst round)")


if __name__ == "__main__":
    main()
