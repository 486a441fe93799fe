"""checkov on what agentrl puts on a cluster: zero failures beyond short, justified skip lists.

Two runs (checkov is slow on 2 cores): the chart's default install, and every example
experiment as the operator renders it, with each pod template of its RayJob written as the Pod
KubeRay creates from it. The runs are without skips, so a skip that no longer triggers shows up
as a failure here and gets removed.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from chart_helpers import MONITORING_API, NAMESPACE, OPERATOR_IMAGE, RELEASE, ROOT, run_helm

from agentrl.api.constants import LABEL_COMPONENT
from agentrl.api.policy import load_policy
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, render_all
from conftest import TEST_IMAGE, example_paths, example_policy, load_example, minimal_body
from kube_checks import pod_templates

# check id -> why the chart cannot or should not satisfy it.
JUSTIFIED_SKIPS = {
    # The operator is a Kubernetes client: it authenticates with its ServiceAccount token.
    "CKV_K8S_38": "the operator needs its ServiceAccount token to talk to the API server",
    # Which peers reach the operator (Prometheus namespace, kubelet probes) and which API
    # server address it egresses to are cluster-specific; platform teams own NetworkPolicies.
    "CKV2_K8S_6": "NetworkPolicies depend on the cluster's CNI and Prometheus placement",
}


# check id -> why the Ray pods of an experiment cannot or should not satisfy it.
RAY_POD_SKIPS = {
    # KubeRay adds exec probes (raylet and GCS health) to the head and workers as it creates
    # them; the submitter runs `ray job submit` to completion, where probes mean nothing.
    "CKV_K8S_8": "KubeRay adds the liveness probes; the submitter is a run-to-completion pod",
    "CKV_K8S_9": "KubeRay adds the readiness probes; the submitter is a run-to-completion pod",
    # slime's image runs as root and keeps slime and Megatron-LM under /root.
    "CKV_K8S_23": "slime's image runs as root (its code lives under /root)",
    "CKV_K8S_40": "slime's image runs as root (its code lives under /root)",
    # Triton, FlashInfer, DeepGEMM and torch extensions compile kernels into home-directory
    # caches at run time; Ray keeps its session under /tmp.
    "CKV_K8S_22": "JIT kernel caches and Ray's session directory are written at run time",
    # W&B reads WANDB_API_KEY from the environment, and the agent's HTTP headers reach it the
    # same way; the values come from secretKeyRef, never a ConfigMap.
    "CKV_K8S_35": "W&B and the HTTP agent client read their secrets from env (secretKeyRef)",
    # Only GPU workers with an RDMA device (the EFA example), and only where the policy allows.
    "CKV_K8S_25": "IPC_LOCK on GPU workers with RDMA devices, which pin registered memory",
    # Which peers reach the head (agents, KubeRay, Prometheus) is cluster-specific.
    "CKV2_K8S_6": "NetworkPolicies depend on the cluster's CNI and where agents run",
}
# The hardening itself: these pass on every Ray pod, whatever the example.
RAY_POD_MUST_PASS = {
    "CKV_K8S_16", "CKV_K8S_17", "CKV_K8S_18", "CKV_K8S_19",  # privileged, host namespaces
    "CKV_K8S_20",  # allowPrivilegeEscalation: false
    "CKV_K8S_26", "CKV_K8S_27",  # no hostPort, no docker socket
    "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_39",  # NET_RAW dropped, drop ALL, no SYS_ADMIN
    "CKV_K8S_29", "CKV_K8S_30", "CKV_K8S_31",  # security contexts, seccomp RuntimeDefault
    "CKV_K8S_38",  # no ServiceAccount token
    "CKV_K8S_43",  # image pinned by digest
}  # fmt: skip


def run_checkov(manifest: Path) -> dict[str, Any]:
    checkov = Path(sys.executable).parent / "checkov"
    # --skip-download: no calls home (there is no network here, and CI needs none).
    flags = ["--framework", "kubernetes", "--compact", "--skip-download"]
    proc = subprocess.run(
        [str(checkov), "-f", str(manifest), *flags, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def test_checkov_finds_nothing_beyond_the_justified_skips(tmp_path: Path) -> None:
    manifest = tmp_path / "agentrl.yaml"
    args = ["template", RELEASE, str(ROOT / "charts" / "agentrl"), "-n", NAMESPACE]
    manifest.write_text(
        run_helm("helm3", *args, *OPERATOR_IMAGE, "--api-versions", MONITORING_API).stdout
    )
    report = run_checkov(manifest)
    failed = sorted({c["check_id"] for c in report["results"]["failed_checks"]})
    assert failed == sorted(JUSTIFIED_SKIPS), report["results"]["failed_checks"]
    assert report["summary"]["parsing_errors"] == 0
    # It really looked: Deployment, Service, RBAC, ... were checked, not an empty file.
    assert report["summary"]["passed"] > 50
    assert report["summary"]["resource_count"] >= 10


def experiment_objects(body: dict[str, Any], policy: object, tag: str) -> list[dict[str, Any]]:
    """The operator's objects for one experiment, its pod templates as the Pods KubeRay makes."""
    exp, problems = parse_experiment(body, policy)  # type: ignore[arg-type]
    assert exp is not None, problems
    kids = render_all(exp, OperatorDefaults(image=TEST_IMAGE), {"agentrl/__init__.py": "x = 1\n"})
    out = list(kids.prerequisites)
    for template in pod_templates(kids.rayjob):
        meta = dict(template["metadata"])
        meta.update(
            name=f"{tag}-{meta['labels'][LABEL_COMPONENT]}", namespace=exp.metadata.namespace
        )
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
    return out


