"""The operator policy: hostile specs are refused naming the field and the policy entry.

Each hostile case is the smallest valid experiment asking for one thing a user who may only
create RLExperiments must not get (a host path, a capability, another ServiceAccount, a
critical priority, a foreign image). The test asserts the exact field path, the policy entry
named in the message (`policy.<field>`), the way out named in the hint (the chart value), and
that nothing else is reported. The allowed cases prove the same rules stay quiet on what the
policy does allow, so a rule cannot pass by refusing everything.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentrl.api.policy import (
    BASELINE,
    BASELINE_VOLUME_TYPES,
    Policy,
    PolicyError,
    image_under,
    load_policy,
)
from agentrl.api.security import BASELINE_CAPABILITIES, worker_capabilities
from agentrl.api.validation import errors, parse_experiment
from conftest import example_policy, minimal_body

DIGEST = "@sha256:" + "a" * 64
PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}


def host_volume(path: str, read_only: bool | None = True) -> dict[str, Any]:
    """A spec mounting the host path `path` at /host."""
    mount: dict[str, Any] = {"name": "host", "mountPath": "/host"}
    if read_only is not None:
        mount["readOnly"] = read_only
    return minimal_body(
        runtime={"volumes": [{"name": "host", "hostPath": {"path": path}}], "volumeMounts": [mount]}
    )


def runtime(**fields: Any) -> dict[str, Any]:
    return minimal_body(runtime=fields)


def resources(**fields: Any) -> dict[str, Any]:
    return minimal_body(resources=fields)


def expandable(colocate: bool = True) -> dict[str, Any]:
    body = minimal_body(
        runtime={"env": [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]}
    )
    if not colocate:
        body["spec"]["resources"] = {"colocate": False, "rolloutGpus": 4}
    return body


NVME_RO = Policy(hostPaths=[{"pathPrefix": "/mnt/nvme"}])
NVME_RW = Policy(hostPaths=[{"pathPrefix": "/mnt/nvme/", "readOnly": False}])
REGISTRY = Policy(imageRegistries=["images.corp.example/ml", "mirror.corp.example/"])
TEAM_A = Policy(serviceAccounts=["team-a/runner"])
CSI_ONLY = Policy(volumeTypes=["persistentVolumeClaim", "configMap", "emptyDir", "csi"])

# (case, spec, policy, field path, policy entry)
HOSTILE: list[tuple[str, dict[str, Any], Policy, str, str]] = [
    ("hostPath of the node's root", host_volume("/"), BASELINE,
     "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("the docker socket", host_volume("/var/run/docker.sock"), BASELINE,
     "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("the docker socket, spelt with //", host_volume("//var/run//docker.sock/"), NVME_RW,
     "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("a host path no container mounts", runtime(volumes=[{"name": "h", "hostPath": {
        "path": "/etc"}}]), BASELINE, "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("the containerd socket", host_volume("/run/containerd/containerd.sock"), NVME_RO,
     "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("the kubelet's credentials", host_volume("/var/lib/kubelet/pki", read_only=True), NVME_RW,
     "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("a sibling that shares the allowed prefix's letters", host_volume("/mnt/nvmex"), NVME_RO,
     "spec.runtime.volumes[0].hostPath.path", "hostPaths"),
    ("a read-only host path mounted writable", host_volume("/mnt/nvme/cache", read_only=None),
     NVME_RO, "spec.runtime.volumeMounts[0].readOnly", "hostPaths"),
    ("a read-only host path mounted readOnly: false", host_volume("/mnt/nvme", read_only=False),
     NVME_RO, "spec.runtime.volumeMounts[0].readOnly", "hostPaths"),
    ("system-node-critical", resources(priorityClassName="system-node-critical"), BASELINE,
     "spec.resources.priorityClassName", "priorityClasses"),
    ("system-cluster-critical", resources(priorityClassName="system-cluster-critical"),
     Policy(priorityClasses=["*"]), "spec.resources.priorityClassName", "priorityClasses"),
    ("the head's own system PriorityClass",
     resources(head={"priorityClassName": "system-node-critical"}), BASELINE,
     "spec.resources.head.priorityClassName", "priorityClasses"),
    ("a head PriorityClass outside the list",
     resources(priorityClassName="training-low", head={"priorityClassName": "urgent"}),
     Policy(priorityClasses=["training-*"]), "spec.resources.head.priorityClassName",
     "priorityClasses"),
    ("a PriorityClass outside the list", resources(priorityClassName="research-urgent"),
     Policy(priorityClasses=["training-*"]), "spec.resources.priorityClassName",
     "priorityClasses"),
    ("a foreign ServiceAccount", runtime(serviceAccountName="ci-deployer"), BASELINE,
     "spec.runtime.serviceAccountName", "serviceAccounts"),
    ("another namespace's allowance", runtime(serviceAccountName="runner"), TEAM_A,
     "spec.runtime.serviceAccountName", "serviceAccounts"),
    ("a disallowed registry", runtime(image="docker-hub-user/slime:1" + DIGEST), REGISTRY,
     "spec.runtime.image", "imageRegistries"),
    ("a registry host that extends an allowed one",
     runtime(image="images.corp.example.attacker.example/ml/slime" + DIGEST), REGISTRY,
     "spec.runtime.image", "imageRegistries"),
    ("a repository that extends an allowed one",
     runtime(image="images.corp.example/ml-untrusted/slime" + DIGEST), REGISTRY,
     "spec.runtime.image", "imageRegistries"),
    ("an image volume from a disallowed registry",
     runtime(volumes=[{"name": "w", "image": {"reference": "attacker.example/weights:1"}}]),
     REGISTRY, "spec.runtime.volumes[0].image.reference", "imageRegistries"),
    ("a gitRepo volume", runtime(volumes=[{"name": "g", "gitRepo": {"repository": "x"}}]),
     BASELINE, "spec.runtime.volumes[0].gitRepo", "volumeTypes"),
    ("nfs where only CSI is allowed", runtime(volumes=[{"name": "n", "nfs": {
        "server": "10.0.0.2", "path": "/export"}}]), CSI_ONLY, "spec.runtime.volumes[0].nfs",
     "volumeTypes"),
    ("EFA devices without IPC_LOCK", resources(extraResources={"vpc.amazonaws.com/efa": 4}),
     BASELINE, "spec.resources.extraResources", "capabilities"),
    ("RDMA devices without IPC_LOCK", resources(extraResources={"rdma/hca_shared": 1}),
     Policy(capabilities=["SYS_PTRACE"]), "spec.resources.extraResources", "capabilities"),
    ("expandable segments with IPC_LOCK allowed only", expandable(),
     Policy(capabilities=["IPC_LOCK"]), "spec.runtime.env[0].value", "capabilities"),
    ("expandable segments in a colocated run", expandable(), BASELINE,
     "spec.runtime.env[0].value", "capabilities"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "policy", "path", "entry"),
    [pytest.param(b, p, path, e, id=case) for case, b, p, path, e in HOSTILE],
)
def test_hostile_spec_is_refused_naming_field_and_policy(
    body: dict[str, Any], policy: Policy, path: str, entry: str
) -> None:
    exp, problems = parse_experiment(body, policy)
    assert exp is None
    (problem,) = errors(problems)
    assert problem.path == path
    assert f"the operator's policy.{entry} (" in problem.message
    assert problem.hint.endswith(f"ask your platform team to allow it in the agentrl chart value "
                                 f"policy.{entry}")  # fmt: skip
    # Without a policy (render, tests) only the spec itself is judged: it is otherwise valid.
    assert errors(parse_experiment(body)[1]) == []


ALLOWED: list[tuple[str, dict[str, Any], Policy]] = [
    ("a read-only mount under an allowed prefix", host_volume("/mnt/nvme/models/"), NVME_RO),
    ("a writable mount under a read-write prefix", host_volume("/mnt/nvme/c", None), NVME_RW),
    ("the prefix itself", host_volume("/mnt//nvme"), NVME_RO),
    ("every path under /", host_volume("/etc", None), Policy(hostPaths=[
        {"pathPrefix": "/", "readOnly": False}])),
    ("the namespace's default ServiceAccount", runtime(serviceAccountName="default"), BASELINE),
    ("an allowed ServiceAccount pattern", runtime(serviceAccountName="agentrl-runner"),
     Policy(serviceAccounts=["agentrl-*"])),
    ("this namespace's allowance", runtime(serviceAccountName="runner"),
     Policy(serviceAccounts=["rl/runner"])),
    ("a repository under an allowed path", runtime(image="images.corp.example/ml/slime:1" + DIGEST),
     REGISTRY),
    ("the allowed repository with a tag", runtime(image="images.corp.example/ml:1" + DIGEST),
     REGISTRY),
    ("under a prefix ending in /", runtime(image="mirror.corp.example/x/y" + DIGEST), REGISTRY),
    ("any registry by default", runtime(image="anything.example/slime" + DIGEST), BASELINE),
    ("a workload PriorityClass by default", resources(priorityClassName="training-high"), BASELINE),
    ("a listed system class", resources(priorityClassName="system-cluster-critical"),
     Policy(priorityClasses=["system-cluster-critical"])),
    ("EFA with IPC_LOCK allowed", resources(extraResources={"vpc.amazonaws.com/efa": 4}),
     Policy(capabilities=["IPC_LOCK"])),
    ("expandable segments, not colocated", expandable(colocate=False), BASELINE),
    ("a PVC", runtime(volumes=[PVC], volumeMounts=[{"name": "data", "mountPath": "/data"}]),
     CSI_ONLY),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "policy"), [pytest.param(b, p, id=case) for case, b, p in ALLOWED]
)
def test_what_the_policy_allows_passes(body: dict[str, Any], policy: Policy) -> None:
    exp, problems = parse_experiment(body, policy)
    assert exp is not None and errors(problems) == [], problems


def test_examples_pass_the_policy_shipped_with_them(example_body: dict[str, Any]) -> None:
    policy = load_policy({"policy": example_policy()}, "examples/platform/policy.yaml")
    exp, problems = parse_experiment(example_body, policy)
    assert exp is not None and problems == []


def test_every_violation_at_once() -> None:
    body = host_volume("/var/run/docker.sock")
    body["spec"]["runtime"].update(serviceAccountName="admin", image="x.example/i" + DIGEST)
    body["spec"]["resources"] = {"priorityClassName": "system-node-critical",
                                 "extraResources": {"vpc.amazonaws.com/efa": 1}}  # fmt: skip
    policy = Policy(imageRegistries=["images.corp.example/"])
    _, problems = parse_experiment(body, policy)
    assert sorted(p.path for p in errors(problems)) == [
        "spec.resources.extraResources",
        "spec.resources.priorityClassName",
        "spec.runtime.image",
        "spec.runtime.serviceAccountName",
        "spec.runtime.volumes[0].hostPath.path",
    ]


def test_message_reads_as_a_sentence_with_the_fix() -> None:
    _, problems = parse_experiment(host_volume("/var/run/docker.sock"), BASELINE)
    assert str(errors(problems)[0]) == (
        "spec.runtime.volumes[0].hostPath.path: host path /var/run/docker.sock is not allowed by "
        "the operator's policy.hostPaths (none: Kubernetes' baseline Pod Security level forbids "
        "hostPath) (mount your data through a persistentVolumeClaim instead, or ask your "
        "platform team to allow it in the agentrl chart value policy.hostPaths)"
    )


# ---- what no policy can allow ------------------------------------------------------


@pytest.mark.parametrize("path", ["/mnt/nvme/../../etc", "relative/dir", "/mnt/nvme/.."])
def test_host_paths_with_dot_dot_or_relative_are_refused(path: str) -> None:
    allow_all = Policy(hostPaths=[{"pathPrefix": "/", "readOnly": False}])
    _, problems = parse_experiment(host_volume(path), allow_all)
    (problem,) = errors(problems)
    assert problem.path == "spec.runtime.volumes[0].hostPath.path"
    assert "absolute path without '..'" in problem.message


def test_bidirectional_propagation_is_refused_whatever_the_policy() -> None:
    mount = {"name": "data", "mountPath": "/data", "mountPropagation": "Bidirectional"}
    body = runtime(volumes=[PVC], volumeMounts=[mount])
    anything = Policy(hostPaths=[{"pathPrefix": "/", "readOnly": False}], capabilities=["KILL"])
    for policy in (None, BASELINE, anything):
        (problem,) = errors(parse_experiment(body, policy)[1])
        assert problem.path == "spec.runtime.volumeMounts[0].mountPropagation"
        assert "privileged" in problem.message and "baseline Pod Security level" in problem.message
    mount["mountPropagation"] = "HostToContainer"
    body = runtime(volumes=[PVC], volumeMounts=[mount])
    assert errors(parse_experiment(body, BASELINE)[1]) == []


# ---- warnings: a gateway anyone can reach --------------------------------------------


@pytest.mark.parametrize(
    ("ranges", "path"),
    [
        ([], "spec.gateway.service.loadBalancerSourceRanges"),
        (["10.0.0.0/8", "0.0.0.0/0"], "spec.gateway.service.loadBalancerSourceRanges[1]"),
        (["::/0"], "spec.gateway.service.loadBalancerSourceRanges[0]"),
    ],
)
def test_world_open_load_balancer_is_warned(ranges: list[str], path: str) -> None:
    service: dict[str, Any] = {"type": "LoadBalancer"}
    if ranges:
        service["loadBalancerSourceRanges"] = ranges
    exp, problems = parse_experiment(minimal_body(gateway={"service": service}))
    assert exp is not None
    (warning,) = problems
    assert (warning.severity, warning.path) == ("warning", path)
    assert "CIDRs your agents connect from" in warning.hint


def test_a_closed_load_balancer_or_cluster_ip_is_not_warned() -> None:
    closed = {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.1.0.0/16"]}
    for service in (closed, {"type": "ClusterIP"}):
        assert parse_experiment(minimal_body(gateway={"service": service}))[1] == []


# ---- capabilities the GPU workers get ---------------------------------------------


@pytest.mark.parametrize(
    ("env", "colocate", "caps"),
    [
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True, ["SYS_PTRACE"]),
        ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:512, expandable_segments: true"}, True,
         ["SYS_PTRACE"]),
        ({"SLIME_ENABLE_EXPANDABLE_SEGMENTS": "1"}, True, ["SYS_PTRACE"]),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, True, []),
        ({"SLIME_ENABLE_EXPANDABLE_SEGMENTS": "0"}, True, []),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False, []),
    ],
)  # fmt: skip
def test_sys_ptrace_only_for_colocated_expandable_segments(
    env: dict[str, str], colocate: bool, caps: list[str]
) -> None:
    body = minimal_body(runtime={"env": [{"name": k, "value": v} for k, v in env.items()]})
    if not colocate:
        body["spec"]["resources"] = {"colocate": False, "rolloutGpus": 4}
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    assert worker_capabilities(exp) == caps


def test_rdma_and_expandable_segments_together() -> None:
    body = expandable()
    body["spec"]["resources"] = {"extraResources": {"vpc.amazonaws.com/efa": 32}}
    exp, _ = parse_experiment(body)
    assert exp is not None and worker_capabilities(exp) == ["IPC_LOCK", "SYS_PTRACE"]


# ---- the policy itself -------------------------------------------------------------


def test_the_default_is_kubernetes_baseline() -> None:
    assert Policy() == BASELINE
    assert BASELINE.capabilities == ()  # baseline's own set, nothing beyond it
    assert len(BASELINE_CAPABILITIES) == 13  # the Pod Security Standards' list
    assert not {"IPC_LOCK", "SYS_PTRACE", "SYS_ADMIN", "NET_RAW"} & BASELINE_CAPABILITIES
    assert "hostPath" not in BASELINE.volume_types and "gitRepo" not in BASELINE.volume_types
    assert {"persistentVolumeClaim", "secret", "csi", "ephemeral"} <= BASELINE_VOLUME_TYPES
    assert BASELINE.host_paths == () and BASELINE.service_accounts == ()


def test_the_policy_cannot_be_changed_in_place() -> None:
    with pytest.raises(ValidationError):
        BASELINE.host_paths = ({"pathPrefix": "/"},)  # type: ignore[misc,assignment]
    assert isinstance(BASELINE.capabilities, tuple)


def test_load_reads_a_policy_or_chart_values() -> None:
    policy = {"serviceAccounts": ["agentrl-runner"], "hostPaths": [{"pathPrefix": "/mnt/nvme/"}]}
    for doc in (policy, {"image": {"tag": "x"}, "policy": policy}):
        loaded = load_policy(doc, "values.yaml")
        assert loaded.service_accounts == ("agentrl-runner",)
        assert loaded.host_paths[0].path_prefix == "/mnt/nvme"
        assert loaded.host_paths[0].read_only is True  # the safe default
    assert load_policy(None, "empty.yaml") == BASELINE


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"volumeTypes": ["hostPath"]}, "policy.volumeTypes: hostPath: list the allowed "
                                        "directories in hostPaths instead"),
        ({"volumeTypes": ["nfs", "hostpath"]}, "'hostpath' is not a volume type"),
        ({"capabilities": ["CAP_IPC_LOCK"]}, "write it without CAP_"),
        ({"capabilities": ["ALL"]}, "'ALL' is not a capability name"),
        ({"hostPaths": [{"pathPrefix": "mnt/nvme"}]}, "policy.hostPaths[0].pathPrefix: 'mnt/nvme'"),
        ({"hostPaths": [{"pathPrefix": "/mnt/../etc"}]}, "without '..'"),
        ({"hostPaths": [{"pathPrefix": "/x", "readonly": True}]},
         "policy.hostPaths[0].readonly: unknown field (did you mean readOnly?)"),
        ({"serviceAccount": ["a"]}, "policy.serviceAccount: unknown field (did you mean "
                                    "serviceAccounts?)"),
        ({"serviceAccounts": ["Not A Name"]}, "'Not A Name' is not a name or a `*` pattern"),
        ({"imageRegistries": ["reg.example/x@sha256:1"]}, "is not an image reference prefix"),
        (["a", "list"], "a policy is a mapping"),
    ],
)  # fmt: skip
def test_a_bad_policy_names_the_entry(doc: Any, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(doc, "policy.yaml")
    assert str(info.value).startswith("policy.yaml: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("image", "prefix", "under"),
    [
        ("reg.example/team/x:1", "reg.example/team", True),
        ("reg.example/team:1", "reg.example/team", True),
        ("reg.example/team@sha256:" + "0" * 64, "reg.example/team", True),
        ("reg.example/teams/x", "reg.example/team", False),
        ("reg.example/x", "reg.example", True),
        ("reg.example:5000/x", "reg.example", False),
        ("reg.example.other/x", "reg.example", False),
        ("reg.example:5000/x", "reg.example:5000", True),
        ("reg.example/team/x", "reg.example/team/", True),
        ("reg.example/team", "reg.example/team/", False),
    ],
)
def test_image_prefixes_match_at_component_boundaries(image: str, prefix: str, under: bool) -> None:
    assert image_under(image, prefix) is under
