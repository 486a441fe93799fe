"""The Ray pods as KubeRay will create them, against a real kube-apiserver's validation.

Every pod template of every example is submitted as a Pod (server-side dry run): the hardened
securityContext is one the API server accepts. And what agentrl refuses before it renders
(Bidirectional propagation) is what the API server would refuse at pod creation, after the
RayJob exists, where KubeRay would retry it forever.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from tests.conftest import TEST_IMAGE, example_paths, example_policy, load_example
from tests.kube_checks import pod_templates
from tests.support.kube import KubeHarness

from agentrl.api.policy import load_policy
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, render_all

pytestmark = pytest.mark.e2e
NS = "rl"  # the examples' namespace


@pytest.fixture(scope="module")
def kube(kube_harness: KubeHarness) -> KubeHarness:
    """The namespace with what its pods name (no controller-manager here to make `default`)."""
    kube_harness.ensure_namespace(NS)
    kube_harness.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": NS}}
        for n in ("default", "agentrl-runner")
    ] + [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"name": "training-high"}, "value": 1000}])  # fmt: skip
    return kube_harness


def pods(name: str) -> list[dict[str, Any]]:
    exp, problems = parse_experiment(load_example(name), load_policy(example_policy(), "x"))
    assert exp is not None, problems
    out = []
    for template in pod_templates(render_all(exp, OperatorDefaults(image=TEST_IMAGE), {}).rayjob):
        meta = copy.deepcopy(template["metadata"])
        meta.update(name=f"{name}-{meta['labels']['agentrl.io/component']}", namespace=NS)
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                    "spec": copy.deepcopy(template["spec"])})  # fmt: skip
    return out


def dry_run(kube: KubeHarness, pod: dict[str, Any]) -> Any:
    return kube.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                        input=yaml.safe_dump(pod), check=False)  # fmt: skip


@pytest.mark.parametrize("name", [p.stem for p in example_paths()])
def test_the_hardened_pods_pass_server_validation(kube: KubeHarness, name: str) -> None:
    for pod in pods(name):
        proc = dry_run(kube, pod)
        assert proc.returncode == 0, f"{pod['metadata']['name']}: {proc.stderr}"


def test_bidirectional_propagation_is_what_the_server_refuses(kube: KubeHarness) -> None:
    pod = pods("qwen3-32b-swe-4node-tp-pp")[1]  # a GPU worker, with the FSx volume
    pod["spec"]["containers"][0]["volumeMounts"][-1]["mountPropagation"] = "Bidirectional"
    proc = dry_run(kube, pod)
    assert proc.returncode != 0
    assert "Bidirectional mount propagation is available only to privileged containers" in (
        proc.stderr
    )
