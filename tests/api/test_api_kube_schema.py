"""The vendored core/v1 definitions equal kubernetes-validate's, and our small validator
judges pass-through objects as a JSON Schema validator does on kubernetes-validate's own
strict schema (types, unknown and required fields), plus the ranges and quantities it adds.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.api import kube_schema
from conftest import ROOT, example_paths, load_example

VENDOR = ROOT / "hack" / "vendor-core-schemas.py"


def _vendor_script() -> Any:
    spec = importlib.util.spec_from_file_location("vendor_core_schemas", VENDOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VENDORED = _vendor_script()


def upstream_validator(kind: str) -> jsonschema.protocols.Validator:
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = base / f"v{VENDORED.KUBERNETES_VERSION}-local-strict" / "_definitions.json"
    doc = json.loads(path.read_text())
    schema = {"$schema": doc["$schema"], "$defs": doc["$defs"], "$ref": f"#/$defs/{kind}"}
    return jsonschema.Draft202012Validator(schema)


def test_vendored_definitions_match_the_installed_package() -> None:
    path = ROOT / "operator" / "agentrl" / "api" / "schemas" / "core-v1.json"
    assert path.read_text() == VENDORED.render(), (
        "operator/agentrl/api/schemas/core-v1.json is stale: run hack/vendor-core-schemas.py"
    )
    assert kube_schema.schemas()["roots"] == list(VENDORED.ROOTS)


def _objects_of_the_examples() -> list[tuple[str, Any]]:
    out = []
    for path in example_paths():
        spec = load_example(path.name)["spec"]
        out += [(kube_schema.VOLUME, v) for v in spec.get("runtime", {}).get("volumes", [])]
        out += [(kube_schema.VOLUME_MOUNT, m)
                for m in spec.get("runtime", {}).get("volumeMounts", [])]  # fmt: skip
        res = spec.get("resources", {})
        out += [(kube_schema.TOLERATION, t) for t in res.get("tolerations", [])]
        if "affinity" in res:
            out.append((kube_schema.AFFINITY, res["affinity"]))
    return out


GOOD = [
    *_objects_of_the_examples(),
    (kube_schema.VOLUME, {"name": "m", "persistentVolumeClaim": {"claimName": "m",
                                                                  "readOnly": True}}),
    (kube_schema.VOLUME, {"name": "s", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}),
    (kube_schema.VOLUME, {"name": "p", "projected": {"sources": [
        {"serviceAccountToken": {"path": "t", "expirationSeconds": 3600, "audience": "sts"}}]}}),
    (kube_schema.VOLUME, {"name": "e", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": 5}}}}}}),
    (kube_schema.VOLUME_MOUNT, {"name": "m", "mountPath": "/m", "subPath": "a",
                                "mountPropagation": "None"}),
    (kube_schema.TOLERATION, {"key": "k", "operator": "Exists", "effect": "NoExecute",
                              "tolerationSeconds": 30}),
]  # fmt: skip
BAD = [
    (kube_schema.VOLUME, {"name": "m", "persistentVolumeClaim": {"claimNme": "m"}}),
    (kube_schema.VOLUME, {"persistentVolumeClaim": {"claimName": "m"}}),
    (kube_schema.VOLUME, {"name": 5, "emptyDir": {}}),
    (kube_schema.VOLUME, {"name": "m", "emptyDir": []}),
    (kube_schema.VOLUME, {"name": "m", "configMap": {"name": "c", "items": {"key": "a"}}}),
    (kube_schema.VOLUME_MOUNT, {"name": "m"}),
    (kube_schema.VOLUME_MOUNT, {"name": "m", "mountPath": "/m", "readOnly": "yes"}),
    (kube_schema.TOLERATION, {"key": "k", "operater": "Exists"}),
    (kube_schema.TOLERATION, {"key": "k", "tolerationSeconds": "30"}),
    (kube_schema.AFFINITY, {"nodeAfinity": {}}),
    (kube_schema.AFFINITY, {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"a": 1}}, "topologyKey": "k"}]}}),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "obj"), GOOD + BAD)
def test_agrees_with_json_schema_on_the_upstream_definitions(kind: str, obj: Any) -> None:
    ours = kube_schema.check(obj, kind, "x")
    theirs = list(upstream_validator(kind).iter_errors(obj))
    assert bool(ours) == bool(theirs), (ours, [e.message for e in theirs])


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Any]:
    """A valid object with one random change: a key dropped, added, or retyped."""
    kind, obj = draw(st.sampled_from(GOOD))
    obj = copy.deepcopy(obj)
    node = obj
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        if not isinstance(node[key], dict) or not node[key]:
            break
        node = node[key]
    if not isinstance(node, dict):
        return kind, obj
    action = draw(st.sampled_from(["drop", "add", "retype"]))
    if action == "add":
        node[draw(st.sampled_from(["nme", "claimNme", "readonly", "x"]))] = 1
    elif node:
        key = draw(st.sampled_from(sorted(node)))
        if action == "drop":
            del node[key]
        else:
            node[key] = draw(st.sampled_from([1, "s", True, [], {}, None, 1.5]))
    return kind, obj


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_agrees_on_random_mutations(sample: tuple[str, Any]) -> None:
    kind, obj = sample
    ours = kube_schema.check(obj, kind, "x")
    theirs = list(upstream_validator(kind).iter_errors(obj))
    # Ours also checks quantities and int32 ranges, which JSON Schema leaves to the server.
    extra = [f for f in ours if "quantity" in f[1] or "range" in f[1]]
    assert bool(ours) == bool(theirs) or (ours == extra and not theirs), (
        obj, ours, [e.message for e in theirs]
    )  # fmt: skip


def test_ranges_and_quantities_the_schema_only_names() -> None:
    found = kube_schema.check({"key": "k", "tolerationSeconds": 2**63}, kube_schema.TOLERATION, "t")
    assert [f[0] for f in found] == ["t.tolerationSeconds"]
    volume = {"name": "v", "emptyDir": {"sizeLimit": "1e2.5Gi"}}
    assert [f[0] for f in kube_schema.check(volume, kube_schema.VOLUME, "v")] == [
        "v.emptyDir.sizeLimit"
    ]


def test_a_misspelt_required_field_is_one_problem() -> None:
    found = kube_schema.check(
        {"name": "m", "persistentVolumeClaim": {"claimNme": "m"}}, kube_schema.VOLUME, "v"
    )
    assert [(f[0], f[2]) for f in found] == [
        ("v.persistentVolumeClaim.claimNme", "did you mean 'claimName'?")
    ]
