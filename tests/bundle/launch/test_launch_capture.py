"""The driver's output kept on the checkpoint volume (agentrl.bundle.launch.capture).

Pure parts (attempt numbering, secret redaction across reads, the bounded file queue) are
tested in-process; fd redirection, signal forwarding and exit statuses in real processes,
first with the capture module alone (fast), then through the real launcher in a pod whose
image holds slime's own source (launch_pod), with a train.py stand-in that prints, waits
for SIGTERM or exits with a given code.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from launch_pod import SECRET, Pod

from agentrl.api.constants import REDACTED
from agentrl.bundle.launch import capture
from agentrl.bundle.launch.capture import FileSink, Scrubber

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


# ---- attempt numbering ------------------------------------------------------------------


def test_next_attempt_counts_only_this_experiments_files() -> None:
    names = [
        "demo-attempt-1-20250101T000000Z.log",
        "demo-attempt-3-20250102T000000Z.log",
        "demo-x-attempt-9-20250101T000000Z.log",  # another experiment whose name extends ours
        "demo-attempt-7-notatime.log",
        "demo-attempt-x-20250101T000000Z.log",
        "README",
    ]
    assert capture.next_attempt("demo", names) == 4
    assert capture.next_attempt("demo-x", names) == 10
    assert capture.next_attempt("other", names) == 1


def test_each_launch_gets_the_next_file_and_never_reuses_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "ckpt" / "logs"
    first, fd1, n1 = capture.open_log(logs, "demo", T0)
    second, fd2, n2 = capture.open_log(logs, "demo", T0)
    assert (n1, n2) == (1, 2)
    assert first.name == "demo-attempt-1-20250304T050607Z.log"
    assert second.name == "demo-attempt-2-20250304T050607Z.log"
    # A launch that listed the directory before another created its file: O_EXCL moves it on.
    monkeypatch.setattr(capture.os, "listdir", lambda _: [])
    third, fd3, n3 = capture.open_log(logs, "demo", T0)
    assert n3 == 3 and third.name.startswith("demo-attempt-3-")
    for fd in (fd1, fd2, fd3):
        os.close(fd)


# ---- secrets ----------------------------------------------------------------------------


def test_secret_values_named_and_guessed() -> None:
    env = {
        "WANDB_API_KEY": "0123456789abcdef",
        "AGENTRL_HTTP_HEADER_0": "Bearer tok-abcdefgh",
        "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEJr",
        "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/token",  # where, not what
        "AUTH_MODE": "1",  # too short to guess: would redact every "1"
        "MY_PW": "hunter22",  # not named like a secret, not named by the config
        "SHORT_NAMED": "abcd",
    }
    got = capture.secret_values(env, ["WANDB_API_KEY", "AGENTRL_HTTP_HEADER_0", "SHORT_NAMED"])
    assert got == sorted(
        [
            "0123456789abcdef",
            "Bearer tok-abcdefgh",
            "tok-abcdefgh",  # the token alone, as an agent might print it
            "FwoGZXIvYXdzEJr",
            "abcd",
        ]
    )


def test_a_secret_split_at_every_position_is_still_redacted() -> None:
    secret = "s3cr3t-value-xyz"
    text = f"key={secret}; again {secret}\n"
    expected = text.replace(secret, REDACTED)
    for cut in range(len(text) + 1):
        scrub = Scrubber([secret])
        out = scrub.feed(text[:cut].encode()) + scrub.feed(text[cut:].encode()) + scrub.flush()
        assert out.decode() == expected, cut


def test_text_without_a_secret_prefix_is_never_held_back() -> None:
    scrub = Scrubber(["s3cr3t-value-xyz"])
    assert scrub.feed(b"step 1 done\n") == b"step 1 done\n"
    assert scrub.feed(b"tail s3c") == b"tail "  # could be the start of the secret
    assert scrub.feed(b"ret\n") == b"s3cret\n"
    assert Scrubber([]).feed(b"anything") == b"anything"


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(["a", "b", "\n", "TOKEN1234", "TOKEN12", "xyzTOK"]), max_size=40
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_redaction_does_not_depend_on_how_output_is_split(
    parts: list[str], cuts: list[int]
) -> None:
    secrets = ["TOKEN1234", "xyzTOKEN12"]
    data = "".join(parts).encode()
    reference = data
    for s in sorted(secrets, key=len, reverse=True):
        reference = reference.replace(s.encode(), REDACTED.encode())
    scrub = Scrubber(secrets)
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    out = b"".join(scrub.feed(data[a:b]) for a, b in itertools.pairwise(bounds))
    assert out + scrub.flush() == reference


# ---- the bounded file queue -------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\0", b"\n")), max_size=20))
def test_the_file_gets_whole_lines_and_every_byte(pieces: list[bytes]) -> None:
    lines = capture.Lines()
    out = [lines.feed(p) for p in pieces]
    out.append(lines.flush())
    assert b"".join(out) == b"".join(pieces)
    # Every piece handed to the file but the last ends a line, so pumps interleave lines only.
    assert all(o.endswith((b"\n", b"\r")) for o in out[:-1] if o)


def test_a_line_longer_than_a_chunk_is_passed_on_in_pieces() -> None:
    lines = capture.Lines()
    assert lines.feed(b"x" * (capture.CHUNK - 1)) == b""
    assert lines.feed(b"yy") == b"x" * (capture.CHUNK - 1) + b"yy"  # the held tail stays bounded
    assert lines.flush() == b""


def test_a_slow_volume_never_blocks_and_the_file_marks_the_gap() -> None:
    """The "file" is a pipe nobody reads yet: its writer blocks, as on a hung volume."""
    read_end, write_end = os.pipe()
    reports: list[str] = []
    sink = FileSink(write_end, reports.append, max_chunks=2)
    chunks = [bytes([65 + i % 26]) * 40_000 for i in range(12)]
    for chunk in chunks:  # returns at once even though nothing is written
        sink.put(chunk)
    assert sink.dropped > 0
    received = bytearray()
    reader = threading.Thread(target=_read_all, args=(read_end, received))
    reader.start()
    assert sink.close(timeout=60)
    reader.join(60)
    text = bytes(received)
    missing = [int(n) for n in re.findall(rb"(\d+) bytes of output are missing here", text)]
    assert missing and sum(missing) == sink.dropped  # every gap is marked, with its size
    kept = b"".join(_strip_notes(text))
    # What reached the file is whole queued chunks, in order, nothing invented.
    pos = 0
    for chunk in chunks:
        if kept.startswith(chunk, pos):
            pos += len(chunk)
    assert pos == len(kept) and len(kept) + sink.dropped == sum(map(len, chunks))
    assert reports == []


def test_a_failing_volume_is_reported_once_and_output_goes_on() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # writes now fail with EPIPE (SIGPIPE is ignored by Python)
    reports: list[str] = []
    sink = FileSink(write_end, reports.append)
    for _ in range(5):
        sink.put(b"line\n")
    assert sink.close(timeout=60)
    assert len(reports) == 1 and "stopped taking writes" in reports[0]


def _read_all(fd: int, into: bytearray) -> None:
    while data := os.read(fd, 65536):
        into += data
    os.close(fd)


def _strip_notes(text: bytes) -> list[bytes]:
    out, rest = [], text
    marker = f"\n{capture.LOG_PREFIX} ".encode()
    while (i := rest.find(marker)) >= 0:
        out.append(rest[:i])
        rest = rest[rest.index(b"\n", i + 1) + 1 :]
    return [*out, rest]


# ---- fds, children, signals: the capture module in real processes ----------------------

DRIVER = textwrap.dedent(
    """
    import os, subprocess, sys
    from pathlib import Path
    from agentrl.bundle.launch import capture
    log = capture.Capture.start(Path(sys.argv[1]), "demo", ["s3cr3t-value"], capture.now_utc())
    print("launcher line", flush=True)
    child = [sys.executable, "-c", sys.argv[2]]
    code = capture.run_child(child, os.environ)
    log.finish()
    sys.exit(capture.exit_like(code))
    """
)


def _driver(tmp_path: Path, child: str, **popen: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", DRIVER, str(tmp_path / "logs"), child], **popen
    )


def test_one_job_log_keeps_stdout_and_stderr_in_order_and_the_file_has_the_same(
    tmp_path: Path,
) -> None:
    child = (
        "import sys\n"
        "for i in range(200):\n"
        "    print(f'out {i}', flush=True); print(f'err {i}', file=sys.stderr, flush=True)\n"
        "sys.stdout.write('key s3cr'); sys.stdout.flush(); print('3t-value done')\n"
    )
    job_log = tmp_path / "job-driver.log"
    with job_log.open("wb") as f:  # as Ray runs the entrypoint: stdout=file, stderr=STDOUT
        proc = _driver(tmp_path, child, stdout=f, stderr=subprocess.STDOUT)
        assert proc.wait(120) == 0
    [kept] = (tmp_path / "logs").iterdir()
    assert kept.name.startswith("demo-attempt-1-")
    lines = job_log.read_text().splitlines()
    expected = ["launcher line"] + [f"{s} {i}" for i in range(200) for s in ("out", "err")]
    assert lines == [*expected, "key <redacted> done"]
    assert kept.read_text() == job_log.read_text()


def test_separate_stdout_and_stderr_stay_separate(tmp_path: Path) -> None:
    # stderr's line arrives in two writes with stdout's whole line between them, as an
    # unbuffered writer (python -u) does it: the file still holds three whole lines.
    child = (
        "import os, sys, time\n"
        "os.write(2, b'to '); time.sleep(0.2)\n"
        "os.write(1, b'to out\\n'); time.sleep(0.2)\n"
        "os.write(2, b'err\\n'); sys.exit(3)\n"
    )
    proc = _driver(tmp_path, child, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3  # slime's exit code is the launcher's
    assert out.decode().splitlines() == ["launcher line", "to out"]
    assert err.decode().splitlines() == ["to err"]
    [kept] = (tmp_path / "logs").iterdir()
    assert sorted(kept.read_text().splitlines()) == ["launcher line", "to err", "to out"]


def test_sigterm_to_the_launcher_reaches_slime_and_the_launcher_dies_by_it(
    tmp_path: Path,
) -> None:
    child = "import signal\nprint('ready', flush=True)\nwhile True: signal.pause()\n"
    proc = _driver(tmp_path, child, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"launcher line\n"
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)  # only the launcher: forwarding must reach slime
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM
    [kept] = (tmp_path / "logs").iterdir()
    assert kept.read_text() == "launcher line\nready\n"


def test_output_after_the_stop_signal_is_kept(tmp_path: Path) -> None:
    child = textwrap.dedent(
        """
        import signal, sys
        def stop(signum, frame):
            print('saving before exit', flush=True); sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print('ready', flush=True)
        while True: signal.pause()
        """
    )
    proc = _driver(tmp_path, child, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert out == b"saving before exit\n"
    [kept] = (tmp_path / "logs").iterdir()
    assert kept.read_text().endswith("ready\nsaving before exit\n")


def test_a_process_slime_leaves_behind_does_not_hold_the_launcher(tmp_path: Path) -> None:
    """A grandchild keeps slime's stdout open after slime exits: the launcher still exits."""
    child = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('slime done', flush=True)\n"
    )
    script = DRIVER.replace("log.finish()", "log.finish(drain=1.0)")
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "logs"), child],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sleeper shares the session
    assert proc.returncode == 0
    assert b"still holds its output open" in err
    [kept] = (tmp_path / "logs").iterdir()
    assert "slime done" in kept.read_text()


