"""`agentrl logs`: which pod and which kubectl command, for every state a run can be in.

Pods are built from the RayJob agentrl renders, labelled as KubeRay and the Job controller
label them (tests/support/kuberay_pods.py, from their source). tests/e2e/test_logs_e2e.py
runs the same against a real kube-apiserver with the real kubectl.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import kuberay_pods  # noqa: E402

from agentrl.api.validation import parse_experiment  # noqa: E402
from agentrl.cli import logs  # noqa: E402
from agentrl.cli.logs import ATTEMPT_SCRIPT, Nothing, Stream, choose  # noqa: E402
from agentrl.cli.main import main  # noqa: E402
from agentrl.render import OperatorDefaults, render_all  # noqa: E402
from conftest import load_example  # noqa: E402

DEFAULTS = OperatorDefaults(image="img@sha256:" + "1" * 64, bundle_version="1.2.3")
BUNDLE = {"agentrl/__init__.py": "x = 1\n"}
NS, NAME = "rl", "qwen3b-gsm8k"
CLUSTER, OLD_CLUSTER = f"{NAME}-f4k2p", f"{NAME}-a1b2c"
JOB_ID = f"{NAME}-9xz7q"
T = "2025-03-04T05:{:02d}:00Z"


def experiment(phase: str = "Running", checkpoint: bool = True, **status: Any) -> dict[str, Any]:
    body = load_example("qwen2.5-3b-gsm8k-agentcore")
    body["metadata"] = {"name": NAME, "namespace": NS}
    if not checkpoint:
        body["spec"].pop("checkpoint", None)
    body["status"] = {
        "phase": phase,
        "rayJobName": NAME,
        "rayClusterName": CLUSTER,
        "attempts": 1,
        **status,
    }
    return body


def rayjob(job_id: str | None = JOB_ID) -> dict[str, Any]:
    exp, problems = parse_experiment(experiment())
    assert exp is not None, problems
    job = render_all(exp, DEFAULTS, BUNDLE).rayjob
    assert job["kind"] == "RayJob"
    job["status"] = {"jobId": job_id} if job_id else {}
    return job


RAYJOB = rayjob()


def running_pods() -> list[dict[str, Any]]:
    return [
        kuberay_pods.head_pod(RAYJOB, CLUSTER, created=T.format(1)),
        kuberay_pods.worker_pod(RAYJOB, CLUSTER, created=T.format(1)),
        kuberay_pods.submitter_pod(RAYJOB, phase="Running", created=T.format(5)),
    ]


def test_while_the_cluster_lives_the_head_pod_gives_the_whole_driver_log() -> None:
    got = choose(experiment(), RAYJOB, running_pods(), attempt=None, follow=True)
    assert isinstance(got, Stream)
    head = f"{CLUSTER}-head-x7k2q"
    assert got.argv == [
        "exec", "-n", NS, head, "-c", "ray-head", "--",
        "ray", "job", "logs", "--address", "http://127.0.0.1:8265", "--follow", JOB_ID,
    ]  # fmt: skip
    assert f"from head pod {head}" in got.note


def test_the_head_of_the_current_cluster_wins_over_a_previous_attempts() -> None:
    old = kuberay_pods.head_pod(RAYJOB, OLD_CLUSTER, suffix="old01", created=T.format(9))
    got = choose(experiment(), RAYJOB, [old, *running_pods()], attempt=None, follow=False)
    assert isinstance(got, Stream) and got.argv[3] == f"{CLUSTER}-head-x7k2q"
    assert "--follow" not in got.argv


def test_after_the_cluster_is_deleted_the_newest_started_submitter_pod() -> None:
    """KubeRay kept the submitter Job; its second pod re-followed the log from the start."""
    first = kuberay_pods.submitter_pod(RAYJOB, suffix="aaaaa", phase="Failed", created=T.format(5))
    second = kuberay_pods.submitter_pod(RAYJOB, suffix="bbbbb", created=T.format(7))
    got = choose(experiment("Succeeded"), RAYJOB, [second, first], attempt=None, follow=True)
    assert isinstance(got, Stream)
    assert got.argv == ["logs", "-n", NS, f"{NAME}-bbbbb", "-c", "ray-job-submitter", "--follow"]
    assert "kubelet keeps the newest 10 MiB" in got.note
    assert f"/checkpoints/qwen3b-gsm8k/logs/{NAME}-attempt-<N>-*.log" in got.note


def test_a_previous_attempts_submitter_pod_being_deleted_is_not_chosen() -> None:
    old = kuberay_pods.submitter_pod(RAYJOB, suffix="old01", created=T.format(1))
    old["metadata"]["deletionTimestamp"] = T.format(8)
    new = kuberay_pods.submitter_pod(RAYJOB, suffix="new01", phase="Running", created=T.format(9))
    got = choose(experiment(), rayjob(None), [old, new], attempt=None, follow=False)
    assert isinstance(got, Stream) and got.argv[3] == f"{NAME}-new01"


def test_a_head_without_a_submitted_job_falls_back_to_the_submitter() -> None:
    got = choose(experiment(), rayjob(None), running_pods(), attempt=None, follow=False)
    assert isinstance(got, Stream) and got.argv[0] == "logs"


def test_a_submitter_that_has_not_started_is_said_so() -> None:
    pending = kuberay_pods.submitter_pod(RAYJOB, phase="Pending", created=T.format(5))
    got = choose(experiment("Initializing"), rayjob(None), [pending], attempt=None, follow=False)
    assert isinstance(got, Nothing)
    assert f"submitter pod {NAME}-s9d8f has not started yet" in got.message


def test_before_the_cluster_is_ready_there_is_no_output_yet() -> None:
    got = choose(experiment("Initializing"), None, [], attempt=None, follow=False)
    assert isinstance(got, Nothing)
    assert "has no driver output yet (phase Initializing)" in got.message
    assert f"kubectl get rlx {NAME} -n {NS} -w" in got.message


def test_after_the_run_nothing_is_left_and_the_volume_file_is_named() -> None:
    got = choose(experiment("Failed", attempts=2), None, [], attempt=None, follow=False)
    assert isinstance(got, Nothing)
    assert "the run ended (Failed)" in got.message
    assert "after spec.ttlSecondsAfterFinished = 0 s, and before each retry" in got.message
    assert f"/checkpoints/qwen3b-gsm8k/logs/{NAME}-attempt-<N>-*.log" in got.message
    assert "(status.attempts: 2)" in got.message


def test_without_a_checkpoint_path_it_says_how_to_keep_output() -> None:
    got = choose(experiment("Succeeded", checkpoint=False), None, [], attempt=None, follow=False)
    assert isinstance(got, Nothing)
    assert "No copy was kept: spec.checkpoint.path is unset" in got.message
    assert "spec.ttlSecondsAfterFinished" in got.message


def test_a_suspended_experiment() -> None:
    got = choose(experiment("Suspended"), None, [], attempt=None, follow=False)
    assert isinstance(got, Nothing)
    assert "it is suspended: KubeRay deleted its Ray cluster and submitter Job" in got.message


def test_attempt_n_reads_its_file_on_the_volume_through_the_head_pod() -> None:
    got = choose(experiment(attempts=2), RAYJOB, running_pods(), attempt=1, follow=False)
    assert isinstance(got, Stream)
    head = f"{CLUSTER}-head-x7k2q"
    assert got.argv == [
        "exec", "-n", NS, head, "-c", "ray-head", "--", "sh", "-c", ATTEMPT_SCRIPT,
        "agentrl-logs", "/checkpoints/qwen3b-gsm8k/logs", NAME, "1", "0", "+1",
    ]  # fmt: skip
    assert got.shown is not None and got.shown[-3:] == [
        "sh", "-c", f"cat /checkpoints/qwen3b-gsm8k/logs/{NAME}-attempt-1-*.log",
    ]  # fmt: skip


def test_attempt_n_without_a_pod_or_without_a_volume() -> None:
    got = choose(experiment("Failed", attempts=2), None, [], attempt=1, follow=False)
    assert isinstance(got, Nothing)
    assert f"/checkpoints/qwen3b-gsm8k/logs/{NAME}-attempt-1-*.log" in got.message
    assert "No pod of rl/qwen3b-gsm8k mounts that volume now" in got.message
    none = choose(experiment(checkpoint=False), RAYJOB, running_pods(), attempt=1, follow=False)
    assert isinstance(none, Nothing) and "spec.checkpoint.path is unset" in none.message


# ---- the script `--attempt` runs in the head container, run here with /bin/sh ----------


def _script(
    logs_dir: Path, attempt: str, follow: str = "0", lines: str = "+1"
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["sh", "-c", ATTEMPT_SCRIPT, "agentrl-logs", str(logs_dir), NAME, attempt, follow, lines],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_attempt_script_prints_that_attempts_file(tmp_path: Path) -> None:
    (tmp_path / f"{NAME}-attempt-1-20250304T050607Z.log").write_text("first\n")
    (tmp_path / f"{NAME}-attempt-12-20250305T050607Z.log").write_text("twelfth\n")
    (tmp_path / "other-attempt-1-20250304T050607Z.log").write_text("not ours\n")
    proc = _script(tmp_path, "1")
    assert proc.communicate(timeout=60) == ("first\n", "")
    missing = _script(tmp_path, "2")
    out, err = missing.communicate(timeout=60)
    assert missing.returncode == 3 and out == ""
    assert err.splitlines() == [
        f"agentrl logs: {tmp_path} holds no log file of attempt 2; it holds:",
        f"{NAME}-attempt-1-20250304T050607Z.log",
        f"{NAME}-attempt-12-20250305T050607Z.log",
    ]


def test_the_attempt_script_follows_a_growing_file(tmp_path: Path) -> None:
    log = tmp_path / f"{NAME}-attempt-3-20250304T050607Z.log"
    log.write_text("one\n")
    proc = _script(tmp_path, "3", follow="1")
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "one\n"
        with log.open("a") as f:
            f.write("two\n")
        assert proc.stdout.readline() == "two\n"
    finally:
        proc.kill()
        proc.wait(60)


# ---- the command line -------------------------------------------------------------------


def test_without_kubectl_on_path_it_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["logs", NAME]) == 1
    err = capsys.readouterr().err
    assert "agentrl logs runs kubectl" in err and "not on PATH" in err


def test_attempt_must_be_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["logs", NAME, "--attempt", "0"])
    assert exc.value.code == 2
    assert "must be a whole number from 1 on, not '0'" in capsys.readouterr().err


def test_kubectl_gets_the_context_on_every_call() -> None:
    kubectl = logs.Kubectl("/usr/bin/kubectl", "lab")
    want = ["/usr/bin/kubectl", "--context", "lab", "get", "pods"]
    assert kubectl.command(["get", "pods"]) == want
    assert logs.Kubectl("kubectl").command(["logs", "p"]) == ["kubectl", "logs", "p"]


# ---- --tail, --since, names and kubectl's own errors (issue 22) ---------------------------


def test_tail_and_since_read_the_submitter_pod_through_kubectl_logs() -> None:
    got = choose(experiment(), RAYJOB, running_pods(), attempt=None, follow=True, tail=20,
                 since="10m")  # fmt: skip
    assert isinstance(got, Stream) and got.argv[0] == "logs"
    assert got.argv[-3:] == ["--follow", "--tail=20", "--since=10m"]


def test_without_a_submitter_the_head_gives_the_tail_alone() -> None:
    head_only = running_pods()[:2]  # head and worker; no submitter pod
    assert len(head_only) == 2
    got = choose(experiment(), RAYJOB, head_only, attempt=None, follow=False, tail=5)
    assert isinstance(got, Stream) and got.argv[-4:] == [
        "agentrl-logs", "http://127.0.0.1:8265", JOB_ID, "5",
    ]  # fmt: skip
    assert got.argv[-5] == logs.HEAD_TAIL_SCRIPT
    since = choose(experiment(), RAYJOB, head_only, attempt=None, follow=False, since="1h")
    assert isinstance(since, Nothing) and "--since needs the submitter pod's log" in since.message


def test_attempt_tail_and_since() -> None:
    got = choose(experiment(attempts=2), RAYJOB, running_pods(), attempt=1, follow=True, tail=3)
    assert isinstance(got, Stream) and got.argv[-2:] == ["1", "3"]
    assert got.shown is not None and got.shown[-1].startswith("tail -n 3 -f ")
    since = choose(experiment(), RAYJOB, running_pods(), attempt=1, follow=False, since="1h")
    assert isinstance(since, Nothing) and "no timestamps" in since.message


def test_the_attempt_script_prints_the_last_lines(tmp_path: Path) -> None:
    (tmp_path / f"{NAME}-attempt-1-20250304T050607Z.log").write_text("a\nb\nc\n")
    assert _script(tmp_path, "1", lines="2").communicate(timeout=60) == ("b\nc\n", "")


@pytest.mark.parametrize("argv", [["--", "--all-namespaces"], ["--", "-l=a"], ["Bad_Name"]])
def test_a_flag_or_a_bad_name_is_no_experiment_name(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`-- --all-namespaces` used to reach kubectl, which listed every experiment, and the
    CLI then crashed reading the list as one (KeyError: 'namespace')."""
    with pytest.raises(SystemExit) as exc:
        main(["logs", *argv])
    assert exc.value.code == 2 and "is not an RLExperiment name" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--tail", "-3"), ("--since", "ten minutes")])
