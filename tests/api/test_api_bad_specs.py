"""The bad-spec corpus: each broken experiment is rejected and names its exact field.

Every case is the smallest valid experiment with one mistake a user really makes; the test
asserts the error's path (wire form, as written in the YAML) and that nothing else is
reported, so a rule that fires on the wrong field or on valid specs fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.api.validation import errors, parse_experiment
from conftest import minimal_body

ARN = "arn:aws:bedrock-agentcore:us-west-2:111122223333:runtime/agent-1"
CORE = {"runtimeArn": ARN, "region": "us-west-2", "s3Bucket": "rollouts"}
SECRET = {"name": "s", "key": "k"}


def spec(**overrides: Any) -> dict[str, Any]:
    return minimal_body(**overrides)


def named(name: str) -> dict[str, Any]:
    body = minimal_body()
    body["metadata"]["name"] = name
    return body


def with_agent(**agent: Any) -> dict[str, Any]:
    return minimal_body(agent=agent)


CASES: list[tuple[str, dict[str, Any], str]] = [
    # --- structure: types, ranges, unknown and missing fields
    ("unknown top-level field", spec(gpus=8), "spec.gpus"),
    ("typo in a nested field", spec(resources={"gpusPerNodes": 8}), "spec.resources.gpusPerNodes"),
    ("missing model", {**minimal_body(), "spec": {k: v for k, v in minimal_body()["spec"].items()
                                                   if k != "model"}}, "spec.model"),
    ("missing numRollouts", spec(grpo={}), "spec.grpo.numRollouts"),
    ("zero tensor parallelism", spec(resources={"parallelism": {"tensor": 0}}),
     "spec.resources.parallelism.tensor"),
    ("string for an int", spec(grpo={"numRollouts": "many"}), "spec.grpo.numRollouts"),
    ("negative learning rate", spec(grpo={"numRollouts": 1, "learningRate": -1e-6}),
     "spec.grpo.learningRate"),
    ("unknown KL type", spec(grpo={"numRollouts": 1, "klLossType": "l2"}), "spec.grpo.klLossType"),
    ("bad memory quantity", spec(resources={"memory": "256 GB"}), "spec.resources.memory"),
    ("bad service type", spec(gateway={"service": {"type": "NodePort"}}),
     "spec.gateway.service.type"),
    ("privileged gateway port", spec(gateway={"port": 80}), "spec.gateway.port"),
    # --- pods the way platforms need them
    ("pod label agentrl selects by", spec(runtime={"podLabels": {"agentrl.io/component": "x"}}),
     "spec.runtime.podLabels.agentrl.io/component"),
    ("pod label KubeRay sets", spec(runtime={"podLabels": {"ray.io/node-type": "head"}}),
     "spec.runtime.podLabels.ray.io/node-type"),
    ("pod label value with spaces", spec(runtime={"podLabels": {"team": "ML Research"}}),
     "spec.runtime.podLabels.team"),
    ("pod annotation key with spaces", spec(runtime={"podAnnotations": {"cost centre": "1"}}),
     "spec.runtime.podAnnotations.cost centre"),
    ("head affinity typo", spec(resources={"head": {"affinity": {"nodeAfinity": {}}}}),
     "spec.resources.head.affinity.nodeAfinity"),
    ("bad eval name",
     spec(data={"train": "/d.jsonl", "eval": [{"name": "Dev Set", "path": "/e.jsonl"}]}),
     "spec.data.eval[0].name"),
    ("env with both value and secret",
     spec(runtime={"env": [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": SECRET}}]}),
     "spec.runtime.env[0]"),
    ("bad AgentCore ARN", with_agent(agentCore={**CORE, "runtimeArn": "agent-1"}),
     "spec.agent.agentCore.runtimeArn"),
    ("http agent without scheme", with_agent(http={"url": "agent.rl.svc"}), "spec.agent.http.url"),
    ("wrong apiVersion", {**minimal_body(), "apiVersion": "agentrl.io/v1"}, "apiVersion"),
    # --- cross-field rules
    ("name over 47 characters", named("a" * 48), "metadata.name"),
    ("name not DNS-1035", named("7b-run"), "metadata.name"),
    ("no agent backend", with_agent(), "spec.agent"),
    ("two agent backends", with_agent(agentCore=CORE, http={"url": "http://a"}), "spec.agent"),
    ("local model without renderer", spec(model={"path": "/models/m", "type": "qwen2.5-3B"}),
     "spec.model.rendererFamily"),
    # (14 divides the model's 14 heads and is a multiple of its 2 key/value heads: only the
    # GPU count is wrong)
    ("GPUs not divisible by tp x pp", spec(resources={"parallelism": {"tensor": 14}}),
     "spec.resources.parallelism"),
    ("expert parallelism does not divide",
     spec(model={"path": "Qwen/Qwen3-30B-A3B", "type": "qwen3-30B-A3B", "refLoad": "/models/q"},
          resources={"parallelism": {"tensor": 2, "expert": 8}}),
     "spec.resources.parallelism.expert"),
    ("expert parallelism on a dense model",
     spec(resources={"parallelism": {"tensor": 2, "expert": 2}}),
     "spec.resources.parallelism.expert"),
    ("pipeline does not divide the layers",
     spec(model={"path": "Qwen/Qwen2.5-7B-Instruct", "type": "qwen2.5-7B", "refLoad": "/models/q"},
          resources={"parallelism": {"tensor": 1, "pipeline": 8}}),
     "spec.resources.parallelism.pipeline"),
    # (14 divides the model's 14 heads and is a multiple of its 2 key/value heads: only the
    # GPU count is wrong)
    ("engines do not fit", spec(resources={"rolloutGpusPerEngine": 14}),
     "spec.resources.rolloutGpusPerEngine"),
    ("non-colocated without rollout GPUs", spec(resources={"colocate": False}),
     "spec.resources.rolloutGpus"),
    ("rollout GPUs while colocated", spec(resources={"rolloutGpus": 4}),
     "spec.resources.rolloutGpus"),
    ("rollout takes every GPU", spec(resources={"colocate": False, "rolloutGpus": 8}),
     "spec.resources.rolloutGpus"),
    ("training not whole nodes",
     spec(resources={"nodes": 4, "colocate": False, "rolloutGpus": 12}),
     "spec.resources.rolloutGpus"),
    ("global batch does not divide", spec(grpo={"numRollouts": 1, "globalBatchSize": 100}),
     "spec.grpo.globalBatchSize"),
    ("global batch vs data parallel",
     spec(grpo={"numRollouts": 1, "rolloutBatchSize": 3, "samplesPerPrompt": 2,
                "globalBatchSize": 6}),
     "spec.grpo.globalBatchSize"),
    ("more valid episodes than the group has",
     spec(grpo={"numRollouts": 1, "samplesPerPrompt": 4, "minValidSamplesPerGroup": 5,
                "globalBatchSize": 128}),
     "spec.grpo.minValidSamplesPerGroup"),
    ("GRPO with one sample", spec(grpo={"numRollouts": 1, "samplesPerPrompt": 1,
                                        "globalBatchSize": 32}),
     "spec.grpo.samplesPerPrompt"),
    ("response longer than context",
     spec(model={"path": "Qwen/Q", "type": "qwen2.5-0.5B", "refLoad": "/m", "contextLength": 1024}),
     "spec.grpo.maxResponseLength"),
    ("eval response longer than context",
     spec(model={"path": "/m", "type": "qwen2.5-0.5B", "rendererFamily": "qwen3",
                 "contextLength": 2048},
          data={"train": "/t.jsonl",
                "eval": [{"name": "a", "path": "/a.jsonl", "maxResponseLength": 4096}]}),
     "spec.data.eval[0].maxResponseLength"),
    ("hub id without weights on disk", spec(model={"path": "Qwen/Q", "type": "qwen2.5-0.5B"}),
     "spec.model.refLoad"),
    ("relative refLoad",
     spec(model={"path": "Qwen/Q", "type": "qwen2.5-0.5B", "refLoad": "models/a/b"}),
     "spec.model.refLoad"),
    ("hub id as refLoad",
     spec(model={"path": "Qwen/Q", "type": "qwen2.5-0.5B", "refLoad": "Qwen/Q"}),
     "spec.model.refLoad"),
    ("relative model path",
     spec(model={"path": "models/qwen/7b", "type": "qwen2.5-0.5B", "rendererFamily": "default"}),
     "spec.model.path"),
    ("duplicate eval names",
     spec(data={"train": "/t.jsonl", "eval": [{"name": "a", "path": "/a.jsonl"},
                                              {"name": "a", "path": "/b.jsonl"}]}),
     "spec.data.eval[1].name"),
    ("eval set named after slime's eval/step",
     spec(data={"train": "/t.jsonl", "eval": [{"name": "step", "path": "/a.jsonl"}]}),
     "spec.data.eval[0].name"),
    ("eval set named after another's truncated ratio",
     spec(data={"train": "/t.jsonl", "eval": [{"name": "a-truncated_ratio", "path": "/a.jsonl"},
                                              {"name": "a", "path": "/b.jsonl"}]}),
     "spec.data.eval[0].name"),
    ("gateway on the metrics port", spec(gateway={"port": 9400}), "spec.gateway.port"),
    ("gateway on Ray's dashboard port", spec(gateway={"port": 8265}), "spec.gateway.port"),
    ("source ranges on ClusterIP",
     spec(gateway={"service": {"loadBalancerSourceRanges": ["10.0.0.0/8"]}}),
     "spec.gateway.service.loadBalancerSourceRanges"),
    ("source range not a CIDR",
     spec(gateway={"service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["office"]}}),
     "spec.gateway.service.loadBalancerSourceRanges[0]"),
    ("user sets PYTHONPATH", spec(runtime={"env": [{"name": "PYTHONPATH", "value": "/x"}]}),
     "spec.runtime.env[0].name"),
    ("env var twice",
     spec(runtime={"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"},
                           {"name": "A", "value": "3"}]}),
     "spec.runtime.env[2].name"),
    ("mount without volume",
     spec(runtime={"volumeMounts": [{"name": "models", "mountPath": "/models"}]}),
     "spec.runtime.volumeMounts[0].name"),
    ("mount over agentrl's code",
     spec(runtime={"volumes": [{"name": "v", "emptyDir": {}}],
                   "volumeMounts": [{"name": "v", "mountPath": "/opt/agentrl"}]}),
     "spec.runtime.volumeMounts[0].mountPath"),
    ("volume without a name", spec(runtime={"volumes": [{"emptyDir": {}}]}),
     "spec.runtime.volumes[0].name"),
    ("GPU listed as extra resource",
     spec(resources={"extraResources": {"nvidia.com/gpu": 8}}), "spec.resources.extraResources"),
    ("extra code listed twice",
     spec(runtime={"extraCode": [{"configMap": "tools"}, {"configMap": "tools"}]}),
     "spec.runtime.extraCode[1].configMap"),
    ("save interval without path", spec(checkpoint={"saveInterval": 10}), "spec.checkpoint.path"),
    ("shm as large as memory", spec(resources={"memory": "64Gi", "shmSize": "64Gi"}),
     "spec.resources.shmSize"),
    ("head shm over head memory", spec(resources={"head": {"memory": "4Gi"}}),
     "spec.resources.head.shmSize"),
    ("quantity with a doubled suffix", spec(resources={"cpu": "5Kii"}), "spec.resources.cpu"),
    # --- the launcher's gang preflight
    ("preflight timeout below the floor", spec(runtime={"preflight": {"timeoutSeconds": 1}}),
     "spec.runtime.preflight.timeoutSeconds"),
    ("preflight bandwidth of zero", spec(runtime={"preflight": {"minBusBandwidthGBps": 0}}),
     "spec.runtime.preflight.minBusBandwidthGBps"),
    ("preflight bandwidth in Gbps spelling",
     spec(runtime={"preflight": {"minBusBandwidthGbps": 40}}),
     "spec.runtime.preflight.minBusBandwidthGbps"),
    ("preflight action unknown", spec(runtime={"preflight": {"onLowBandwidth": "abort"}}),
     "spec.runtime.preflight.onLowBandwidth"),
    ("preflight timeout as a string", spec(runtime={"preflight": {"timeoutSeconds": "60"}}),
     "spec.runtime.preflight.timeoutSeconds"),
    ("agentrl's pod name env set by hand",
     spec(runtime={"env": [{"name": "AGENTRL_POD_NAME", "value": "x"}]}),
     "spec.runtime.env[0].name"),
    # --- env KubeRay's validation refuses in the head pod (the RayJob: ValidationFailed)
    ("Ray's Redis address without GCS fault tolerance",
     spec(runtime={"env": [{"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"}]}),
     "spec.runtime.env[0].name"),
    ("a Redis username", spec(runtime={"env": [{"name": "REDIS_USERNAME", "value": "ray"}]}),
     "spec.runtime.env[0].name"),
    ("autoscaler v2 on a cluster without an autoscaler",
     spec(runtime={"env": [{"name": "RAY_enable_autoscaler_v2", "value": "1"}]}),
     "spec.runtime.env[0].name"),
    # --- Kubernetes objects passed through (the API server would prune typos silently)
    ("volume source misspelt",
     spec(runtime={"volumes": [{"name": "m", "persistentVolumeClam": {"claimName": "m"}}]}),
     "spec.runtime.volumes[0].persistentVolumeClam"),
    ("volume with two sources",
     spec(runtime={"volumes": [{"name": "m", "emptyDir": {}, "hostPath": {"path": "/x"}}]}),
     "spec.runtime.volumes[0]"),
    ("mountPath misspelt",
     spec(runtime={"volumes": [{"name": "m", "emptyDir": {}}],
                   "volumeMounts": [{"name": "m", "mountpath": "/m"}]}),
     "spec.runtime.volumeMounts[0].mountpath"),
    ("toleration operator misspelt",
     spec(resources={"tolerations": [{"key": "gpu", "operater": "Exists"}]}),
     "spec.resources.tolerations[0].operater"),
    ("toleration effect unknown",
     spec(resources={"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedul"}]}),
     "spec.resources.tolerations[0].effect"),
    ("head toleration value with Exists",
     spec(resources={"head": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}}),
     "spec.resources.head.tolerations[0].value"),
    ("affinity key misspelt", spec(resources={"affinity": {"nodeAfinity": {}}}),
     "spec.resources.affinity.nodeAfinity"),
    ("node selector value not a label",
     spec(resources={"nodeSelector": {"pool": "gpu nodes"}}), "spec.resources.nodeSelector.pool"),
]  # fmt: skip


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 25
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "body", "path"), CASES, ids=[c[0] for c in CASES])
def test_rejected_with_exact_path(case: str, body: dict[str, Any], path: str) -> None:
    exp, problems = parse_experiment(body)
    assert exp is None, f"{case}: accepted"
    found = errors(problems)
    assert [p.path for p in found] == [path], found  # one mistake, one problem, right field
    assert all(p.message for p in found)


@pytest.mark.parametrize(
    ("preflight", "path"),
    [
        ({"gang": False, "minBusBandwidthGBps": 40}, "spec.runtime.preflight.minBusBandwidthGBps"),
        ({"onLowBandwidth": "fail"}, "spec.runtime.preflight.onLowBandwidth"),
    ],
)
def test_preflight_settings_nothing_uses_are_warned_about(
    preflight: dict[str, Any], path: str
) -> None:
    exp, problems = parse_experiment(spec(runtime={"preflight": preflight}))
    assert exp is not None and errors(problems) == []
    assert [p.path for p in problems if p.path.startswith("spec.runtime.preflight")] == [path]


def test_a_preflight_bandwidth_floor_in_whole_gbps_is_accepted() -> None:
    # YAML writes 40, not 40.0: strict typing still takes an integer for a number.
    body = spec(runtime={"preflight": {"minBusBandwidthGBps": 40, "onLowBandwidth": "fail"}})
    exp, problems = parse_experiment(body)
    assert exp is not None and problems == []
    assert exp.spec.runtime.preflight.min_bus_bandwidth_gbps == 40
