"""Keep the driver's whole output on the checkpoint volume, one file per launch.

KubeRay deletes the Ray cluster, and with it the driver log on the head pod, when a run
ends (after `ttlSecondsAfterFinished`, default 0) and before each retry; the submitter
pod's copy (`ray job logs --follow`) is cut by kubelet's log rotation on long runs and is
deleted on retry too. So when `spec.checkpoint.path` is set, the launcher keeps a copy of
everything it and slime print in `<checkpoint.path>/logs/<experiment>-attempt-<N>-<UTC
time>.log`, next to the checkpoints that outlive the cluster.

How it streams, and what it guarantees:

- File descriptors 1 and 2 are pointed at a pipe as soon as the file is open, so the
  launcher's own lines, its probes and slime (a child process that inherits them) all go
  through it. One pipe when stdout and stderr are the same file (Ray's job log), keeping
  their order; two otherwise, each copied back to its own stream.
- Pump threads copy each pipe to the original stream first, synchronously: slime is slowed
  by a slow job log exactly as before, never more. The file gets its copy through a bounded
  queue (`QUEUE_CHUNKS` x `CHUNK` bytes) written by its own thread, so a slow or full
  volume never stalls training; bytes that did not fit are counted and the file says
  where and how many are missing. Memory stays bounded either way.
- The file gets whole lines from each pipe (a line's pieces wait for its end, at most
  `CHUNK` bytes), so with two pipes the file interleaves their lines, never their bytes.
- Known secret values (the runtime config's secret env vars, and env vars whose names say
  they hold a secret) are replaced by `<redacted>` in both copies, also when a value is
  split across reads.
- slime runs as the launcher's child (an `exec` cannot be tee'd); the launcher forwards
  SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it, and exits with slime's exit
  code, or dies by slime's signal, so Ray and KubeRay see what they saw with `exec`. Ray's
  `ray job stop` signals every process of the job itself, so slime may receive a stop
  signal twice; its default handling (terminate) makes the second a no-op. The launcher
  exits only after the copy is complete, so Ray's log (and the RayJob's failure message,
  read from its last lines) has every line slime printed.
- N counts this experiment's files already in the directory, plus one: KubeRay does not
  tell the pod its retry count. Each KubeRay attempt, each resume after a suspend, and a
  re-created experiment of the same name start a new launch; the UTC start time in the name
  tells them apart, and O_EXCL makes two launches never share a file.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from agentrl.api.constants import LAUNCH_LOG_DIR, LAUNCH_LOG_NAME, LAUNCH_LOG_TIME, REDACTED

CHUNK: Final = 64 * 1024
# At most this many chunks (16 MiB) wait for a slow volume before output is dropped there.
QUEUE_CHUNKS: Final = 256
# After slime exits, how long to wait for processes it left behind to close its output.
DRAIN_SECONDS: Final = 10.0
FORWARDED_SIGNALS: Final = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
SECRET_NAME: Final = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)
# Names that match SECRET_NAME but hold where a secret is, not the secret.
_NOT_SECRET_SUFFIXES: Final = ("_FILE", "_PATH", "_DIR", "_URI", "_URL")
# Shorter values of variables named like secrets are left alone (an `AUTH_MODE=1` must not
# redact every "1"); secrets the config names are redacted from this length on.
MIN_GUESSED_SECRET: Final = 8
MIN_NAMED_SECRET: Final = 4
# What follows "<experiment>-attempt-" in LAUNCH_LOG_NAME.
_REST = re.compile(r"^(\d+)-\d{8}T\d{6}Z\.log$")
LOG_PREFIX: Final = "agentrl-launch:"


def log_dir(checkpoint_path: str) -> str:
    return f"{checkpoint_path.rstrip('/')}/{LAUNCH_LOG_DIR}"


def file_name(experiment: str, attempt: int, now: datetime) -> str:
    time = now.astimezone(UTC).strftime(LAUNCH_LOG_TIME)
    return LAUNCH_LOG_NAME.format(experiment=experiment, attempt=attempt, time=time)


def next_attempt(experiment: str, names: Iterable[str]) -> int:
    """1 + the highest attempt number among this experiment's files in `names`."""
    prefix = LAUNCH_LOG_NAME.split("{attempt}")[0].format(experiment=experiment)
    found = [
        int(m.group(1))
        for name in names
        if name.startswith(prefix) and (m := _REST.match(name[len(prefix) :]))
    ]
    return max(found, default=0) + 1


