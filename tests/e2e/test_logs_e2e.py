"""`agentrl logs` against a real kube-apiserver, with the real kubectl and a kubeconfig.

The experiment, its RayJob (as agentrl renders it) and pods labelled as KubeRay and the Job
controller label them (tests/support/kuberay_pods.py) live on the apiserver; the CLI runs as
a subprocess and finds them with the real `kubectl get`. The test control plane has no
kubelet, so `kubectl logs` and `kubectl exec` cannot return content: a TEST DOUBLE named
`kubectl` stands first on PATH, records the argv of those two verbs and prints a canned
line, and hands every other command to the real kubectl.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import kuberay_pods
from tests.support.kube import KubeHarness, kubectl_binary

from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, render_all

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen2.5-3b-gsm8k-agentcore.yaml"
NS = "logs-e2e"
NAME = "qwen3b-gsm8k"
CLUSTER = f"{NAME}-f4k2p"
JOB_ID = f"{NAME}-9xz7q"
CANNED = "canned driver output from the kubectl test double"
DOUBLE = f'''\
#!{sys.executable}
"""TEST DOUBLE for kubectl: `logs` and `exec` need a kubelet, which the test control plane
lacks; they are recorded and answered with a canned line. Anything else: the real kubectl."""
import json, os, sys
args = sys.argv[1:]
rest = args[2:] if args[:1] == ["--context"] else args
if rest and rest[0] in ("logs", "exec"):
    with open(os.environ["AGENTRL_KUBECTL_RECORD"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    print({CANNED!r})
    sys.exit(0)
real = os.environ["AGENTRL_REAL_KUBECTL"]
os.execv(real, [real, *args])
'''


@pytest.fixture(scope="module")
def kube(kube_harness: KubeHarness) -> Iterator[KubeHarness]:
    kube_harness.ensure_namespace(NS)
    # Pods are refused without their ServiceAccount (no controller-manager makes "default";
    # the example's pods run as agentrl-runner).
    for sa in ("default", "agentrl-runner"):
        if kube_harness.kubectl("get", "sa", sa, "-n", NS, check=False).returncode:
            kube_harness.kubectl("create", "serviceaccount", sa, "-n", NS)
    yield kube_harness
    kube_harness.kubectl("delete", "namespace", NS, "--wait=false", check=False)


@pytest.fixture(scope="module")
def rayjob() -> dict[str, Any]:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": NAME, "namespace": NS}
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    defaults = OperatorDefaults(image="img@sha256:" + "1" * 64, bundle_version="1.2.3")
    job: dict[str, Any] = render_all(exp, defaults, {"agentrl/__init__.py": ""}).rayjob
    return job


class Cli:
    def __init__(self, kube: KubeHarness, tmp: Path) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "kubectl").write_text(DOUBLE)
        (self.bin / "kubectl").chmod(0o755)
        self.record = tmp / "kubectl-calls.jsonl"
        self.env = {
            "PATH": f"{self.bin}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "KUBECONFIG": str(kube.kubeconfig),
            "AGENTRL_KUBECTL_RECORD": str(self.record),
            "AGENTRL_REAL_KUBECTL": kubectl_binary(),
            "HOME": str(tmp),
            # This checkout's agentrl, not whichever one the venv installed.
            "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}",
        }

    def run(self, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentrl.cli.main", "logs", *argv],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def calls(self) -> list[list[str]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


@pytest.fixture
def cli(kube: KubeHarness, tmp_path: Path) -> Cli:
    return Cli(kube, tmp_path)


def _experiment(kube: KubeHarness, phase: str, attempts: int = 1) -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": NAME, "namespace": NS}
    kube.apply(body)
    status = {
        "phase": phase,
        "rayJobName": NAME,
        "rayClusterName": CLUSTER,
        "attempts": attempts,
    }
    kube.kubectl("patch", "rlx", NAME, "-n", NS, "--subresource=status", "--type=merge",
                 "-p", json.dumps({"status": status}))  # fmt: skip


def _rayjob(kube: KubeHarness, rayjob: dict[str, Any], job_id: str | None) -> None:
    kube.apply(rayjob)
    if job_id:
        kube.kubectl("patch", "rayjob", NAME, "-n", NS, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"jobId": job_id}}))  # fmt: skip


def _pods(kube: KubeHarness, *pods: dict[str, Any]) -> None:
    for pod in pods:
        status = pod.pop("status")
        pod["metadata"].pop("creationTimestamp")  # the apiserver sets it
        kube.apply(pod)
        kube.kubectl("patch", "pod", pod["metadata"]["name"], "-n", NS, "--subresource=status",
                     "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip


def _clean(kube: KubeHarness) -> None:
    for kind in ("pods", "rayjobs.ray.io", "rlexperiments.agentrl.io"):
        kube.kubectl("delete", kind, "--all", "-n", NS, "--grace-period=0", "--force",
                     "--wait=true", check=False)  # fmt: skip


def test_a_running_experiment_streams_the_head_pods_driver_log(
    kube: KubeHarness, rayjob: dict[str, Any], cli: Cli
) -> None:
    _clean(kube)
    _experiment(kube, "Running")
    _rayjob(kube, rayjob, JOB_ID)
    head = kuberay_pods.head_pod(rayjob, CLUSTER)
    _pods(
        kube,
        head,
        kuberay_pods.worker_pod(rayjob, CLUSTER),
        kuberay_pods.submitter_pod(rayjob, phase="Running"),
    )
    done = cli.run(NAME, "-n", NS, "--follow")
    assert done.returncode == 0, done.stderr
    assert done.stdout == CANNED + "\n"  # stdout is the log only; the note is on stderr
    assert f"driver output of Ray job {JOB_ID}, from head pod {CLUSTER}-head-x7k2q" in done.stderr
    assert cli.calls() == [
        ["exec", "-n", NS, f"{CLUSTER}-head-x7k2q", "-c", "ray-head", "--", "ray", "job", "logs",
         "--address", "http://127.0.0.1:8265", "--follow", JOB_ID],
    ]  # fmt: skip

    attempt = cli.run(NAME, "-n", NS, "--attempt", "1")
    assert attempt.returncode == 0, attempt.stderr
    call = cli.calls()[-1]
    assert call[:7] == ["exec", "-n", NS, f"{CLUSTER}-head-x7k2q", "-c", "ray-head", "--"]
    assert call[-5:] == ["/checkpoints/qwen3b-gsm8k/logs", NAME, "1", "0", "+1"]


def test_after_the_cluster_is_deleted_the_submitter_pod_is_read(
    kube: KubeHarness, rayjob: dict[str, Any], cli: Cli
) -> None:
    _clean(kube)
    _experiment(kube, "Succeeded")
    _rayjob(kube, rayjob, JOB_ID)
    _pods(
        kube,
        kuberay_pods.submitter_pod(rayjob, suffix="aaaaa", phase="Failed"),
        kuberay_pods.submitter_pod(rayjob, suffix="bbbbb", phase="Succeeded"),
    )
    done = cli.run(NAME, "-n", NS)
    assert done.returncode == 0, done.stderr
    assert done.stdout == CANNED + "\n"
    [call] = cli.calls()
    assert call[:2] == ["logs", "-n"] and call[-2:] == ["-c", "ray-job-submitter"]
    # Both pods were created within the same second; the newer one by name order wins then.
    assert call[3] == f"{NAME}-bbbbb"


def test_when_nothing_is_left_it_says_why_and_where_the_files_are(
    kube: KubeHarness, rayjob: dict[str, Any], cli: Cli
) -> None:
    _clean(kube)
    _experiment(kube, "Failed", attempts=2)
    done = cli.run(NAME, "-n", NS)
    assert done.returncode == 1
    assert "the run ended (Failed)" in done.stderr
    assert f"/checkpoints/qwen3b-gsm8k/logs/{NAME}-attempt-<N>-*.log" in done.stderr
    assert cli.calls() == []


def test_a_missing_experiment_and_a_context(kube: KubeHarness, cli: Cli, tmp_path: Path) -> None:
    _clean(kube)
    gone = cli.run("no-such-experiment", "-n", NS)
    assert gone.returncode == 1
    assert "experiment logs-e2e/no-such-experiment not found" in gone.stderr
    where = "<spec.checkpoint.path>/logs/no-such-experiment-attempt-<N>-<UTC time>.log"
    assert where in gone.stderr
    # A kubeconfig whose current context is unreachable; --context picks the real one.
    config = yaml.safe_load(Path(cli.env["KUBECONFIG"]).read_text())
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"].append({"name": "nowhere", "context": {"cluster": "nowhere", "user": "e2e"}})
    config["current-context"] = "nowhere"
    kubeconfig = tmp_path / "two-contexts"
    kubeconfig.write_text(yaml.safe_dump(config))
    unreachable = cli.run("no-such-experiment", "-n", NS, KUBECONFIG=str(kubeconfig))
    assert unreachable.returncode == 1
    # Said once, with kubectl's own reason and the way to the reachable context.
    said = unreachable.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("error: agentrl logs cannot reach"), said
    assert "127.0.0.1:1 was refused" in said[0] and "--context" in said[0]
    picked = cli.run("no-such-experiment", "-n", NS, "--context", "e2e", KUBECONFIG=str(kubeconfig))
    assert "not found" in picked.stderr  # reached the apiserver through the named context


def test_an_experiment_in_another_namespace_than_the_contexts_is_found_with_n(
    kube: KubeHarness, cli: Cli, tmp_path: Path
) -> None:
    # The harness's kubeconfig context sets no namespace, as many do: kubectl looks in
    # `default`, and the error must say so and give the fix, not call the experiment deleted.
    _clean(kube)
    _experiment(kube, "Running")
    missed = cli.run(NAME)
    assert missed.returncode == 1
    assert missed.stderr.count("\n") == 1 and "Traceback" not in missed.stderr
    assert f"experiment {NAME} not found in namespace default" in missed.stderr
    assert "pass -n NAMESPACE" in missed.stderr and "kubectl get rlx -A" in missed.stderr
    # A context that names a namespace: the error names that one.
    config = yaml.safe_load(Path(cli.env["KUBECONFIG"]).read_text())
    config["contexts"][0]["context"]["namespace"] = "team-a"
    kubeconfig = tmp_path / "with-namespace"
    kubeconfig.write_text(yaml.safe_dump(config))
    other = cli.run(NAME, KUBECONFIG=str(kubeconfig))
    assert f"experiment {NAME} not found in namespace team-a" in other.stderr


def test_a_user_without_read_access_is_told_which_role_to_ask_for(
    kube: KubeHarness, cli: Cli
) -> None:
    _clean(kube)
    _experiment(kube, "Running")
    denied = cli.run(NAME, "-n", NS, KUBECONFIG=str(kube.user_kubeconfig("logs-e2e-nobody")))
    assert denied.returncode == 1
    assert denied.stderr.count("\n") == 1 and "Traceback" not in denied.stderr
    assert "(Forbidden)" in denied.stderr and "ask for the `view` role" in denied.stderr
