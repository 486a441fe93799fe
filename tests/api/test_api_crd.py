"""The generated CRD: checked in without drift, structural, and enforcing what it claims.

The schema is exercised with jsonschema (after the apiserver's structural defaulting), the
CEL rules with cel-python, transition rules (oldSelf) included: the local 1.20 apiserver
does not run CEL, so this is where those rules are proven.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.api.crd import IMMUTABLE_SPEC_FIELDS, MUTABLE_SPEC_FIELDS, crd
from agentrl.api.models import RLExperimentSpec, RLExperimentStatus
from agentrl.api.validation import parse_experiment
from agentrl.cli.main import crd_yaml
from conftest import ROOT, load_example, minimal_body
from kube_checks import (
    apply_defaults,
    cel_violations,
    core_errors,
    schema_errors,
    to_jsonschema,
)

CRD_FILE = ROOT / "crds" / "rlexperiments.agentrl.io.yaml"
SCHEMA = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
VALIDATOR = jsonschema.Draft7Validator(to_jsonschema(SCHEMA))


def admitted(body: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """What the apiserver would say: schema errors, then CEL messages (defaults applied)."""
    obj = apply_defaults(SCHEMA, copy.deepcopy(body))
    errs = schema_errors(VALIDATOR, obj)
    if errs:
        return errs
    prior = apply_defaults(SCHEMA, copy.deepcopy(old)) if old is not None else None
    return [f"{p}: {m}" for p, m in cel_violations(SCHEMA, obj, prior)]


def test_checked_in_crd_matches_the_models() -> None:
    assert CRD_FILE.read_text() == crd_yaml(), (
        "crds/ drifted from the models: run `agentrl crd > crds/rlexperiments.agentrl.io.yaml`"
    )
    assert yaml.safe_load(CRD_FILE.read_text()) == crd()


def _nodes(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for name, child in (node.get("properties") or {}).items():
            out += _nodes(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                out += _nodes(node[key], f"{path}[{key}]")
    return out


def test_schema_is_structural_and_clean() -> None:
    text = CRD_FILE.read_text()
    for junk in ("title:", "$ref", "$defs", "default: null"):
        assert junk not in text
    for path, node in _nodes(SCHEMA):
        if path.endswith(".metadata"):
            continue
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert "properties" not in node, path


def test_every_status_field_is_declared() -> None:
    status = SCHEMA["properties"]["status"]["properties"]
    wire = {f.alias or n for n, f in RLExperimentStatus.model_fields.items()}
    assert set(status) == wire
    assert set(status["progress"]["properties"]) >= {"rollout", "trainReward", "failedSessionRatio"}


def test_names_columns_and_subresource() -> None:
    spec = crd()["spec"]
    assert spec["names"]["shortNames"] == ["rlx", "rlexp"]
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    cols = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Phase", "Rollout", "Reward", "Eval", "Recent Fail Ratio", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Step Time", "ETA"]
    # Every column reads a field the status schema declares (an undeclared one is pruned).
    schema = version["schema"]["openAPIV3Schema"]
    for col in version["additionalPrinterColumns"]:
        if col["jsonPath"].startswith(".metadata."):
            continue
        node = schema
        for part in col["jsonPath"].split(".")[1:]:
            node = node["properties"][part]
        assert node["type"] in ("string", "integer", "number", "object"), col


def test_immutable_and_mutable_cover_every_spec_field() -> None:
    wire = {f.alias or n for n, f in RLExperimentSpec.model_fields.items()}
    assert set(IMMUTABLE_SPEC_FIELDS) | set(MUTABLE_SPEC_FIELDS) == wire
    assert not set(IMMUTABLE_SPEC_FIELDS) & set(MUTABLE_SPEC_FIELDS)


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_examples_are_admitted(path: str) -> None:
    assert admitted(load_example(path)) == []


BAD_SCHEMA = [
    ("unknown field", {"grpo": {"numRollouts": 1, "numRollout": 2}}, "numRollout"),
    ("wrong type", {"grpo": {"numRollouts": "ten"}}, "spec.grpo.numRollouts"),
    ("below minimum", {"grpo": {"numRollouts": 0}}, "spec.grpo.numRollouts"),
    ("enum", {"grpo": {"numRollouts": 1, "klLossType": "l2"}}, "spec.grpo.klLossType"),
    ("exclusive minimum", {"grpo": {"numRollouts": 1, "learningRate": 0}}, "learningRate"),
    ("bad quantity", {"resources": {"memory": "lots"}}, "spec.resources.memory"),
    ("negative quantity", {"resources": {"cpu": "-1"}}, "spec.resources.cpu"),
    ("negative numeric quantity", {"resources": {"cpu": -1}}, "spec.resources.cpu"),
    ("fractional exponent", {"resources": {"memory": "1e2.5"}}, "spec.resources.memory"),
    ("int32", {"activeDeadlineSeconds": 3_000_000_000}, "spec.activeDeadlineSeconds"),
    ("quoted integer", {"grpo": {"numRollouts": "10"}}, "spec.grpo.numRollouts"),
    ("quoted boolean", {"suspend": "false"}, "spec.suspend"),
    ("queue name", {"scheduling": {"queueName": "Not A Label!"}}, "spec.scheduling.queueName"),
    ("service account", {"runtime": {"serviceAccountName": "a_b"}}, "serviceAccountName"),
    ("gpu resource", {"resources": {"gpuResourceName": "memory"}}, "gpuResourceName"),
    ("relative checkpoint", {"checkpoint": {"path": "ckpt"}}, "spec.checkpoint.path"),
    ("url without host", {"gateway": {"publicUrl": "http://"}}, "spec.gateway.publicUrl"),
    ("s3 data", {"data": {"train": "s3://b/t.jsonl"}}, "spec.data.train"),
    ("renderer family", {"model": {"path": "/m", "type": "t", "rendererFamily": "qwen2.5"}},
     "rendererFamily"),
    ("long env value", {"runtime": {"env": [{"name": "A", "value": "x" * 40_000}]}}, "value"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "spec", "needle"), BAD_SCHEMA, ids=[b[0] for b in BAD_SCHEMA])
def test_schema_rejects(case: str, spec: dict[str, Any], needle: str) -> None:
    errs = admitted(minimal_body(**spec))
    assert errs and any(needle in e for e in errs), errs


def test_every_value_the_api_server_stores_is_bounded() -> None:
    """Integers carry a maximum (int32 unless said otherwise), strings a length or an enum:
    the API server refuses what KubeRay would, and CEL cost estimates stay finite."""
    spec = SCHEMA["properties"]["spec"]
    unbounded = []
    for path, node in _nodes(spec, "spec"):
        kind = node.get("type")
        if node.get("x-kubernetes-int-or-string"):
            assert "pattern" in node and "maxLength" in node and node.get("minimum") == 0, path
            continue
        big_int = kind == "integer" and not node.get("maximum", 2**31) <= 2**31 - 1
        long_str = kind == "string" and "maxLength" not in node and "enum" not in node
        if big_int or long_str:
            unbounded.append(path)
    assert unbounded == [], "give these fields bounds (see docs/adding-a-field.md)"


def test_quantities_accept_integers() -> None:
    assert admitted(minimal_body(resources={"cpu": 32, "memory": "256Gi"})) == []


BAD_CEL = [
    ("no backend", {"agent": {}}, "exactly one agent backend"),
    (
        "two backends",
        {"agent": {"http": {"url": "http://a"}, "agentCore": {
            "runtimeArn": "arn:aws:bedrock-agentcore:us-west-2:1:runtime/x",
            "region": "us-west-2", "s3Bucket": "bucket"}}},
        "exactly one agent backend",
    ),
    ("colocate without rollout GPUs", {"resources": {"colocate": False}},
     "rolloutGpus is required"),
    ("rollout GPUs while colocated", {"resources": {"rolloutGpus": 4}}, "only used when colocate"),
    ("all GPUs to rollout", {"resources": {"colocate": False, "rolloutGpus": 8}}, "leave GPUs"),
    ("parallelism", {"resources": {"parallelism": {"tensor": 3}}}, "divisible by tensor"),
    ("global batch", {"grpo": {"numRollouts": 1, "globalBatchSize": 100}}, "globalBatchSize"),
    (
        "source ranges on ClusterIP",
        {"gateway": {"service": {"loadBalancerSourceRanges": ["10.0.0.0/8"]}}},
        "only used by a LoadBalancer",
    ),
    ("save without path", {"checkpoint": {"saveInterval": 5}}, "checkpoint.path is required"),
    ("checkpoint in a mount", {"checkpoint": {"path": "/etc/agentrl/ckpt"}},
     "must not be inside a directory agentrl mounts"),
    ("gpu resource in kubernetes.io", {"resources": {"gpuResourceName": "kubernetes.io/gpu"}},
     "device plugin's resource"),
    (
        "env with both sources",
        {"runtime": {"env": [{"name": "A", "value": "1",
                              "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
        "exactly one of value or valueFrom",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "spec", "needle"), BAD_CEL, ids=[b[0] for b in BAD_CEL])
def test_cel_rejects(case: str, spec: dict[str, Any], needle: str) -> None:
    errs = admitted(minimal_body(**spec))
    assert any(needle in e for e in errs), errs


@pytest.mark.parametrize(("name", "ok"), [("a" * 47, True), ("a" * 48, False), ("9lives", False)])
def test_cel_name_rules(name: str, ok: bool) -> None:
    body = minimal_body()
    body["metadata"]["name"] = name
    assert (admitted(body) == []) is ok


def test_duplicate_eval_names_are_a_list_map_conflict() -> None:
    node = SCHEMA["properties"]["spec"]["properties"]["data"]["properties"]["eval"]
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == ["name"]


@pytest.mark.parametrize("field", IMMUTABLE_SPEC_FIELDS)
def test_immutable_fields_refuse_updates(field: str) -> None:
    old = load_example("qwen2.5-3b-gsm8k-agentcore")
    new = copy.deepcopy(old)
    new["spec"].setdefault(field, {})
    new["spec"][field] = {**new["spec"][field], **_changed(field)}
    errs = admitted(new, old)
    assert any(f"spec.{field} is immutable" in e for e in errs), errs


def _changed(field: str) -> dict[str, Any]:
    return {
        "model": {"type": "qwen2.5-7B"},
        "data": {"evalInterval": 99},
        "agent": {"maxConcurrent": 7},
        "grpo": {"numRollouts": 5},
        "gateway": {"logLevel": "debug"},
        "resources": {"cpu": "31"},
        "runtime": {"extraArgs": ["--seed", "1"]},
        "checkpoint": {"resume": False},
        "tracking": {"wandb": {"project": "p", "apiKeySecret": {"name": "w", "key": "k"}}},
    }[field]


def test_lifecycle_fields_may_change() -> None:
    old = load_example("qwen2.5-3b-gsm8k-agentcore")
    new = copy.deepcopy(old)
    new["spec"].update(
        suspend=True,
        activeDeadlineSeconds=10,
        startupDeadlineSeconds=20,
        backoffLimit=3,
        ttlSecondsAfterFinished=600,
        scheduling={"queueName": "gpu-queue"},
    )
    assert admitted(new, old) == []


def test_crd_file_is_one_valid_crd() -> None:
    """apiextensions.k8s.io/v1 as Kubernetes 1.30 defines it (strict: no unknown fields)."""
    docs = list(yaml.safe_load_all(CRD_FILE.read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"
    assert core_errors(docs[0]) == []


@pytest.mark.parametrize(("case", "spec", "needle"), BAD_CEL, ids=[b[0] for b in BAD_CEL])
def test_cel_and_validation_agree(case: str, spec: dict[str, Any], needle: str) -> None:
    """What the API server refuses, `agentrl validate` refuses too (and says why)."""
    exp, problems = parse_experiment(minimal_body(**spec))
    assert exp is None, f"{case}: the CRD refuses it but validation accepts it"
    assert any(p.severity == "error" for p in problems)


def test_what_the_schema_refuses_in_the_hostile_corpus_validation_refuses() -> None:
    from agentrl.cli.load import LoadError, load_documents

    checked = 0
    for path in sorted((ROOT / "tests" / "api" / "hostile").glob("*.yaml")):
        text = path.read_text()
        if "{{repeat" in text:
            continue
        try:
            docs = load_documents([str(path)])
        except LoadError:
            continue
        body = docs[0].body
        if not isinstance(body, dict) or docs[0].problems or not isinstance(body.get("spec"), dict):
            continue
        if admitted(body):
            checked += 1
            assert parse_experiment(body)[0] is None, path.name
    assert checked >= 50


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    """Experiments with random GPU layouts and batch sizes, valid or not."""
    resources: dict[str, Any] = {
        "nodes": draw(st.integers(1, 4)),
        "gpusPerNode": draw(st.sampled_from([1, 2, 4, 8])),
        "colocate": draw(st.booleans()),
        "parallelism": {"tensor": draw(st.sampled_from([1, 2, 3, 4])),
                        "pipeline": draw(st.sampled_from([1, 2]))},
    }  # fmt: skip
    if draw(st.booleans()):
        resources["rolloutGpus"] = draw(st.integers(1, 40))
    grpo: dict[str, Any] = {"numRollouts": 1}
    if draw(st.booleans()):
        grpo["globalBatchSize"] = draw(st.sampled_from([7, 16, 64, 256, 512]))
    return minimal_body(resources=resources, grpo=grpo)


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_whatever_cel_refuses_validation_refuses(body: dict[str, Any]) -> None:
    if admitted(body):
        assert parse_experiment(body)[0] is None