# ---- the real launcher ------------------------------------------------------------------


def test_the_launcher_keeps_each_attempt_in_its_own_file_without_secrets(
    tmp_path: Path,
) -> None:
    pod = Pod(tmp_path)
    job_log = tmp_path / "job.log"
    env = pod.env(AGENTRL_TEST_TRAIN_PRINT=f"wandb key is {SECRET}", AGENTRL_TEST_TRAIN_EXIT="7")
    for _ in range(2):  # KubeRay's retry starts the launcher again on a new head pod
        with job_log.open("wb") as f:
            proc = subprocess.run(
                pod.command(), check=False, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=300
            )
        assert proc.returncode == 7  # slime's exit code, as with exec
    first, second = pod.log_files()
    assert first.name.startswith("http-agent-attempt-1-")
    assert second.name.startswith("http-agent-attempt-2-")
    text = second.read_text()
    assert text == job_log.read_text()  # the file has exactly what the job log has
    assert f"attempt 2: output also kept in {second}" in text
    assert "first run, from the model; run [" in text  # the launcher's own lines
    assert "stdout: wandb key is <redacted>" in text and "stderr: wandb key is <redacted>" in text
    assert SECRET not in text
    assert pod.recorded()["ppid"] != os.getpid()  # slime ran as the launcher's child


