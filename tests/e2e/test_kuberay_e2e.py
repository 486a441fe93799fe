"""An old KubeRay on a real kube-apiserver: v1.1.1's RayJob CRD, the operator under the chart's
RBAC (which must let it read that CRD, and only that one).

The real API server prunes what v1.1.1 does not declare, so this shows both sides of the
decision: `startupDeadlineSeconds` would vanish (refused, nothing created), while
`backoffLimit: 0` does vanish and loses nothing (KubeRay reads its absence as 0), so the
experiment runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import yaml
from tests.conftest import minimal_body
from tests.support.kube import (
    KubeHarness,
    kuberay_crd_for_1_20,
    running_harness,
    wait_established,
)
from tests.support.shared import KUBERAY_SCHEMAS, require

from .operator_process import OperatorProcess, install_chart_rbac
from .test_operator_e2e import children, condition, events, experiment, status, wait

pytestmark = pytest.mark.e2e
OLD = KUBERAY_SCHEMAS / "v1.5.2" / "ray.io_rayjobs.yaml"  # no preRunningDeadlineSeconds yet
NS = "e2e-old-kuberay"


@pytest.fixture(scope="module")
def old_kuberay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeHarness]:
    """A control plane of its own (its KubeRay differs from the session one's)."""
    require(OLD, "KubeRay v1.5.2's RayJob CRD")
    with running_harness() as kube:
        kube.kubectl("delete", "crd", "rayjobs.ray.io")
        kube.kubectl("create", "--validate=false", "-f", "-",
                     input=json.dumps(kuberay_crd_for_1_20(OLD)))  # fmt: skip
        wait_established(kube, "rayjobs.ray.io")
        kube.ensure_namespace(NS)
        proc = OperatorProcess(install_chart_rbac(kube), tmp_path_factory.mktemp("old-kuberay"))
        proc.start()
        try:
            yield kube
        finally:
            proc.stop()
            print(proc.logs()[-3000:])


def apply(kube: KubeHarness, name: str, **spec: object) -> None:
    body = minimal_body(**spec)
    body["metadata"] = {"name": name, "namespace": NS}
    kube.apply(yaml.safe_dump(body))


def test_a_field_the_old_crd_lacks_is_refused(old_kuberay: KubeHarness) -> None:
    kube = old_kuberay
    apply(kube, "deadline", startupDeadlineSeconds=600)
    st = wait(lambda: status(kube, NS, "deadline").get("phase") == "Failed"
              and status(kube, NS, "deadline"), what="refused")  # fmt: skip
    cond = condition(st, "KubeRayIncompatible")
    assert cond["status"] == "True" and "spec.startupDeadlineSeconds" in cond["message"]
    assert "KubeRay >=" in cond["message"]
    assert children(kube, NS, "deadline") == []
    wait(lambda: [e["reason"] for e in events(kube, NS, "deadline")] == ["KubeRayIncompatible"],
         what="one event")  # fmt: skip
    version = experiment(kube, NS, "deadline")["metadata"]["resourceVersion"]
    time.sleep(4)  # several sweeps: no retry, no write
    assert experiment(kube, NS, "deadline")["metadata"]["resourceVersion"] == version
    assert [e["reason"] for e in events(kube, NS, "deadline")] == ["KubeRayIncompatible"]


def test_what_the_old_release_declares_runs(old_kuberay: KubeHarness) -> None:
    kube = old_kuberay
    apply(kube, "plain")
    st = wait(lambda: status(kube, NS, "plain").get("rayJobName") and status(kube, NS, "plain"),
              what="created")  # fmt: skip
    assert st["phase"] == "Pending" and not condition(st, "KubeRayIncompatible")
    job = kube.kubectl_json("get", "rayjobs.ray.io", "plain", "-n", NS)
    # v1.5 declares everything agentrl renders without a startup deadline: nothing dropped.
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["submitterConfig"]["backoffLimit"] > 0
    assert job["spec"]["shutdownAfterJobFinishes"] is True
