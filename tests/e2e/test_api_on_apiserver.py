"""The CRD and the rendered objects against a real kube-apiserver (1.20, no CEL).

What only a real API server can say: the generated CRD is accepted as a structural schema
with valid defaults, it fills those defaults in, serves the status subresource and the
printer columns, refuses type errors; and every object `agentrl render` prints for the
examples passes the server's own validation (server-side dry run), KubeRay's CRD included.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from tests.conftest import example_paths, load_example, minimal_body
from tests.support.kube import KubeHarness

from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all

pytestmark = pytest.mark.e2e
NS = "rl"  # the examples' namespace


@pytest.fixture(scope="module")
def kube(kube_harness: KubeHarness) -> KubeHarness:
    kube_harness.ensure_namespace(NS)
    return kube_harness


def kubectl_apply(kube: KubeHarness, obj: Any, *flags: str) -> Any:
    return kube.kubectl("apply", *flags, "-f", "-", input=yaml.safe_dump(obj), check=False)


@pytest.mark.parametrize("name", [p.stem for p in example_paths()])
def test_examples_are_stored_with_defaults_filled_in(kube: KubeHarness, name: str) -> None:
    body = load_example(name)
    proc = kubectl_apply(kube, body)
    assert proc.returncode == 0, proc.stderr
    stored = kube.kubectl_json("get", "rlx", body["metadata"]["name"], "-n", NS, "-o", "json")
    spec = stored["spec"]
    assert spec["grpo"]["epsClipHigh"] == 0.28  # defaults come from the CRD schema
    assert spec["gateway"]["service"]["type"] in ("ClusterIP", "LoadBalancer")
    assert spec["resources"]["head"]["memory"]
    # What the server stored is still a valid experiment, unchanged in meaning.
    exp, problems = parse_experiment(stored)
    assert exp is not None and problems == []
    assert exp.spec == parse_experiment(body)[0].spec  # type: ignore[union-attr]


def test_type_errors_are_refused(kube: KubeHarness) -> None:
    body = minimal_body(resources={"nodes": 0, "memory": "lots"})
    body["metadata"]["name"] = "typed-badly"
    proc = kubectl_apply(kube, body)
    assert proc.returncode != 0
    assert "spec.resources.nodes" in proc.stderr and "spec.resources.memory" in proc.stderr


def test_status_subresource_and_printer_columns(kube: KubeHarness) -> None:
    body = minimal_body()
    body["metadata"]["name"] = "columns"
    assert kubectl_apply(kube, body).returncode == 0
    status = {
        "status": {
            "phase": "Running",
            "observedGeneration": 1,
            "progress": {
                "rollout": 7,
                "totalRollouts": 10,
                "rolloutText": "8/10",
                "trainReward": 0.42,
                "evalReward": 0.5,
                "failedSessionRatio": 0.05,
                "stepSeconds": 95.5,
                "eta": "2026-01-01T05:00:00Z",
            },
        }
    }
    kube.kubectl("patch", "rlx", "columns", "-n", NS, "--subresource=status", "--type=merge",
                 "-p", json.dumps(status))  # fmt: skip
    table = kube.kubectl("get", "rlx", "columns", "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "ROLLOUT", "REWARD", "EVAL", "RECENT", "FAIL",
                                "RATIO", "AGE"]  # fmt: skip
    assert table[1].split()[:6] == ["columns", "Running", "8/10", "0.42", "0.5", "0.05"]
    wide = kube.kubectl("get", "rlx", "columns", "-n", NS, "-o", "wide").stdout.splitlines()
    assert "STEP TIME" in wide[0] and "ETA" in wide[0]
    assert wide[1].split()[6:8] == ["95.5", "2026-01-01T05:00:00Z"]
    stored = kube.kubectl_json("get", "rlexp", "columns", "-n", NS, "-o", "json")
    assert stored["status"]["progress"]["totalRollouts"] == 10  # declared, so not pruned


@pytest.mark.parametrize("name", [p.stem for p in example_paths()])
def test_rendered_objects_pass_server_validation(kube: KubeHarness, name: str) -> None:
    exp, problems = parse_experiment(load_example(name))
    assert exp is not None, problems
    defaults = OperatorDefaults(image="runtime@sha256:" + "1" * 64)  # a test value
    objects = render_all(exp, defaults, collect_bundle_files())
    for obj in objects:
        # Server-side apply, as docs/render.md advises: client-side `kubectl apply` would copy
        # the bundle ConfigMap into an annotation capped at 256 KiB.
        proc = kubectl_apply(kube, obj, "--server-side", "--dry-run=server")
        assert proc.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {proc.stderr}"


# What the CRD's schema (patterns, lengths, bounds, enums; no CEL on 1.20) makes the API
# server itself refuse, each at its field, with `agentrl validate` refusing the same field.
REFUSED_BY_THE_SCHEMA = [
    ("queue-label", {"scheduling": {"queueName": "Not A Label!"}}, "spec.scheduling.queueName"),
    ("deadline-int32", {"activeDeadlineSeconds": 3_000_000_000}, "spec.activeDeadlineSeconds"),
    ("sa-name", {"runtime": {"serviceAccountName": "agent_sa"}},
     "spec.runtime.serviceAccountName"),
    ("cpu-negative", {"resources": {"cpu": "-1"}}, "spec.resources.cpu"),
    ("memory-negative-int", {"resources": {"memory": -5}}, "spec.resources.memory"),
    ("memory-fractional-exponent", {"resources": {"memory": "1e2.5"}}, "spec.resources.memory"),
    ("gpu-resource-memory", {"resources": {"gpuResourceName": "memory"}},
     "spec.resources.gpuResourceName"),
    ("checkpoint-relative", {"checkpoint": {"path": "ckpt"}}, "spec.checkpoint.path"),
    ("public-url-no-host", {"gateway": {"publicUrl": "http://"}}, "spec.gateway.publicUrl"),
    ("public-url-query", {"gateway": {"publicUrl": "https://gw.example.com/?token=t"}},
     "spec.gateway.publicUrl"),
    ("agent-url-query", {"agent": {"http": {"url": "https://fn.example.net/api/run?code=k"}}},
     "spec.agent.http.url"),
    ("train-s3", {"data": {"train": "s3://bucket/train.jsonl"}}, "spec.data.train"),
    ("int-as-string", {"grpo": {"numRollouts": "10"}}, "spec.grpo.numRollouts"),
    ("bool-as-string", {"suspend": "false"}, "spec.suspend"),
    ("renderer-family",
     {"model": {"path": "/models/q", "type": "qwen2.5-0.5B", "rendererFamily": "qwen2.5"}},
     "spec.model.rendererFamily"),
    ("configmap-name", {"runtime": {"extraCode": [{"configMap": "My Tools"}]}},
     "spec.runtime.extraCode[0].configMap"),
    ("node-selector-value", {"resources": {"nodeSelector": {"pool": "gpu nodes"}}},
     "spec.resources.nodeSelector.pool"),
    ("priority-class", {"resources": {"priorityClassName": "High Priority"}},
     "spec.resources.priorityClassName"),
    ("wandb-host", {"tracking": {"wandb": {"project": "p", "host": "wandb.example.com",
                                           "apiKeySecret": {"name": "w", "key": "k"}}}},
     "spec.tracking.wandb.host"),
    ("secret-key", {"tracking": {"wandb": {"project": "p",
                                           "apiKeySecret": {"name": "w", "key": "bad key"}}}},
     "spec.tracking.wandb.apiKeySecret.key"),
    ("env-value-too-long", {"runtime": {"env": [{"name": "BIG", "value": "x" * 40_000}]}},
     "spec.runtime.env[0].value"),
    ("image-reference", {"runtime": {"image": "Team/Slime :1"}}, "spec.runtime.image"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "spec", "field"), REFUSED_BY_THE_SCHEMA, ids=[c[0] for c in REFUSED_BY_THE_SCHEMA]
)
def test_the_api_server_refuses_what_validation_refuses(
    kube: KubeHarness, case: str, spec: dict[str, Any], field: str
) -> None:
    body = minimal_body(**spec)
    body["metadata"]["name"] = f"refused-{case}"
    proc = kubectl_apply(kube, body)
    assert proc.returncode != 0, f"{case}: the API server stored it"
    # The 1.20 API server names list items without their index (spec.runtime.env.value).
    assert re.sub(r"\[\d+\]", "", field) in proc.stderr, proc.stderr
    exp, problems = parse_experiment(body)
    assert exp is None and field in {p.path for p in problems}, problems