def test_a_secret_loaded_under_an_ordinary_name_is_redacted_too(tmp_path: Path) -> None:
    """spec.runtime.env may load any variable from a Secret (a Sentry DSN, a database URL):
    its value is redacted like the wandb key's, though its name does not look secret."""
    secrets = {
        "SENTRY_DSN": "https://SEKRET-123@o1.ingest.sentry.io/1",
        "DATABASE_URL": "postgres://rl:SEKRET-456@db/rl",
    }
    refs = [
        {"name": n, "valueFrom": {"secretKeyRef": {"name": "app", "key": n.lower()}}}
        for n in secrets
    ]
    pod = Pod(tmp_path, env=[*refs, {"name": "APP_MODE", "value": "plain-value"}])
    said = f"connecting to {secrets['SENTRY_DSN']} and {secrets['DATABASE_URL']} as plain-value"
    done = pod.launch(AGENTRL_TEST_TRAIN_PRINT=said, APP_MODE="plain-value", **secrets)
    assert done.returncode == 0, done.stderr
    [kept] = pod.log_files()
    text = kept.read_text()
    assert "SEKRET" not in text + done.stdout + done.stderr
    assert "stdout: connecting to <redacted> and <redacted> as plain-value" in text
    assert pod.recorded()["env"]["SENTRY_DSN"] == secrets["SENTRY_DSN"]  # slime still has it


