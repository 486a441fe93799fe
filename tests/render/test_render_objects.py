"""What each rendered object must hold, beyond passing the schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrl.api.constants import (
    BUNDLE_ARCHIVE_PATH,
    CONFIG_PATH,
    HEAD_RAY_RESOURCE,
    LABEL_KUEUE_QUEUE,
)
from agentrl.api.models import RLExperiment
from agentrl.api.runtime import RuntimeConfig, config_spec
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, names, render_all, runtime_config
from conftest import load_example, minimal_body
from kube_checks import core_errors, kuberay_controller_errors, pod_templates

DEFAULTS = OperatorDefaults(image="img@sha256:" + "1" * 64, bundle_version="1.2.3")
BUNDLE = {"agentrl/__init__.py": "x = 1\n", "agentrl/bundle/launch/__main__.py": "pass\n"}
SWE = "qwen3-32b-swe-4node-tp-pp"


def parse(body: dict[str, Any]) -> RLExperiment:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return exp


def objects(body: dict[str, Any], bundle: dict[str, str] = BUNDLE) -> dict[str, dict[str, Any]]:
    """Rendered objects by role: config, bundle, service (the gateway's), metrics, rayjob."""
    kids = render_all(parse(body), DEFAULTS, bundle)
    return {"config": kids.config, "bundle": kids.bundle, "service": kids.gateway_service,
            "metrics": kids.metrics_service, "rayjob": kids.rayjob}  # fmt: skip


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = job["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_secrets_reach_pods_only_by_reference() -> None:
    body = load_example(SWE)
    objs = objects(body)
    config_text = json.dumps(objs["config"]["data"])
    for c in containers(objs["rayjob"]):
        assert env_of(c)["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    config = RuntimeConfig.model_validate_json(objs["config"]["data"]["config.json"])
    assert config.wandb_api_key_env == "WANDB_API_KEY"
    assert "valueFrom" not in config_text and 'WANDB_API_KEY\\": \\"' not in config_text


def test_http_headers_come_from_secrets_by_env_name() -> None:
    objs = objects(load_example("qwen2.5-7b-http-agent-two-evals"))
    config = RuntimeConfig.model_validate_json(objs["config"]["data"]["config.json"])
    assert config.http_header_envs == {"Authorization": "AGENTRL_HTTP_HEADER_0"}
    for c in containers(objs["rayjob"]):
        ref = env_of(c)["AGENTRL_HTTP_HEADER_0"]
        assert ref == {"secretKeyRef": {"name": "web-agent", "key": "bearer"}}


def test_same_runtime_env_in_every_container() -> None:
    job = objects(load_example(SWE))["rayjob"]
    head, *workers = (env_of(c) for c in containers(job))
    # The CPU head alone hides GPUs (CUDA images expose every GPU of the node by default).
    assert head.pop("NVIDIA_VISIBLE_DEVICES") == "void"
    assert workers and all("NVIDIA_VISIBLE_DEVICES" not in w for w in workers)
    envs = [head, *workers]
    assert all(e == envs[0] for e in envs)
    assert envs[0]["CUDA_HOME"] == "/usr/local/cuda"
    assert envs[0]["LD_LIBRARY_PATH"].startswith("/usr/local/cuda/lib64")
    assert envs[0]["PYTHONPATH"].split(":")[0] == BUNDLE_ARCHIVE_PATH
    assert envs[0]["AGENTRL_CONFIG"] == CONFIG_PATH


def test_runtime_config_round_trips() -> None:
    exp = parse(load_example(SWE))
    text = objects(load_example(SWE))["config"]["data"]["config.json"]
    assert RuntimeConfig.model_validate_json(text) == runtime_config(exp, DEFAULTS)
    loaded = RuntimeConfig.model_validate_json(text)
    assert loaded.spec == config_spec(exp.spec) and loaded.bundle_version == "1.2.3"
    assert loaded.gateway_url == "http://qwen3-32b-swe-gw.rl.example.internal:9090"


def test_env_values_never_reach_the_runtime_config() -> None:
    """The docs promise the ConfigMap holds no env value: the containers get them, it does not."""
    body = load_example(SWE)
    body["spec"]["runtime"]["env"].append({"name": "PLAIN_MARKER", "value": "v-3141592653"})
    rendered = objects(body)
    assert "v-3141592653" not in json.dumps(rendered["config"])
    assert "NCCL_DEBUG" not in json.dumps(rendered["config"])
    assert all(env_of(c)["PLAIN_MARKER"] == "v-3141592653" for c in containers(rendered["rayjob"]))


def test_runtime_env_from_secrets_is_named_in_the_runtime_config() -> None:
    """The launcher redacts what these variables hold: the config names them, and carries
    neither their Secret references nor any runtime.env value."""
    body = load_example(SWE)
    ref = {"secretKeyRef": {"name": "app-secrets", "key": "sentry-dsn"}}
    body["spec"]["runtime"]["env"] += [
        {"name": "SENTRY_DSN", "valueFrom": ref},
        {"name": "PLAIN_MARKER", "value": "v-2718281828"},
    ]
    rendered = objects(body)
    config = RuntimeConfig.model_validate_json(rendered["config"]["data"]["config.json"])
    assert config.runtime_secret_envs == ["SENTRY_DSN"]
    text = json.dumps(rendered["config"])
    for absent in ("app-secrets", "sentry-dsn", "valueFrom", "v-2718281828", "NCCL_DEBUG"):
        assert absent not in text
    assert all(env_of(c)["SENTRY_DSN"] == ref for c in containers(rendered["rayjob"]))


def test_gateway_url_defaults_to_the_in_cluster_service() -> None:
    config = runtime_config(parse(minimal_body()), DEFAULTS)
    assert config.gateway_url == "http://demo-gateway.rl.svc:9090"


def test_gpu_workers_and_cpu_head() -> None:
    job = objects(load_example(SWE))["rayjob"]
    cluster = job["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    marker = json.loads(head["rayStartParams"]["resources"].strip("'"))
    assert marker == {HEAD_RAY_RESOURCE: 1}
    head_limits = head["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in head_limits
    (workers,) = cluster["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 4
    worker = workers["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert worker["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert worker["resources"]["requests"] == worker["resources"]["limits"]
    assert worker["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    spec = workers["template"]["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert spec["priorityClassName"] == "training-high"
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Gi"}


def test_interconnect_env_yields_to_user_env() -> None:
    body = load_example(SWE)
    body["spec"]["runtime"]["env"].append({"name": "FI_EFA_FORK_SAFE", "value": "0"})
    job = objects(body)["rayjob"]
    env = containers(job)[0]["env"]
    assert [e.get("value") for e in env if e["name"] == "FI_EFA_FORK_SAFE"] == ["0"]
    assert env_of(containers(job)[0])["FI_PROVIDER"] == "efa"


def test_lifecycle_fields_reach_the_rayjob() -> None:
    job = objects(load_example(SWE))["rayjob"]
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["entrypoint"] == f"python3 -m agentrl.bundle.launch --config {CONFIG_PATH}"
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"]) == (1, 3600)
    assert spec["activeDeadlineSeconds"] == 604800
    assert spec["preRunningDeadlineSeconds"] == 3600
    assert job["metadata"]["labels"][LABEL_KUEUE_QUEUE] == "gpu-p5"


def test_suspend_renders_a_valid_suspended_rayjob() -> None:
    job = objects(minimal_body(suspend=True, ttlSecondsAfterFinished=60))["rayjob"]
    assert job["spec"]["suspend"] is True
    assert kuberay_controller_errors(job) == []


def test_extra_code_is_mounted_and_importable() -> None:
    job = objects(load_example("qwen2.5-7b-http-agent-two-evals"))["rayjob"]
    (container, *_) = containers(job)
    spec = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == names.extra_code_volume_name(0))
    assert volume["configMap"] == {"name": "web-agent-rewards"}
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    path = env_of(container)["PYTHONPATH"].split(":")
    assert path[:2] == [BUNDLE_ARCHIVE_PATH, mount["mountPath"]]


def test_service_selects_only_the_head_pod() -> None:
    objs = objects(load_example("qwen2.5-7b-http-agent-two-evals"))
    svc, job = objs["service"], objs["rayjob"]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert "service.beta.kubernetes.io/aws-load-balancer-type" in svc["metadata"]["annotations"]
    selector = svc["spec"]["selector"].items()
    head, worker, submitter = pod_templates(job)
    assert selector <= head["metadata"]["labels"].items()
    assert not selector <= worker["metadata"]["labels"].items()
    assert not selector <= submitter["metadata"]["labels"].items()
    head_ports = {p["name"] for p in head["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= head_ports
    assert objs["metrics"]["spec"]["selector"] == svc["spec"]["selector"]
    config = RuntimeConfig.model_validate_json(objs["config"]["data"]["config.json"])
    assert config.gateway_url == "https://agentrl-gw.example.com"


def test_owner_references_when_the_uid_is_known() -> None:
    body = minimal_body()
    assert all("ownerReferences" not in o["metadata"] for o in objects(body).values())
    body["metadata"]["uid"] = "1f7c3a52-0000-4000-8000-000000000001"
    for obj in objects(body).values():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == body["metadata"]["uid"] and ref["controller"] is True
        assert ref["kind"] == "RLExperiment" and ref["name"] == "demo"


def test_longest_name_fits_every_derived_name() -> None:
    body = minimal_body()
    body["metadata"]["name"] = "a" + "b" * 46
    objs = objects(body)
    assert kuberay_controller_errors(objs["rayjob"]) == []
    for role in ("config", "bundle", "service", "metrics"):
        assert core_errors(objs[role]) == [], role
    assert len(objs["service"]["metadata"]["name"]) <= 63
    assert len(objs["metrics"]["metadata"]["name"]) <= 63


def test_image_pull_secrets_and_ray_version_from_defaults() -> None:
    exp = parse(minimal_body())
    defaults = OperatorDefaults(image="i@sha256:" + "2" * 64, image_pull_secrets=("regcred",),
                                ray_version="2.49.0")  # fmt: skip
    job = render_all(exp, defaults, BUNDLE).rayjob
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == "2.49.0"
    for template in pod_templates(job):
        assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert template["spec"]["containers"][0]["image"] == "i@sha256:" + "2" * 64


def test_spec_image_overrides_the_default() -> None:
    job = objects(minimal_body(runtime={"image": "my/slime:1@sha256:" + "3" * 64}))["rayjob"]
    assert {c["image"] for c in containers(job)} == {"my/slime:1@sha256:" + "3" * 64}


def test_an_invalid_experiment_is_refused() -> None:
    exp = parse(minimal_body())
    broken = exp.model_copy(update={"metadata": exp.metadata.model_copy(update={"name": "X" * 60})})
    with pytest.raises(ValueError, match=r"metadata.name: name is 60 characters"):
        render_all(broken, DEFAULTS, BUNDLE)


def test_children_share_no_mutable_parts() -> None:
    """Callers may edit one rendered object (or one pod template) without touching another."""
    kids = render_all(parse(load_example(SWE)), DEFAULTS, BUNDLE)
    seen: dict[int, str] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict | list):
            assert id(node) not in seen, f"{where} is the same object as {seen[id(node)]}"
            seen[id(node)] = where
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                walk(value, f"{where}.{key}")

    for role in ("config", "bundle", "gateway_service", "metrics_service", "rayjob"):
        walk(getattr(kids, role), role)
    assert [o["kind"] for o in kids] == ["ConfigMap", "ConfigMap", "Service", "Service", "RayJob"]


def test_a_queued_rayjob_is_what_kueues_rayjob_integration_admits() -> None:
    """Kueue's RayJob webhook (kubernetes-sigs/kueue, pkg/controller/jobs/rayjob) refuses a
    RayJob that would outlive its job or autoscale, and queues by the queue-name label; its
    Workload takes the head's priority class first."""
    body = minimal_body(scheduling={"queueName": "team-a"})
    body["spec"]["resources"] = {"priorityClassName": "gpu", "head": {"priorityClassName": "ctl"}}
    job = objects(body)["rayjob"]
    spec, cluster = job["spec"], job["spec"]["rayClusterSpec"]
    assert job["metadata"]["labels"][LABEL_KUEUE_QUEUE] == "team-a"
    assert spec["shutdownAfterJobFinishes"] is True
    assert not cluster.get("enableInTreeAutoscaling")
    assert "clusterSelector" not in spec  # a queued RayJob must bring its own cluster
    (workers,) = cluster["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"]
    assert cluster["headGroupSpec"]["template"]["spec"]["priorityClassName"] == "ctl"
    assert kuberay_controller_errors(job) == []
