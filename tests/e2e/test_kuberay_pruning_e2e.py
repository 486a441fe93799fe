"""`agentrl.render.kuberay.pruned_fields` agrees with a real kube-apiserver's pruning.

Each KubeRay release's `rayjobs.ray.io` is installed under a group of its own (so releases do
not collide with the session's KubeRay CRD), a rendered RayJob plus a few unknown fields is
created, and what the API server stored is compared with what was sent: the fields that
vanished must be exactly the ones `pruned_fields` predicted. A small CRD does the same for
the rules KubeRay's schema does not use (preserve-unknown-fields, additionalProperties,
embedded resources).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.kube_checks import kuberay_releases, rayjob_crd
from tests.support.kube import KubeHarness, _strip_for_1_20, wait_established

from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all
from agentrl.render.kuberay import pruned_fields

pytestmark = pytest.mark.e2e
NS = "pruning"
DEFAULTS = OperatorDefaults(image="runtime@sha256:" + "1" * 64)  # a test value, never pulled


@pytest.fixture(scope="module")
def kube(kube_harness: KubeHarness) -> KubeHarness:
    kube_harness.ensure_namespace(NS)
    return kube_harness


def install(kube: KubeHarness, crd: dict[str, Any], group: str) -> dict[str, Any]:
    """`crd` under `group`, v1 only, made acceptable to the 1.20 API server."""
    crd = copy.deepcopy(crd)
    crd["spec"]["group"] = group
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    crd["spec"]["versions"][0]["storage"] = True
    crd["spec"]["versions"][0].pop("subresources", None)  # status stays part of the object
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    _strip_for_1_20(crd)
    if kube.kubectl("get", "crd", crd["metadata"]["name"], check=False).returncode != 0:
        kube.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(crd))
    wait_established(kube, crd["metadata"]["name"])
    return crd


def stored(kube: KubeHarness, obj: dict[str, Any]) -> dict[str, Any]:
    proc = kube.kubectl("create", "--validate=false", "-o", "json", "-f", "-",
                        input=json.dumps(obj))  # fmt: skip
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def vanished(sent: Any, kept: Any, path: str = "") -> list[str]:
    """Paths present in `sent` and missing from `kept` (what the server added is ignored)."""
    out: list[str] = []
    if isinstance(sent, dict) and isinstance(kept, dict):
        for key, value in sent.items():
            where = f"{path}.{key}" if path else key
            if key not in kept:
                out.append(where)
            else:
                out += vanished(value, kept[key], where)
    elif isinstance(sent, list) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(sent, kept, strict=False)):
            out += vanished(a, b, f"{path}[{i}]")
    return out


def rayjob(group: str, name: str) -> dict[str, Any]:
    exp, problems = parse_experiment(minimal_body(startupDeadlineSeconds=600, backoffLimit=2))
    assert exp is not None, problems
    job = copy.deepcopy(render_all(exp, DEFAULTS, collect_bundle_files()).rayjob)
    job["apiVersion"] = f"{group}/v1"
    job["metadata"] = {"name": name, "namespace": NS, "labels": job["metadata"]["labels"],
                       "annotations": job["metadata"]["annotations"]}  # fmt: skip
    # Unknown fields at a few depths, so pruning happens on every release.
    job["spec"]["notAField"] = {"x": 1}
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    head["metadata"]["generateName"] = "head-"  # KubeRay declares five metadata fields
    head["spec"]["containers"][0]["notAField"] = True
    return job


RELEASES = kuberay_releases()


@pytest.mark.parametrize("release", RELEASES)
def test_the_server_prunes_exactly_what_pruned_fields_predicts(
    kube: KubeHarness, release: str
) -> None:
    group = f"{release.replace('.', '-')}.pruning.test"
    crd = install(kube, rayjob_crd(release), group)
    sent = rayjob(group, "demo")
    predicted = pruned_fields(sent, crd)
    assert "spec.notAField" in predicted  # something is pruned on every release
    assert vanished(sent, stored(kube, sent)) == predicted


def test_the_server_agrees_on_preserve_additional_and_embedded(kube: KubeHarness) -> None:
    known = {"type": "object", "properties": {"k": {"type": "integer"}}}
    embedded = {"type": "object", "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {
                    "n": {"type": "integer"}}}}}  # fmt: skip
    spec = {
        "type": "object",
        "properties": {
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"known": known}},
            "pools": {"type": "object", "additionalProperties": known},
            "items": {"type": "array", "items": known},
            "template": embedded,
        },
    }  # fmt: skip
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}],
        },
    }  # fmt: skip
    crd = install(kube, crd, "rules.pruning.test")
    sent = {
        "apiVersion": "rules.pruning.test/v1", "kind": "Thing",
        "metadata": {"name": "a", "namespace": NS, "colour": "red"},
        "spec": {
            "free": {"anything": {"deep": [1]}, "known": {"k": 1, "bad": 2}},
            "pools": {"gpu": {"k": 1, "bad": 2}, "cpu": {"k": 2}},
            "items": [{"k": 1}, {"k": 2, "bad": 3}],
            "template": {"apiVersion": "v1", "kind": "Pod", "spec": {"n": 1, "m": 2},
                         "metadata": {"name": "x", "labels": {"a": "b"}, "colour": "red"}},
            "unknown": 1,
        },
    }  # fmt: skip
    predicted = pruned_fields(sent, crd)
    assert predicted == [
        "metadata.colour",  # ObjectMeta decoding, at the root and in embedded resources
        "spec.free.known.bad",
        "spec.pools.gpu.bad",
        "spec.items[1].bad",
        "spec.template.spec.m",
        "spec.template.metadata.colour",
        "spec.unknown",
    ]
    assert vanished(sent, stored(kube, sent)) == predicted
