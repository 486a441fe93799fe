"""The rendered pods are hardened, and the policy check agrees with what the renderer emits.

The agreement test reads the *rendered* pods (not the policy module's own view of the spec):
whatever the policy admits renders to pods inside the policy, and whatever renders inside the
policy is admitted, over generated combinations of what a spec can ask for.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from agentrl.api.constants import GATEWAY_PORT_NAME, METRICS_PORT, METRICS_PORT_NAME
from agentrl.api.models import RLExperiment
from agentrl.api.policy import Policy
from agentrl.api.security import (
    BASELINE_CAPABILITIES,
    INTERCONNECT_ENV,
    RDMA_RESOURCES,
    worker_capabilities,
)
from agentrl.api.validation import errors, parse_experiment
from agentrl.render import Children, OperatorDefaults, render_all
from conftest import TEST_IMAGE, minimal_body
from kube_checks import pod_templates

BUNDLE = {"agentrl/__init__.py": "x = 1\n"}


def parse(body: dict[str, Any]) -> RLExperiment:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return exp


def rendered(exp: RLExperiment) -> Children:
    return render_all(exp, OperatorDefaults(image=TEST_IMAGE), BUNDLE)


def containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    spec = template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_pod_is_hardened(example_body: dict[str, Any]) -> None:
    exp = parse(example_body)
    head, worker, submitter = pod_templates(rendered(exp).rayjob)
    for template in (head, worker, submitter):
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        assert not {"hostNetwork", "hostPID", "hostIPC", "hostUsers"} & set(spec)
        assert set(spec["securityContext"]) == {"seccompProfile"}  # no sysctls, SELinux...
        for container in containers(template):
            ctx = container["securityContext"]
            assert set(ctx) == {"allowPrivilegeEscalation", "privileged", "capabilities"}
            assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
            assert ctx["capabilities"]["drop"] == ["ALL"]
            assert all("hostPort" not in p for p in container.get("ports", []))
    for template in (head, submitter):
        assert "add" not in template["spec"]["containers"][0]["securityContext"]["capabilities"]
    added = worker["spec"]["containers"][0]["securityContext"]["capabilities"].get("add", [])
    assert added == worker_capabilities(exp)


def test_rdma_devices_add_ipc_lock_to_the_workers_only() -> None:
    exp = parse(minimal_body(resources={"extraResources": {"vpc.amazonaws.com/efa": 32}}))
    head, worker, _ = pod_templates(rendered(exp).rayjob)
    caps = worker["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert "add" not in head["spec"]["containers"][0]["securityContext"]["capabilities"]


def test_interconnect_env_and_rdma_resources_name_the_same_devices() -> None:
    assert set(INTERCONNECT_ENV) == set(RDMA_RESOURCES)


def test_gateway_and_metrics_services_are_separate() -> None:
    service = {
        "type": "LoadBalancer",
        "loadBalancerSourceRanges": ["10.0.0.0/8"],
        "annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"},
    }
    exp = parse(minimal_body(gateway={"service": service}))
    kids = rendered(exp)
    gateway, metrics, job = kids.gateway_service, kids.metrics_service, kids.rayjob
    assert gateway["metadata"]["name"] == "demo-gateway"
    assert gateway["spec"]["type"] == "LoadBalancer"
    assert [p["name"] for p in gateway["spec"]["ports"]] == [GATEWAY_PORT_NAME]
    assert gateway["metadata"]["annotations"] == service["annotations"]
    assert metrics["metadata"]["name"] == "demo-metrics"
    assert metrics["spec"]["type"] == "ClusterIP"
    assert metrics["spec"]["ports"] == [
        {
            "name": METRICS_PORT_NAME,
            "port": METRICS_PORT,
            "targetPort": METRICS_PORT_NAME,
            "protocol": "TCP",
        }
    ]
    assert "annotations" not in metrics["metadata"]
    assert "loadBalancerSourceRanges" not in metrics["spec"]
    head = pod_templates(job)[0]
    for svc in (gateway, metrics):
        assert svc["spec"]["selector"].items() <= head["metadata"]["labels"].items()


# ---- the policy check agrees with the rendered pods ---------------------------------

POLICIES = [
    Policy(),
    Policy(capabilities=["IPC_LOCK"], serviceAccounts=["agentrl-*"]),
    Policy(capabilities=["IPC_LOCK", "SYS_PTRACE"], priorityClasses=["training-*"],
           hostPaths=[{"pathPrefix": "/mnt/nvme"}]),
    Policy(hostPaths=[{"pathPrefix": "/mnt/nvme", "readOnly": False}],
           priorityClasses=["system-cluster-critical", "training-high"],
           serviceAccounts=["rl/runner"], volumeTypes=["persistentVolumeClaim", "emptyDir"]),
    Policy(capabilities=["IPC_LOCK", "SYS_PTRACE"], serviceAccounts=["*"],
           priorityClasses=["*", "system-cluster-critical"],
           hostPaths=[{"pathPrefix": "/", "readOnly": False}]),
]  # fmt: skip
NOTHING = [None] * 3  # most draws ask for little, so admitted and refused cases both occur


@st.composite
def asks(draw: st.DrawFn) -> dict[str, Any]:
    """A spec asking for some of what the policy governs."""
    body = minimal_body()
    spec = body["spec"]
    device = draw(st.sampled_from([*NOTHING, "vpc.amazonaws.com/efa", "rdma/ib"]))
    resources: dict[str, Any] = {"extraResources": {device: 1}} if device else {}
    if not draw(st.booleans()):
        resources.update(colocate=False, rolloutGpus=4)
    pc = draw(st.sampled_from([*NOTHING, "training-high", "system-cluster-critical", "batch"]))
    if pc:
        resources["priorityClassName"] = pc
    runtime: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        runtime["env"] = [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]
    sa = draw(st.sampled_from([*NOTHING, "default", "agentrl-runner", "runner", "admin"]))
    if sa:
        runtime["serviceAccountName"] = sa
    volume = draw(st.sampled_from([*NOTHING, "pvc", "nfs", "/mnt/nvme/x", "/", "/mnt/nvmex"]))
    if volume is not None:
        source: dict[str, Any] = (
            {"persistentVolumeClaim": {"claimName": "c"}} if volume == "pvc"
            else {"nfs": {"server": "10.0.0.2", "path": "/e"}} if volume == "nfs"
            else {"hostPath": {"path": volume}}
        )  # fmt: skip
        mount = {"name": "v", "mountPath": "/v", "readOnly": draw(st.booleans())}
        runtime.update(volumes=[{"name": "v", **source}], volumeMounts=[mount])
    spec.update(resources=resources, runtime=runtime)
    return body


def inside(exp: RLExperiment, policy: Policy) -> bool:
    """Whether the rendered pods stay within the policy, read from the objects themselves."""
    for template in pod_templates(rendered(exp).rayjob):
        spec = template["spec"]
        sa = spec.get("serviceAccountName", "default")
        if sa != "default" and not any(
            fnmatch.fnmatchcase(f"rl/{sa}" if "/" in p else sa, p) for p in policy.service_accounts
        ):
            return False
        pc = spec.get("priorityClassName")
        if pc and not (pc in policy.priority_classes or (
            not pc.startswith("system-") and (not policy.priority_classes or any(
                fnmatch.fnmatchcase(pc, p) for p in policy.priority_classes)))):  # fmt: skip
            return False
        for container in containers(template):
            added = set(container["securityContext"]["capabilities"].get("add", []))
            if added - BASELINE_CAPABILITIES - set(policy.capabilities):
                return False
        mounts = {m["name"]: m for m in spec["containers"][0].get("volumeMounts", [])}
        for vol in spec.get("volumes", []):
            if "hostPath" in vol:
                path = vol["hostPath"]["path"]
                rules = [
                    r
                    for r in policy.host_paths
                    if path == r.path_prefix or path.startswith(r.path_prefix.rstrip("/") + "/")
                ]
                if not rules or (all(r.read_only for r in rules)
                                 and not mounts[vol["name"]].get("readOnly")):  # fmt: skip
                    return False
            elif vol["name"] == "v" and not set(vol) - {"name"} <= set(policy.volume_types):
                return False
    return True


@settings(max_examples=150, deadline=None)
@given(asks(), st.sampled_from(POLICIES))
def test_admitted_exactly_when_the_rendered_pods_stay_inside(
    body: dict[str, Any], policy: Policy
) -> None:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    admitted = not errors(parse_experiment(body, policy)[1])
    event("admitted" if admitted else "refused")
    assert admitted == inside(exp, policy), parse_experiment(body, policy)[1]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_minimal_spec_is_admitted_by_every_policy(policy: Policy) -> None:
    exp = parse(minimal_body())
    assert inside(exp, policy)
    assert errors(parse_experiment(minimal_body(), policy)[1]) == []
