"""The operator on a real kube-apiserver, under the chart's RBAC, driven like KubeRay would.

Every example is applied with kubectl; the operator (a `python -m agentrl.controller`
subprocess authenticated as the chart's ServiceAccount) must create exactly one owned set of
children, and `kubectl get rlx` must show the truth as the RayJob's status is patched
through KubeRay's transitions. There is no kube-controller-manager and no KubeRay here, so
ownerReferences are asserted (not garbage collection), and RayJob status is patched by hand.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import example_paths, example_policy, minimal_body
from tests.support.kube import KubeHarness

from agentrl.api.constants import LABEL_EXPERIMENT

from .operator_process import OperatorProcess, install_chart_rbac

pytestmark = pytest.mark.e2e
WAIT = 90.0
METRICS = """\
# TYPE agentrl_rollout_step gauge
agentrl_rollout_step 7
# TYPE agentrl_batch_reward_mean gauge
agentrl_batch_reward_mean{split="train"} 0.75
agentrl_batch_reward_mean{split="gsm8k"} 0.5
# TYPE agentrl_episodes_total counter
agentrl_episodes_total{split="train",outcome="succeeded"} 45
agentrl_episodes_total{split="train",outcome="failed"} 5
# TYPE agentrl_failed_sessions_total counter
agentrl_failed_sessions_total{split="train",reason="timeout"} 5
"""


def wait(probe: Callable[[], Any], what: str, limit: float = WAIT) -> Any:
    """Poll until `probe()` is truthy; bounded, never a timing assertion."""
    deadline = time.monotonic() + limit
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = METRICS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def metrics_url() -> Iterator[str]:
    """Stands in for each experiment's head-pod metrics Service (a real Prometheus text GET)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{{namespace}}/{{name}}/metrics"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def operator(
    kube_harness: KubeHarness, tmp_path_factory: pytest.TempPathFactory, metrics_url: str
) -> Iterator[OperatorProcess]:
    kubeconfig = install_chart_rbac(kube_harness)
    proc = OperatorProcess(
        kubeconfig,
        tmp_path_factory.mktemp("operator"),
        AGENTRL_METRICS_URL=metrics_url,
        AGENTRL_POLICY=json.dumps(example_policy()),  # what the examples need
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(proc.logs()[-3000:])


def experiment(kube: KubeHarness, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = kube.kubectl_json("get", "rlx", name, "-n", ns)
    return obj


def status(kube: KubeHarness, ns: str, name: str) -> dict[str, Any]:
    return dict(experiment(kube, ns, name).get("status") or {})


def condition(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or () if c["type"] == ctype), {})


def children(kube: KubeHarness, ns: str, name: str) -> list[dict[str, Any]]:
    got = kube.kubectl_json(
        "get", "configmaps,services,rayjobs.ray.io", "-n", ns, "-l", f"{LABEL_EXPERIMENT}={name}"
    )
    return list(got["items"])


def events(kube: KubeHarness, ns: str, name: str) -> list[dict[str, Any]]:
    got = kube.kubectl_json(
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        f"involvedObject.name={name},involvedObject.kind=RLExperiment",
    )
    # resourceVersion orders them (creationTimestamp has one-second resolution).
    return sorted(got["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))


def reasons_become(kube: KubeHarness, ns: str, name: str, want: Callable[[list[str]], bool],
                   what: str) -> list[str]:  # fmt: skip
    """The operator posts an event right after the status write it describes: a test that
    has seen the status must still wait for the event."""
    found: list[str] = wait(
        lambda: want(r := [e["reason"] for e in events(kube, ns, name)]) and r, what=what
    )
    return found


def patch_rayjob_status(kube: KubeHarness, ns: str, name: str, st: dict[str, Any]) -> None:
    kube.kubectl(
        "patch",
        "rayjobs.ray.io",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": st}),
    )


# KubeRay's own sequence for a job that succeeds on its second attempt.
KUBERAY_TRANSITIONS = [
    ({"jobDeploymentStatus": "Initializing", "rayClusterName": "c-1"}, "Initializing"),
    (
        {
            "jobDeploymentStatus": "Running",
            "jobStatus": "PENDING",
            "dashboardURL": "d-head-svc:8265",
            "startTime": "2026-01-01T00:00:00Z",
        },
        "Running",
    ),
    ({"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED", "failed": 1}, "Initializing"),
    (
        {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": "c-2"},
        "Running",
    ),
    (
        {
            "jobDeploymentStatus": "Complete",
            "jobStatus": "SUCCEEDED",
            "succeeded": 1,
            "endTime": "2026-01-01T05:00:00Z",
        },
        "Succeeded",
    ),
]


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_example_lifecycle(
    kube_harness: KubeHarness, operator: OperatorProcess, path: Path
) -> None:
    kube = kube_harness
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    kube.ensure_namespace(ns)
    kube.kubectl("apply", "-f", str(path))
    st = wait(
        lambda: status(kube, ns, name).get("rayJobName") and status(kube, ns, name),
        what=f"{name} created",
    )
    uid = experiment(kube, ns, name)["metadata"]["uid"]
    assert st["phase"] == "Pending" and condition(st, "Valid")["status"] == "True"
    kids = children(kube, ns, name)
    assert sorted(k["kind"] for k in kids) == ["ConfigMap"] * 2 + ["RayJob"] + ["Service"] * 2
    for kid in kids:
        (ref,) = kid["metadata"]["ownerReferences"]
        assert (ref["uid"], ref["kind"], ref["controller"]) == (uid, "RLExperiment", True)
    table = kube.kubectl("get", "rlx", name, "-n", ns).stdout.split("\n")
    assert table[0].split() == ["NAME", "PHASE", "ROLLOUT", "REWARD", "EVAL", "RECENT", "FAIL",
                                "RATIO", "AGE"]  # fmt: skip
    done = f"8/{doc['spec']['grpo']['numRollouts']}"  # rollout id 7 is the 8th
    assert table[1].split()[:2] == [name, "Pending"]
    for rj_status, phase in KUBERAY_TRANSITIONS:
        patch_rayjob_status(kube, ns, name, rj_status)
        wait(
            lambda p=phase: status(kube, ns, name).get("phase") == p,  # type: ignore[misc]
            what=f"{name}: {rj_status['jobDeploymentStatus']} -> {phase}",
        )
        if phase == "Running":  # progress is scraped while running, shown by kubectl get
            row = wait(
                lambda: (
                    (r := kube.kubectl("get", "rlx", name, "-n", ns).stdout.split("\n")[1].split())[
                        2
                    ]
                    == done
                    and r
                ),
                what="progress column",
            )
            assert row[1:6] == ["Running", done, "0.75", "0.5", "0.1"]
    st = status(kube, ns, name)
    assert condition(st, "Succeeded")["status"] == "True"
    assert st["attempts"] == 2 and st["rayClusterName"] == "c-2"
    assert (
        st["dashboardURL"] == "d-head-svc:8265" and st["completionTime"] == "2026-01-01T05:00:00Z"
    )
    assert all(c.get("observedGeneration") == 1 for c in st["conditions"])
    journey = ["Initializing", "Running", "AttemptFailed", "Initializing", "Running",
               "Succeeded"]  # fmt: skip
    reasons_become(kube, ns, name, lambda r: r == journey, what=f"{name} events {journey}")
    # A stale RayJob update after the end changes nothing (terminal phases are sticky).
    patch_rayjob_status(kube, ns, name, {"jobDeploymentStatus": "Running"})
    st = wait(
        lambda: (s := status(kube, ns, name))["rayJob"]["jobDeploymentStatus"] == "Running" and s,
        what="stale update mirrored",
    )
    assert st["phase"] == "Succeeded"
    kube.kubectl("delete", "rlx", name, "-n", ns, "--wait=true", "--timeout=60s")
    gone = kube.kubectl("get", "rlx", name, "-n", ns, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_invalid_spec_and_immutable_fields(
    kube_harness: KubeHarness, operator: OperatorProcess
) -> None:
    kube, ns = kube_harness, "e2e-rules"
    kube.ensure_namespace(ns)
    bad = minimal_body(
        grpo={"numRollouts": 10, "rolloutBatchSize": 3, "samplesPerPrompt": 8, "globalBatchSize": 5}
    )
    bad["metadata"] = {"name": "bad", "namespace": ns}
    kube.apply(bad)
    st = wait(
        lambda: status(kube, ns, "bad").get("phase") == "Failed" and status(kube, ns, "bad"),
        what="invalid spec fails",
    )
    assert "spec.grpo.globalBatchSize" in condition(st, "Valid")["message"]
    assert children(kube, ns, "bad") == []
    reasons_become(kube, ns, "bad", lambda r: r == ["InvalidSpec"], what="one InvalidSpec event")

    good = minimal_body()
    good["metadata"] = {"name": "good", "namespace": ns}
    kube.apply(good)
    wait(lambda: status(kube, ns, "good").get("rayJobName"), what="good created")
    job = kube.kubectl_json("get", "rayjobs.ray.io", "good", "-n", ns)
    # 1.20 has no CEL, so the apiserver accepts this; the operator must refuse it.
    kube.kubectl(
        "patch",
        "rlx",
        "good",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"model": {"path": "Qwen/Qwen3-8B"}, "suspend": True}}),
    )
    st = wait(
        lambda: (
            condition(status(kube, ns, "good"), "ImmutableFieldChanged").get("status") == "True"
            and status(kube, ns, "good")
        ),
        what="immutable refused",
    )
    assert "spec.model" in condition(st, "ImmutableFieldChanged")["message"]
    after = kube.kubectl_json("get", "rayjobs.ray.io", "good", "-n", ns)
    assert after["spec"]["rayClusterSpec"] == job["spec"]["rayClusterSpec"]
    assert after["spec"]["suspend"] is True  # the lifecycle part of the edit still applies
    reasons_become(kube, ns, "good", lambda r: "ImmutableFieldChanged" in r, what="refusal event")
    # Seconds and several sweeps later, the invalid spec still has its one event: no retries.
    assert [e["reason"] for e in events(kube, ns, "bad")] == ["InvalidSpec"]


def test_pods_kuberay_cannot_create_stall_the_experiment(
    kube_harness: KubeHarness, operator: OperatorProcess
) -> None:
    """KubeRay's ReplicaFailure, written into the RayJob's status the way KubeRay v1.6 mirrors
    the RayCluster's, survives the real CRD's schema and makes the experiment Stalled."""
    kube, ns, name = kube_harness, "e2e-replica-failure", "nopods"
    kube.ensure_namespace(ns)
    body = minimal_body()
    body["metadata"] = {"name": name, "namespace": ns}
    kube.apply(body)
    wait(lambda: status(kube, ns, name).get("rayJobName"), what="RayJob created")
    refusal = (f'FailedCreateWorkerPod\npods "{name}-raycluster-x7k2q-gpu-worker-abcde" is '
               "forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=8, used: "
               "requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4")  # fmt: skip
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateWorkerPod",
               "message": refusal, "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    patch_rayjob_status(kube, ns, name, {
        "jobDeploymentStatus": "Initializing", "rayClusterName": f"{name}-raycluster-x7k2q",
        "rayClusterStatus": {"conditions": [failure]},
    })  # fmt: skip
    st = wait(lambda: condition(s := status(kube, ns, name), "Stalled").get("status") == "True"
              and s, what="Stalled")  # fmt: skip
    cond = condition(st, "Stalled")
    assert cond["reason"] == "FailedCreateWorkerPod" and "exceeded quota: gpus" in cond["message"]
    reasons_become(kube, ns, name, lambda r: "Stalled" in r, what="the Stalled event")


