"""The operator's RBAC is exactly what it uses, in both install modes."""

from __future__ import annotations

from typing import Any

from chart_helpers import CHART, RELEASE, find, one, render

from agentrl.controller.kube import PLURALS

# (apiGroup, resource) -> verbs. The single source the e2e `kubectl auth can-i` test also uses.
# kopf lists and watches RLExperiments and pods; the controller's client (agentrl.controller.kube)
# PATCHes the status, and GETs an RLExperiment only when its RayJob disappears (deleted by hand,
# or by the garbage collector with the experiment: the watches' order cannot tell), and lists
# an experiment's pods once after a start, when the status it inherits names a stuck pod that
# no watch event has shown (gone while no operator ran?). Never GETs a pod or the status
# subresource.
NAMESPACED: dict[tuple[str, str], set[str]] = {
    ("agentrl.io", "rlexperiments"): {"get", "list", "watch"},
    ("agentrl.io", "rlexperiments/status"): {"patch"},
    ("agentrl.io", "rlexperiments/finalizers"): {"update"},
    ("ray.io", "rayjobs"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "create", "patch"},
    ("", "services"): {"get", "create", "patch"},
    ("", "pods"): {"list", "watch"},
    ("", "events"): {"create", "list"},
}
CLUSTER: dict[tuple[str, str], set[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}
# Only with watchNamespaces: kopf serving named namespaces (not cluster-wide) lists, then
# watches, every namespace to learn which of its patterns exist (kopf's namespace_observer);
# refused, it retries the 403 for 54 s before it falls back, on every start and failover.
SCOPED_CLUSTER: dict[tuple[str, str], set[str]] = {
    **CLUSTER,
    ("", "namespaces"): {"list", "watch"},
}
# (apiGroup, resource, name) -> verbs on that one object: the operator reads KubeRay's RayJob
# CRD at start-up (agentrl.controller.compat), and nothing else by name.
NAMED: dict[tuple[str, str, str], set[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "rayjobs.ray.io"): {"get"},
}


def operator_roles(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Roles of the watched namespaces, without the leader Lease's (test_chart_ha.py)."""
    return [r for r in find(objs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """Verbs on every object of a resource (rules without resourceNames)."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "nonResourceURLs" not in rule
        if "resourceNames" in rule:
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def named_grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """Verbs on named objects (rules with resourceNames)."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in rule.get("resourceNames") or ():
                    out.setdefault((group, resource, name), set()).update(rule["verbs"])
    return out


def operator_role(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator's own ClusterRole (the others are researchers' aggregated roles)."""
    (role,) = find(objs, "ClusterRole", RELEASE)
    return role


def test_cluster_wide_mode_grants_exactly_what_the_operator_uses() -> None:
    objs = render()
    role = operator_role(objs)
    assert grants(role["rules"]) == {**NAMESPACED, **CLUSTER}
    assert named_grants(role["rules"]) == NAMED
    assert not operator_roles(objs)
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


def test_namespaced_mode_grants_per_namespace_and_only_reads_cluster_wide() -> None:
    objs = render(values=CHART / "ci" / "namespaced-values.yaml")
    assert grants(operator_role(objs)["rules"]) == SCOPED_CLUSTER
    assert named_grants(operator_role(objs)["rules"]) == NAMED
    roles = operator_roles(objs)
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert grants(role["rules"]) == NAMESPACED
        assert named_grants(role["rules"]) == {}
    bindings = [b for b in find(objs, "RoleBinding") if b["roleRef"]["name"] in
                {r["metadata"]["name"] for r in roles}]  # fmt: skip
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == "agentrl"


def test_no_secrets_no_wildcards_no_exec_no_experiment_deletes() -> None:
    for values in (None, CHART / "ci" / "namespaced-values.yaml"):
        objs = render(values=values)
        for role in [operator_role(objs), *find(objs, "Role")]:
            for (group, resource), verbs in grants(role["rules"]).items():
                assert "*" not in verbs and "*" not in group and "*" not in resource
                assert resource not in {"secrets", "pods/exec", "pods/attach", "serviceaccounts"}
                assert "escalate" not in verbs and "bind" not in verbs
                assert "impersonate" not in verbs
                if resource.startswith("rlexperiments"):
                    assert "delete" not in verbs and "create" not in verbs


def test_every_kind_the_operator_client_touches_is_granted() -> None:
    granted = {resource for _, resource in NAMESPACED} | {r for _, r, _ in NAMED}
    granted.add("leases")  # the leader Lease, in the release namespace (test_chart_ha.py)
    assert set(PLURALS.values()) <= granted


# Researchers' roles: label -> what the built-in role of that name gains for RLExperiments.
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
READ = {"get", "list", "watch"}
WRITE = {"create", "update", "patch", "delete", "deletecollection"}
RESEARCHERS: dict[str, dict[tuple[str, str], set[str]]] = {
    "view": {("agentrl.io", "rlexperiments"): READ, ("agentrl.io", "rlexperiments/status"): READ},
    "edit": {
        ("agentrl.io", "rlexperiments"): READ | WRITE,
        ("agentrl.io", "rlexperiments/status"): READ,
    },
}
RESEARCHERS["admin"] = RESEARCHERS["edit"]


def aggregated_grants(objs: list[dict[str, Any]]) -> dict[str, dict[tuple[str, str], set[str]]]:
    """What each built-in role (view, edit, admin) gains from the chart's ClusterRoles."""
    out: dict[str, dict[tuple[str, str], set[str]]] = {}
    for role in find(objs, "ClusterRole"):
        for label, value in role["metadata"]["labels"].items():
            if label.startswith(AGGREGATE) and value == "true":
                gained = out.setdefault(label.removeprefix(AGGREGATE), {})
                for key, verbs in grants(role["rules"]).items():
                    gained.setdefault(key, set()).update(verbs)
    return out


def test_researchers_get_experiments_through_view_edit_and_admin() -> None:
    objs = render()
    assert aggregated_grants(objs) == RESEARCHERS
    for role in find(objs, "ClusterRole"):
        if role is not operator_role(objs):
            assert role["metadata"]["name"].startswith(f"{RELEASE}-")
            assert not find(objs, "ClusterRoleBinding", role["metadata"]["name"])  # unbound
    # Watching namespaces changes nothing: RoleBindings of view/edit/admin scope them.
    namespaced = render(values=CHART / "ci" / "namespaced-values.yaml")
    assert aggregated_grants(namespaced) == RESEARCHERS


def test_researchers_roles_can_be_switched_off() -> None:
    for sets in (("rbac.aggregateClusterRoles=false",), ("rbac.create=false",)):
        assert aggregated_grants(render(sets=sets)) == {}


def test_rbac_can_be_left_to_the_platform() -> None:
    kinds = {o["kind"] for o in render(sets=("rbac.create=false",))}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_docs_table_is_the_rbac() -> None:
    """docs/operator.md's RBAC table says exactly what the chart grants."""
    text = (CHART.parents[1] / "docs" / "operator.md").read_text(encoding="utf-8")
    table = text[text.index("| API group | resource | verbs | why |") :].split("\n\n")[0]
    documented: dict[tuple[str, str], set[str]] = {}
    named: dict[tuple[str, str, str], set[str]] = {}
    for line in table.splitlines()[2:]:
        group, resources, verbs, _ = (c.strip() for c in line.strip("|").split("|"))
        group = "" if group == "(core)" else group.strip("`")
        verb_set = {v.strip() for v in verbs.split(",")}
        if ", only " in resources:
            resource, name = (part.strip("` ") for part in resources.split(", only "))
            named[(group, resource, name)] = verb_set
            continue
        for resource in resources.split(","):
            documented[(group, resource.strip("` "))] = verb_set
    assert documented == {**NAMESPACED, **SCOPED_CLUSTER}  # its rows say which only scoped
    assert named == NAMED
