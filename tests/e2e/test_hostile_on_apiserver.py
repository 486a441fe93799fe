"""The hostile corpus against the real kube-apiserver: what `validate` admits, it accepts.

Every corpus case `agentrl validate` admits (warned or clean) is applied with the real
kubectl, as the file is written, then every object `agentrl render` prints for it (server-side
apply) and the pods KubeRay would make from its RayJob, all as server-side dry runs
(`benchmarks/hostile_specs.py --apiserver` is the same code). And what `validate` now
refuses because a pod would be refused is refused by the API server itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support import hostile_specs
from tests.support.kube import KubeHarness

pytestmark = pytest.mark.e2e
NS = "rl"


hs = hostile_specs.load()


def test_every_admitted_case_is_accepted_with_its_objects_and_pods(
    kube_harness: KubeHarness, tmp_path: Path
) -> None:
    verdicts = hs.judge(hs.load_corpus(hs.CORPUS), isolated=False)
    admitted = hs.admitted(verdicts)
    assert len(admitted) >= 10  # never vacuous: the warned cases are all applied
    assert hs.apiserver_refusals(kube_harness, [v.case for v in admitted], str(tmp_path)) == {}


def _pod(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, **meta},
        "spec": {"automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": "busybox@sha256:" + "1" * 64}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("case", "pod"),
    [
        ("k8s-label-key-name-64", _pod("a", labels={"example.com/" + "n" * 64: "x"})),
        ("k8s-annotation-prefix-254",
         _pod("b", annotations={".".join(["a" * 62] * 4) + ".ab/x": "y"})),
    ],
)  # fmt: skip
def test_what_validate_refuses_for_the_pods_the_api_server_refuses(
    kube_harness: KubeHarness, case: str, pod: dict[str, Any]
) -> None:
    """Labels and annotations reach every pod (spec.runtime.podLabels/podAnnotations); the
    CRD cannot check map keys, so before these rules the experiment was stored and KubeRay's
    pod creation failed."""
    kube_harness.ensure_namespace(NS)
    kube_harness.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "default", "namespace": NS}})  # fmt: skip

    def create(obj: dict[str, Any]) -> Any:
        # JSON: PyYAML would write the value y unquoted, which kubectl reads as true.
        return kube_harness.kubectl("create", "--dry-run=server", "-f", "-",
                                    input=json.dumps(obj), check=False)  # fmt: skip

    proc = create(pod)
    assert proc.returncode != 0 and "Invalid value" in proc.stderr, proc.stderr
    assert create(_pod("control", labels={"example.com/n": "x"})).returncode == 0
    (verdict,) = hs.judge([c for c in hs.load_corpus(hs.CORPUS) if c.name == f"{case}.yaml"],
                          isolated=False)  # fmt: skip
    assert verdict.outcome == hs.REFUSED