def test_a_launch_that_stops_before_slime_is_kept_too(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=["--no-such-flag"])
    done = pod.launch()
    assert done.returncode == 2
    [kept] = pod.log_files()
    assert "slime was not started" in kept.read_text()
    assert kept.read_text() == done.stderr


@pytest.mark.parametrize("mode", ["wait", "save"])
def test_the_launcher_passes_sigterm_to_slime(mode: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    proc = subprocess.Popen(
        pod.command(),
        env=pod.env(AGENTRL_TEST_TRAIN_WAIT=mode),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # the launcher's checks take a few seconds
        if line == b"training (waiting for SIGTERM)\n":
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    [kept] = pod.log_files()
    if mode == "wait":  # slime dies by the signal, so does the launcher
        assert proc.returncode == -signal.SIGTERM
    else:  # slime saves and exits 0
        assert proc.returncode == 0
        assert out == f"got signal {int(signal.SIGTERM)}: saving, then exiting\n".encode()
        assert kept.read_text().endswith(out.decode())


def test_an_unwritable_volume_only_warns_and_preflight_names_the_field(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    pod.checkpoint.parent.mkdir(parents=True)
    pod.checkpoint.write_text("a file where the directory should be")
    done = pod.launch()
    assert done.returncode == 2
    assert "warning: cannot keep a log file in" in done.stderr
    assert "spec.checkpoint.path:" in done.stderr


def test_dry_run_keeps_no_file(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    assert pod.launch("--dry-run").returncode == 0
    assert not (pod.checkpoint / "logs").exists()
