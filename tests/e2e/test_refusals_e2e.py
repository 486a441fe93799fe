"""Every admitted spec ends in an honest state, on a real kube-apiserver.

The API server admits these experiments but refuses a child they render (422), or refuses
every child because of the namespace's quota (403). The operator, under the chart's RBAC,
must end each one Failed with the API server's own words in a condition, post one event, and
stop: no retry, no further writes, until the spec changes.

The 422 cases were gaps of `agentrl validate` and of the CRD's schema when they were
found; each layer may learn to refuse them first, and the test follows whichever refuses
first: the CRD's schema (the API server refuses the experiment itself, naming the field),
then validation (`InvalidSpec`, with the same one-event-and-stop guarantee), then the
child's 422. The quota case is out of both layers' reach (it depends on the cluster), so the
API server's refusal of a child is always exercised.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from tests.conftest import minimal_body
from tests.support.kube import KubeHarness

from agentrl.api.validation import errors, parse_experiment

from .test_operator_e2e import (
    children,
    condition,
    events,
    experiment,
    metrics_url,
    operator,
    reasons_become,
    status,
    wait,
)

__all__ = ["metrics_url", "operator"]
pytestmark = pytest.mark.e2e
NS = "e2e-refusals"
# Seconds of sweeps (AGENTRL_SWEEP_INTERVAL=1 in the e2e operator) after which nothing may
# have been retried.
QUIET = 4.0

CASES = {
    # The RayJob's labels carry the Kueue queue name, and label values have a grammar.
    "bad-queue-label": ({"scheduling": {"queueName": "Not A Label!"}}, "RayJob", "labels"),
    # Annotation keys are qualified names; the Service carries these verbatim.
    "bad-service-annotation": (
        {"gateway": {"service": {"annotations": {"bad key!": "x"}}}},
        "Service",
        "annotations",
    ),
    # extraArgs land in the runtime-config ConfigMap, which holds at most 1 MiB.
    "configmap-over-1mib": (
        {"runtime": {"extraArgs": ["--note", "x" * 1_100_000]}},
        "ConfigMap",
        "1048576",
    ),
}


def body_for(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = minimal_body(**spec)
    body["metadata"] = {"name": name, "namespace": NS}
    return body


def create(kube: KubeHarness, body: dict[str, Any]) -> str | None:
    """The API server's refusal of the experiment itself, or None when it was created."""
    # `create`, not `apply`: client-side apply copies the object into an annotation that
    # cannot hold a 1 MiB spec.
    proc = kube.kubectl("create", "-f", "-", input=yaml.safe_dump(body), check=False)
    if proc.returncode == 0:
        return None
    assert "is invalid" in proc.stderr, proc.stderr[-2000:]
    return proc.stderr


def settled_and_quiet(kube: KubeHarness, name: str, reason: str) -> dict[str, Any]:
    """Failed for `reason`, one event, and still so (same resourceVersion) a few sweeps on."""
    st = wait(lambda: status(kube, NS, name).get("phase") == "Failed" and status(kube, NS, name),
              what=f"{name} Failed")  # fmt: skip
    reasons_become(kube, NS, name, lambda r: r == [reason], what=f"{name}: one {reason} event")
    version = experiment(kube, NS, name)["metadata"]["resourceVersion"]
    time.sleep(QUIET)
    assert experiment(kube, NS, name)["metadata"]["resourceVersion"] == version
    assert [e["reason"] for e in events(kube, NS, name)] == [reason]
    return st


@pytest.mark.parametrize("case", list(CASES))
def test_a_child_the_api_server_refuses(
    kube_harness: KubeHarness, operator: object, case: str
) -> None:
    kube = kube_harness
    kube.ensure_namespace(NS)
    spec, kind, words = CASES[case]
    body = body_for(case, spec)
    exp, problems = parse_experiment(body)
    refused_by_validation = exp is None or bool(errors(problems))
    refused_by_schema = create(kube, body)
    if refused_by_schema is not None:  # the CRD's schema refuses it: nothing exists at all
        assert f"spec.{next(iter(spec))}" in refused_by_schema, refused_by_schema[-2000:]
        assert refused_by_validation, "validation must refuse what the CRD refuses"
        assert kube.kubectl("get", "rlx", case, "-n", NS, check=False).returncode != 0
        return
    if refused_by_validation:  # validation learnt this one: refused before any API call
        st = settled_and_quiet(kube, case, "InvalidSpec")
        assert condition(st, "Valid")["status"] == "False"
        assert children(kube, NS, case) == []
        return
    st = settled_and_quiet(kube, case, "FailedCreate")
    cond = condition(st, "ChildRejected")
    assert cond["status"] == "True" and cond["reason"] == "FailedCreate"
    assert (
        f"refused creating {kind} {NS}/" in cond["message"]
        and "HTTP 422 Invalid" in cond["message"]
    )
    assert words in cond["message"]
    assert condition(st, "Failed")["reason"] == "FailedCreate"
    assert not [k for k in children(kube, NS, case) if k["kind"] == "RayJob"]
    event = events(kube, NS, case)[0]
    assert event["type"] == "Warning" and words in event["message"]


def test_quota_refusal_then_a_new_generation(kube_harness: KubeHarness, operator: object) -> None:
    kube, ns, name = kube_harness, "e2e-quota", "quota"
    kube.ensure_namespace(ns)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "no-services", "namespace": ns},
             "spec": {"hard": {"services": "0"}}}  # fmt: skip
    kube.apply(quota)
    # No kube-controller-manager here to count usage: write the status its quota
    # controller would, so admission judges the request against a known limit.
    usage = {"status": {"hard": {"services": "0"}, "used": {"services": "0"}}}
    kube.kubectl("patch", "resourcequota", "no-services", "-n", ns, "--subresource=status",
                 "--type=merge", "-p", json.dumps(usage))  # fmt: skip
    body = minimal_body()
    body["metadata"] = {"name": name, "namespace": ns}
    kube.apply(body)
    st = wait(lambda: status(kube, ns, name).get("phase") == "Failed" and status(kube, ns, name),
              what="quota refusal")  # fmt: skip
    cond = condition(st, "ChildRejected")
    assert cond["reason"] == "FailedCreate" and "HTTP 403 Forbidden" in cond["message"]
    assert "exceeded quota: no-services" in cond["message"]
    reasons_become(kube, ns, name, lambda r: r == ["FailedCreate"], what="one FailedCreate")
    version = experiment(kube, ns, name)["metadata"]["resourceVersion"]
    time.sleep(QUIET)
    assert experiment(kube, ns, name)["metadata"]["resourceVersion"] == version
    assert [k["kind"] for k in children(kube, ns, name) if k["kind"] == "RayJob"] == []
    # The admin lifts the quota; the user's next spec change is tried again and succeeds.
    kube.kubectl("delete", "resourcequota", "no-services", "-n", ns)
    kube.kubectl("patch", "rlx", name, "-n", ns, "--type=merge", "-p",
                 json.dumps({"spec": {"activeDeadlineSeconds": 7200}}))  # fmt: skip
    st = wait(lambda: status(kube, ns, name).get("rayJobName") and status(kube, ns, name),
              what="created after the quota was lifted")  # fmt: skip
    assert st["phase"] == "Pending" and st["observedGeneration"] == 2
    assert condition(st, "ChildRejected")["status"] == "False"
    kinds = sorted(k["kind"] for k in children(kube, ns, name))
    assert kinds == ["ConfigMap", "ConfigMap", "RayJob", "Service", "Service"]
