"""The harness itself: CRDs served, schema validation on, RBAC enforced, tokens real."""

from __future__ import annotations

import pytest
import yaml
from tests.conftest import minimal_body
from tests.support.kube import KubeHarness

pytestmark = pytest.mark.e2e


def test_crds_established_and_validating(kube_harness: KubeHarness) -> None:
    names = {c["metadata"]["name"] for c in kube_harness.kubectl_json("get", "crd")["items"]}
    assert {"rlexperiments.agentrl.io", "rayjobs.ray.io"} <= names
    kube_harness.ensure_namespace("harness")
    bad = minimal_body()
    bad["metadata"] = {"name": "bad", "namespace": "harness"}
    bad["spec"]["grpo"]["numRollouts"] = "many"
    proc = kube_harness.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert proc.returncode != 0
    assert "numRollouts" in proc.stderr


def test_rbac_applies_to_service_accounts_and_users(kube_harness: KubeHarness) -> None:
    sa = kube_harness.service_account_kubeconfig("harness-sa", "nobody")
    denied = kube_harness.kubectl("auth", "can-i", "list", "rayjobs.ray.io", kubeconfig=sa,
                                  check=False)  # fmt: skip
    assert denied.stdout.strip() == "no"
    kube_harness.kubectl("create", "clusterrole", "harness-reader", "--verb=list",
                         "--resource=rayjobs.ray.io")  # fmt: skip
    kube_harness.kubectl("create", "clusterrolebinding", "harness-reader",
                         "--clusterrole=harness-reader",
                         "--serviceaccount=harness-sa:nobody", "--user=alice")  # fmt: skip
    allowed = kube_harness.kubectl("auth", "can-i", "list", "rayjobs.ray.io", kubeconfig=sa)
    assert allowed.stdout.strip() == "yes"
    alice = kube_harness.user_kubeconfig("alice")
    assert kube_harness.kubectl("get", "rayjobs", "-A", kubeconfig=alice).returncode == 0
    forbidden = kube_harness.kubectl("get", "pods", "-A", kubeconfig=alice, check=False)
    assert forbidden.returncode != 0 and "forbidden" in forbidden.stderr