def test_tail_and_since_are_checked(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    with pytest.raises(SystemExit):
        main(["logs", NAME, flag, value])
    assert flag.removeprefix("--") in capsys.readouterr().err


def _fake_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str) -> Path:
    """The only kubectl on PATH: it fails with `stderr`, and writes each call's arguments to
    the file returned, which stays absent when nothing called it."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "kubectl"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho '{stderr}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    return calls


# A cluster that is down, as kubectl says it.
REFUSED = "The connection to the server 127.0.0.1:1 was refused"


@pytest.mark.parametrize("kubectl", ["recording", "absent"])
def test_since_with_attempt_is_refused_before_kubectl_is_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kubectl: str,
) -> None:  # fmt: skip
    """The refusal came from `choose`, after `kubectl get` of the experiment, its pods and its
    RayJob: with no cluster the user saw the connection error instead, and with one it cost
    three round trips. The command line is wrong whatever the cluster holds: exit 2 (as
    argparse's), and kubectl is never run, nor even looked for."""
    calls = _fake_kubectl(tmp_path, monkeypatch, REFUSED)
    if kubectl == "absent":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["logs", NAME, "-n", NS, "--attempt", "2", "--since", "10m"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --since cannot go with --attempt 2: attempt files carry no timestamps; use "
        "--tail N for the file's last lines, or drop --attempt to read the current run's log "
        "with --since\n"
    )
    assert not calls.exists()


@pytest.mark.parametrize("namespace", ["Prod", "team_a", "--namespace=-A", "a" * 64])
def test_a_namespace_that_cannot_exist_is_refused_before_kubectl_is_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    namespace: str,
) -> None:  # fmt: skip
    """kubectl takes any word for -n to the API server: with no cluster the connection error
    came first, and with one the answer was `experiment Prod/NAME not found`, which does not
    say the namespace is no namespace name."""
    calls = _fake_kubectl(tmp_path, monkeypatch, REFUSED)
    argv = [namespace] if namespace.startswith("--") else ["-n", namespace]
    with pytest.raises(SystemExit) as exc:
        main(["logs", NAME, *argv])
    assert exc.value.code == 2
    shown = namespace.removeprefix("--namespace=")
    assert f"argument -n/--namespace: {shown!r} is not a namespace name" in capsys.readouterr().err
    assert not calls.exists()