def test_checkov_on_the_ray_pods_of_every_example(tmp_path: Path) -> None:
    policy = load_policy(example_policy(), "examples/platform/policy.yaml")
    docs = [o for p in example_paths() for o in experiment_objects(load_example(p.stem), policy,
                                                                   p.stem)]  # fmt: skip
    # What the policy is there to stop, rendered without one: checkov must see it too.
    sock = {"name": "sock", "hostPath": {"path": "/var/run/docker.sock"}}
    unchecked = minimal_body(runtime={"volumes": [sock], "volumeMounts": [
        {"name": "sock", "mountPath": "/var/run/docker.sock"}]})  # fmt: skip
    docs += experiment_objects(unchecked, None, "unchecked")
    manifest = tmp_path / "experiments.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    report = run_checkov(manifest)
    assert report["summary"]["parsing_errors"] == 0
    failed: dict[str, set[str]] = collections.defaultdict(set)
    passed: dict[str, set[str]] = collections.defaultdict(set)
    for check in report["results"]["failed_checks"]:
        failed[check["resource"]].add(check["check_id"])
    for check in report["results"]["passed_checks"]:
        passed[check["resource"]].add(check["check_id"])
    pods = [r for r in passed if r.startswith("Pod.") and ".unchecked-" not in r]
    assert len(pods) == 3 * len(example_paths())  # head, workers, submitter of each
    for pod in pods:
        assert failed[pod] <= set(RAY_POD_SKIPS), (pod, failed[pod] - set(RAY_POD_SKIPS))
        assert passed[pod] >= RAY_POD_MUST_PASS, (pod, RAY_POD_MUST_PASS - passed[pod])
    assert set().union(*(failed[p] for p in pods)) == set(RAY_POD_SKIPS)
    capability_adds = {p for p in pods if "CKV_K8S_25" in failed[p]}
    assert capability_adds == {"Pod.rl.qwen3-32b-swe-4node-tp-pp-worker"}  # EFA: IPC_LOCK
    assert "CKV_K8S_27" in failed["Pod.rl.unchecked-head"]  # the docker socket
    services = [r for r in passed if r.startswith("Service.")]
    assert len(services) == 2 * len(example_paths()) + 2
    assert not any(r.startswith("Service.") for r in failed)