def open_log(directory: Path, experiment: str, now: datetime) -> tuple[Path, int, int]:
    """Create the next attempt's file: (path, write fd, attempt number)."""
    directory.mkdir(parents=True, exist_ok=True)
    attempt = next_attempt(experiment, os.listdir(directory))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
    while True:
        path = directory / file_name(experiment, attempt, now)
        try:
            return path, os.open(path, flags, 0o644), attempt
        except FileExistsError:  # another launch took this number meanwhile
            attempt += 1


def secret_values(env: Mapping[str, str], named: Iterable[str]) -> list[str]:
    """Values to redact: the named secret variables', and those of variables named like one.

    A named value of the form `<scheme> <token>` (an Authorization header) also has its token
    redacted on its own.
    """
    names = set(named)
    out: set[str] = set()
    for key, value in env.items():
        if key in names and len(value) >= MIN_NAMED_SECRET:
            out.add(value)
            token = value.split()[-1] if value.split() else ""
            if len(token) >= MIN_GUESSED_SECRET:
                out.add(token)
        elif (
            SECRET_NAME.search(key)
            and not key.upper().endswith(_NOT_SECRET_SUFFIXES)
            and len(value) >= MIN_GUESSED_SECRET
        ):
            out.add(value)
    return sorted(out)


class Scrubber:
    """Replaces secret values in a byte stream that arrives in arbitrary pieces.

    A piece may end inside a secret; the longest tail that could start one is held back until
    the next piece (or `flush`), so a split secret is still found. Nothing else is delayed.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self._secrets = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
        self._longest = len(self._secrets[0]) if self._secrets else 0
        self._pending = b""
        self._marker = REDACTED.encode()

    def feed(self, data: bytes) -> bytes:
        if not self._secrets:
            return data
        buf = self._pending + data
        for secret in self._secrets:
            if secret in buf:
                buf = buf.replace(secret, self._marker)
        keep = self._partial(buf)
        self._pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]

    def flush(self) -> bytes:
        out, self._pending = self._pending, b""
        return out

    def _partial(self, buf: bytes) -> int:
        """Length of the longest tail of `buf` that is a proper prefix of a secret."""
        for k in range(min(self._longest - 1, len(buf)), 0, -1):
            tail = buf[-k:]
            if any(s.startswith(tail) for s in self._secrets):
                return k
        return 0


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FileSink:
    """The log file's writer thread, fed through a bounded queue that never blocks a pump."""

    def __init__(
        self, fd: int, report: Callable[[str], None], max_chunks: int = QUEUE_CHUNKS
    ) -> None:
        self._fd = fd
        self._report = report
        self._queue: queue.Queue[bytes | None] = queue.Queue(max_chunks)
        self._lock = threading.Lock()
        self._missing = 0  # bytes dropped since the last chunk that was queued
        self.dropped = 0
        self.failed: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="agentrl-log-file", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        if not data or self.failed is not None:
            return
        with self._lock:  # pumps of stdout and stderr share the sink
            try:
                if self._missing:
                    self._queue.put_nowait(_gap_note(self._missing))
                    self._missing = 0
                self._queue.put_nowait(data)
            except queue.Full:
                self._missing += len(data)
                self.dropped += len(data)

    def close(self, timeout: float) -> bool:
        """Write what is queued, fsync and close; False when the volume did not finish."""
        with self._lock:
            tail = _gap_note(self._missing) if self._missing else b""
        try:
            if tail:
                self._queue.put(tail, timeout=timeout)
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return False
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        os.close(self._fd)
        return True

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self.failed is not None:
                continue  # drain, so put() never waits on a dead writer
            try:
                write_all(self._fd, item)
            except OSError as e:
                self.failed = e
                self._report(f"the log file stopped taking writes ({e.strerror}); output goes on")


def _gap_note(missing: int) -> bytes:
    return (
        f"\n{LOG_PREFIX} {missing} bytes of output are missing here: the volume was too slow "
        "(they are in the Ray job log)\n"
    ).encode()


class Lines:
    """Cuts a byte stream at line ends, so two pumps sharing the file interleave whole lines.

    A writer that is not line-buffered (python -u, a C library) emits "text" and "\n" as two
    writes; without this, stderr's "text" and stdout's next line would share a line in the
    file. A carriage return ends a line too (progress bars), and a line longer than `CHUNK`
    is passed on in pieces, so the held tail stays bounded.
    """

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        buf = self._tail + data
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        if cut == 0 and len(buf) >= CHUNK:
            cut = len(buf)
        self._tail = buf[cut:]
        return buf[:cut]

    def flush(self) -> bytes:
        out, self._tail = self._tail, b""
        return out