def test_a_command_line_that_is_right_reaches_kubectl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fake kubectl records: --attempt with --tail goes to the cluster."""
    calls = _fake_kubectl(tmp_path, monkeypatch, REFUSED)
    assert main(["logs", NAME, "-n", NS, "--attempt", "2", "--tail", "5"]) == 1
    assert "cannot reach the cluster's API server" in capsys.readouterr().err
    assert calls.read_text().startswith(f"get rlexperiments.agentrl.io {NAME} -n {NS}")


def test_an_unknown_context_is_kubectls_error_not_a_missing_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_kubectl(tmp_path, monkeypatch, "error: context was not found for specified context: nope")
    assert main(["logs", NAME, "--context", "nope"]) == 1
    err = capsys.readouterr().err
    assert "context was not found for specified context: nope" in err
    assert "not found. A deleted" not in err


def test_a_missing_experiment_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f'Error from server (NotFound): rlexperiments.agentrl.io "{NAME}" not found'
    _fake_kubectl(tmp_path, monkeypatch, missing)
    assert main(["logs", NAME, "-n", NS]) == 1
    assert f"experiment {NS}/{NAME} not found. A deleted" in capsys.readouterr().err


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs the real kubectl")
@pytest.mark.parametrize("kubeconfig", [True, False])
def test_an_unreachable_cluster_is_said_once_with_kubectls_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kubeconfig: bool,
) -> None:  # fmt: skip
    """The real kubectl against an API server that refuses connections (and without any
    kubeconfig, when it tries localhost:8080): agentrl logs printed kubectl's stderr as it
    came, client-go's discovery error over and over, then `error: kubectl get rlx NAME:`.
    Now one line says the cluster is unreachable, kubectl's own reason in it, and what to
    check."""
    import socket

    if not kubeconfig and socket.socket().connect_ex(("127.0.0.1", 8080)) == 0:
        pytest.skip("something listens on localhost:8080, kubectl's default server")
    server = f"127.0.0.1:{_closed_port()}"
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        f"clusters: [{{name: lab, cluster: {{server: 'https://{server}'}}}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: me}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config) if kubeconfig else str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    assert main(["logs", NAME]) == 1
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    shown = server if kubeconfig else "localhost:8080"
    assert line.startswith(
        f"error: agentrl logs cannot reach the cluster's API server (The connection to the "
        f"server {shown} was refused - did you specify the right host or port?); "
    )
    if kubeconfig:
        assert "your current context points at it" in line
        assert "`kubectl cluster-info`; pass --context to use another" in line
    else:
        assert "set KUBECONFIG (or create ~/.kube/config) for your cluster" in line
