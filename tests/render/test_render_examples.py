"""Every example renders to objects a cluster would accept: KubeRay's v1 schema and
controller rules for the RayJob, Kubernetes 1.30's schemas (strict) for core objects."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.api.constants import LABEL_EXPERIMENT, LABEL_MANAGED_BY
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all
from conftest import load_example
from kube_checks import (
    core_errors,
    kuberay_controller_errors,
    pod_templates,
    rayjob_schema_errors,
)

DEFAULTS = OperatorDefaults(image="runtime@sha256:" + "1" * 64)  # the operator's default
EXAMPLE_A = "qwen2.5-3b-gsm8k-agentcore"


def rayjob_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    return job


def render(body: dict[str, Any]) -> list[dict[str, Any]]:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return list(render_all(exp, DEFAULTS, collect_bundle_files()))


def test_apply_order(example_body: dict[str, Any]) -> None:
    kinds = [o["kind"] for o in render(example_body)]
    assert kinds == ["ConfigMap", "ConfigMap", "Service", "Service", "RayJob"]


def test_rayjob_passes_kuberay_schema_and_controller(example_body: dict[str, Any]) -> None:
    job = rayjob_of(render(example_body))
    assert rayjob_schema_errors(job) == []
    assert kuberay_controller_errors(job) == []


def test_core_objects_pass_kubernetes_strict(example_body: dict[str, Any]) -> None:
    for obj in render(example_body):
        if obj["kind"] != "RayJob":
            assert core_errors(obj) == [], obj["metadata"]["name"]


def test_pod_templates_pass_kubernetes_strict(example_body: dict[str, Any]) -> None:
    job = rayjob_of(render(example_body))
    for template in pod_templates(job):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, **template}
        pod["metadata"] = {"name": "x", **template["metadata"]}
        assert core_errors(pod) == []


def test_labels_on_every_child_and_pod_template(example_body: dict[str, Any]) -> None:
    name = example_body["metadata"]["name"]
    objects = render(example_body)
    job = rayjob_of(objects)
    for meta in [o["metadata"] for o in objects] + [t["metadata"] for t in pod_templates(job)]:
        assert meta["labels"][LABEL_EXPERIMENT] == name
        assert meta["labels"][LABEL_MANAGED_BY] == "agentrl"


@pytest.mark.parametrize("bad", ["suspend-without-shutdown", "ttl-without-shutdown"])
def test_controller_rules_catch_what_the_schema_allows(bad: str) -> None:
    """The helper itself must fail on what KubeRay's controller refuses."""
    (job,) = [
        o for o in render(load_example("qwen2.5-3b-gsm8k-agentcore")) if o["kind"] == "RayJob"
    ]
    job["spec"]["shutdownAfterJobFinishes"] = False
    if bad == "suspend-without-shutdown":
        job["spec"]["suspend"] = True
    else:
        job["spec"]["ttlSecondsAfterFinished"] = 60
    assert rayjob_schema_errors(job) == []
    assert kuberay_controller_errors(job) != []


def test_schema_check_catches_a_typo() -> None:
    (job,) = [
        o for o in render(load_example("qwen2.5-3b-gsm8k-agentcore")) if o["kind"] == "RayJob"
    ]
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParam"] = {}
    job["spec"]["backoffLimit"] = "x"
    errors = rayjob_schema_errors(job)
    assert any("rayStartParam" in e for e in errors)
    assert any("backoffLimit" in e for e in errors)


def test_vendored_kuberay_crd_is_the_documented_copy() -> None:
    """tests/data/kuberay holds KubeRay's file verbatim (hash in its README)."""
    import hashlib
    from pathlib import Path

    data = Path(__file__).parent.parent / "data" / "kuberay"
    digest = hashlib.sha256((data / "ray.io_rayjobs.yaml").read_bytes()).hexdigest()
    assert digest in (data / "README.md").read_text()