# KubeRay v1.6.2's two writes of a stopped Ray job (rayjob_controller.go): with the submitter
# finished, Ray's message and no reason; past the transition grace period, its own words.
STOPPED_WRITES = {
    "submitter-finished": {"message": "Job was intentionally stopped."},
    "grace-period": {
        "reason": "JobDeploymentStatusTransitionGracePeriodExceeded",
        "message": "JobDeploymentStatus does not transition to Complete or Failed within the "
        "grace period after JobStatus reaches a terminal state.",
    },
}


@pytest.mark.parametrize("how", list(STOPPED_WRITES))
def test_a_stopped_ray_job_says_so(
    kube_harness: KubeHarness, operator: OperatorProcess, how: str
) -> None:
    """`ray job stop` under a running experiment, as KubeRay writes it through its real CRD:
    Failed with reason JobStopped, a message saying the job was stopped and is not retried
    with KubeRay's or Ray's words, and one Warning event `Failed` saying the same."""
    kube, ns, name = kube_harness, "e2e-stopped", f"stopped-{how}"
    kube.ensure_namespace(ns)
    body = minimal_body()
    body["metadata"] = {"name": name, "namespace": ns}
    kube.apply(body)
    wait(lambda: status(kube, ns, name).get("rayJobName"), what="RayJob created")
    patch_rayjob_status(kube, ns, name, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    wait(lambda: status(kube, ns, name).get("phase") == "Running", what="Running")
    written = STOPPED_WRITES[how]
    patch_rayjob_status(kube, ns, name, {"jobDeploymentStatus": "Complete",
                                         "jobStatus": "STOPPED", **written})  # fmt: skip
    st = wait(lambda: (s := status(kube, ns, name)).get("phase") == "Failed" and s,
              what="Failed")  # fmt: skip
    failed = condition(st, "Failed")
    assert failed["reason"] == "JobStopped"
    assert failed["message"].startswith("Ray reports the job STOPPED: it was stopped before it "
                                        "ended")  # fmt: skip
    assert "KubeRay does not retry a stopped job" in failed["message"]
    assert written["message"] in failed["message"]
    assert written.get("reason", "Ray:") in failed["message"]
    reasons_become(kube, ns, name, lambda r: "Failed" in r, what="the Failed event")
    (event,) = [e for e in events(kube, ns, name) if e["reason"] == "Failed"]
    assert event["type"] == "Warning"
    assert event["message"] == f"phase Running -> Failed (JobStopped): {failed['message']}"