class Pump(threading.Thread):
    """Copies one pipe to the original stream, then to the sink, secrets redacted.

    The original stream gets every byte as soon as it is read; the file gets whole lines.
    """

    def __init__(self, source: int, target: int, sink: FileSink, scrubber: Scrubber) -> None:
        super().__init__(name=f"agentrl-log-pump-{target}", daemon=True)
        self.source, self.target, self.sink, self.scrubber = source, target, sink, scrubber
        self.lines = Lines()
        self.target_ok = True

    def run(self) -> None:
        while data := _read(self.source):
            self._emit(self.scrubber.feed(data))
        self._emit(self.scrubber.flush())
        self.sink.put(self.lines.flush())

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        if self.target_ok:
            try:
                write_all(self.target, data)
            except OSError:  # the job log is gone; the file still gets everything
                self.target_ok = False
        self.sink.put(self.lines.feed(data))


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, CHUNK)
    except OSError:
        return b""


class Capture:
    """fds 1 and 2 copied to their original streams and to the log file, until `finish`."""

    def __init__(self, path: Path, attempt: int, fd: int, secrets: Sequence[str]) -> None:
        self.path, self.attempt = path, attempt
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        self._saved = {1: os.dup(1), 2: os.dup(2)}  # not inherited by children
        self.sink = FileSink(fd, self._report)
        self.pumps: list[Pump] = []
        targets = [[1, 2]] if _same_file(1, 2) else [[1], [2]]
        for fds in targets:
            read_end, write_end = os.pipe()
            for target in fds:
                os.dup2(write_end, target)  # inheritable: slime writes straight into it
            os.close(write_end)
            self.pumps.append(Pump(read_end, self._saved[fds[0]], self.sink, Scrubber(secrets)))
        for pump in self.pumps:
            pump.start()

    @classmethod
    def start(
        cls, directory: Path, experiment: str, secrets: Sequence[str], now: datetime
    ) -> Capture:
        path, fd, attempt = open_log(directory, experiment, now)
        return cls(path, attempt, fd, secrets)

    def finish(self, drain: float = DRAIN_SECONDS) -> None:
        """Give fds 1 and 2 back, wait for the pipes to empty, complete the file."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        for target, saved in self._saved.items():
            os.dup2(saved, target)  # drops this process's write ends of the pipes
        for pump in self.pumps:
            pump.join(drain)
        if any(p.is_alive() for p in self.pumps):
            self._report(
                f"slime exited, but a process it started still holds its output open; "
                f"stopped copying to {self.path} after {drain:.0f} s"
            )
        if not self.sink.close(drain):
            self._report(f"{self.path} may lack the last output: the volume did not take it")
        elif self.sink.dropped:
            self._report(
                f"{self.path} lacks {self.sink.dropped} bytes: the volume was too slow "
                "(the file marks where)"
            )
        if not any(p.is_alive() for p in self.pumps):
            for saved in self._saved.values():
                os.close(saved)

    def _report(self, message: str) -> None:
        with contextlib.suppress(OSError):
            write_all(self._saved[2], f"{LOG_PREFIX} warning: {message}\n".encode())


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def run_child(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run slime with the forwarded signals passed on; its returncode (-N: killed by N)."""
    child: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child:
            with contextlib.suppress(ProcessLookupError):
                child[0].send_signal(signum)
        else:
            early.append(signum)

    previous = {
        sig: signal.signal(sig, forward)
        for sig in FORWARDED_SIGNALS
        if signal.getsignal(sig) is not signal.SIG_IGN  # an ignored signal stays ignored
    }
    try:
        if early:  # stopped before slime started: do not start it
            return -early[0]
        # restore_signals=False: slime inherits the dispositions an exec would have left.
        child.append(subprocess.Popen(list(argv), env=dict(env), restore_signals=False))
        for signum in early:
            child[0].send_signal(signum)
        return child[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_like(returncode: int) -> int:
    """The exit status for a child's returncode: the same code, or death by the same signal."""
    if returncode >= 0:
        return returncode
    signum = -returncode
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    return 128 + signum  # only when that signal does not terminate by default


def now_utc() -> datetime:
    return datetime.now(UTC)
