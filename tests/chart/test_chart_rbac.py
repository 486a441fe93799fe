"""The operator's RBAC is exactly what it uses (operator-anchors §5), in both install modes."""

from __future__ import annotations

from typing import Any

from chart_helpers import CHART, find, one, render

from agentrl.controller.kube import PLURALS

# (apiGroup, resource) -> verbs. The single source the e2e `kubectl auth can-i` test also uses.
# The operator never GETs an RLExperiment, its status or a pod: kopf lists and watches them, and
# the controller's client (agentrl.controller.kube) only PATCHes the status.
NAMESPACED: dict[tuple[str, str], set[str]] = {
    ("agentrl.io", "rlexperiments"): {"list", "watch"},
    ("agentrl.io", "rlexperiments/status"): {"patch"},
    ("agentrl.io", "rlexperiments/finalizers"): {"update"},
    ("ray.io", "rayjobs"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "create"},
    ("", "services"): {"get", "create"},
    ("", "pods"): {"list", "watch"},
    ("", "events"): {"create"},
}
CLUSTER: dict[tuple[str, str], set[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_cluster_wide_mode_grants_exactly_what_the_operator_uses() -> None:
    objs = render()
    role = one(objs, "ClusterRole")
    assert grants(role["rules"]) == {**NAMESPACED, **CLUSTER}
    assert not find(objs, "Role")
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = one(objs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "agentrl"}
    ]
    deploy = one(objs, "Deployment")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_namespaced_mode_grants_per_namespace_and_only_crd_reads_cluster_wide() -> None:
    objs = render(values=CHART / "ci" / "namespaced-values.yaml")
    assert grants(one(objs, "ClusterRole")["rules"]) == CLUSTER
    roles = find(objs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert grants(role["rules"]) == NAMESPACED
    bindings = find(objs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "agentrl"


def test_no_secrets_no_wildcards_no_exec_no_experiment_deletes() -> None:
    for values in (None, CHART / "ci" / "namespaced-values.yaml"):
        objs = render(values=values)
        for role in find(objs, "ClusterRole") + find(objs, "Role"):
            for (group, resource), verbs in grants(role["rules"]).items():
                assert "*" not in verbs and "*" not in group and "*" not in resource
                assert resource not in {"secrets", "pods/exec", "pods/attach", "serviceaccounts"}
                assert "escalate" not in verbs and "bind" not in verbs
                assert "impersonate" not in verbs
                if resource.startswith("rlexperiments"):
                    assert "delete" not in verbs and "create" not in verbs


def test_every_kind_the_operator_client_touches_is_granted() -> None:
    granted = {resource for _, resource in NAMESPACED}
    assert set(PLURALS.values()) <= granted


def test_rbac_can_be_left_to_the_platform() -> None:
    kinds = {o["kind"] for o in render(sets=("rbac.create=false",))}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
