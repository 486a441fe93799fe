"""High availability in the chart: replicas, leader election, the Lease's RBAC, the PDB.

The operator side (election, fencing) is tested in tests/controller/test_leader.py and, on a
real API server with two operator processes, in tests/e2e/test_leader_e2e.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_helpers import CHART, NAMESPACE, OPERATOR_IMAGE, RELEASE, find, one, render, run_helm
from test_chart_rbac import grants, named_grants

from agentrl.controller.config import load
from agentrl.controller.leader import Timing

LEASES = ("coordination.k8s.io", "leases")


def env_of(deploy: dict[str, Any]) -> dict[str, str]:
    return {
        e["name"]: e["value"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    }


def lease_rules(role: dict[str, Any]) -> dict[tuple[str, ...], set[str]]:
    """(group, resource) and (group, resource, name) -> verbs."""
    return {**grants(role["rules"]), **named_grants(role["rules"])}


def test_two_replicas_elect_a_leader_on_the_release_lease_by_default() -> None:
    objs = render()
    deploy = one(objs, "Deployment")
    values = yaml.safe_load((CHART / "values.yaml").read_text())["leaderElection"]
    assert deploy["spec"]["replicas"] == 2
    # A rollout adds a standby before it stops an old pod (the leader releases the Lease).
    assert deploy["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}  # fmt: skip
    cfg = load(env_of(deploy))
    assert cfg.leader_election
    assert (cfg.lease_namespace, cfg.lease_name) == (NAMESPACE, RELEASE)
    assert cfg.lease_timing == Timing(
        values["leaseDurationSeconds"], values["renewDeadlineSeconds"], values["retryPeriodSeconds"]
    )
    assert cfg.lease_timing == Timing()  # the chart's defaults are client-go's


def test_the_lease_role_is_namespaced_and_names_the_one_lease() -> None:
    for values in (None, CHART / "ci" / "namespaced-values.yaml"):
        objs = render(values=values)
        (role,) = [r for r in find(objs, "Role") if "leases" in str(r["rules"])]
        assert role["metadata"]["namespace"] == NAMESPACE
        # create cannot be narrowed by name (the name is in the body); the rest is that Lease.
        assert lease_rules(role) == {LEASES: {"create"}, (*LEASES, RELEASE): {"get", "update"}}
        (binding,) = [b for b in find(objs, "RoleBinding")
                      if b["roleRef"]["name"] == role["metadata"]["name"]]  # fmt: skip
        assert binding["metadata"]["namespace"] == NAMESPACE
        sa = one(objs, "ServiceAccount")["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]  # fmt: skip
        for cluster_role in find(objs, "ClusterRole"):
            assert "leases" not in str(cluster_role["rules"])
    assert not find(render(sets=("rbac.create=false",)), "Role")


def test_the_docs_table_of_the_lease_role_is_the_role() -> None:
    text = (CHART.parents[1] / "docs" / "operator.md").read_text(encoding="utf-8")
    table = text[text.index("| API group | resource | verbs | where |") :].split("\n\n")[0]
    documented: dict[tuple[str, ...], set[str]] = {}
    for line in table.splitlines()[2:]:
        group, resource, verbs, _ = (c.strip().strip("`") for c in line.strip("|").split("|"))
        key: tuple[str, ...] = (group, resource)
        if ", only " in resource:
            plain, name = (part.strip("` ") for part in resource.split(", only "))
            key = (group, plain, RELEASE if name == "<release>" else name)
        documented[key] = {v.strip() for v in verbs.split(",")}
    (role,) = [r for r in find(render(), "Role") if "leases" in str(r["rules"])]
    assert documented == lease_rules(role)


def test_a_disruption_budget_keeps_a_replica_through_a_drain() -> None:
    objs = render()
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["maxUnavailable"] == 1
    deploy = one(objs, "Deployment")
    assert pdb["spec"]["selector"] == deploy["spec"]["selector"]
    assert not find(render(sets=("replicaCount=1",)), "PodDisruptionBudget")
    assert not find(render(sets=("podDisruptionBudget.enabled=false",)), "PodDisruptionBudget")


def test_replicas_spread_over_nodes_selected_by_the_pod_labels() -> None:
    deploy = one(render(), "Deployment")
    (spread,) = deploy["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"] == {"matchLabels": deploy["spec"]["selector"]["matchLabels"]}


def test_one_replica_without_election_is_recreated_and_needs_no_lease() -> None:
    objs = render(sets=("replicaCount=1", "leaderElection.enabled=false"))
    deploy = one(objs, "Deployment")
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert not load(env_of(deploy)).leader_election
    assert not [k for k in env_of(deploy) if "LEASE" in k]
    assert "leases" not in str([r["rules"] for r in find(objs, "Role")])


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("leaderElection.enabled=false",),
         "replicaCount=2 needs leaderElection.enabled=true: without it every replica would "
         "reconcile and write status"),
        (("leaderElection.leaseDurationSeconds=10",),
         "leaderElection.leaseDurationSeconds (10) must be greater than "
         "leaderElection.renewDeadlineSeconds (10)"),
        (("leaderElection.retryPeriodSeconds=9",),
         "leaderElection.renewDeadlineSeconds (10) must be greater than 1.2 x "
         "leaderElection.retryPeriodSeconds (9)"),
        (("replicaCount=0",), "replicaCount"),
    ],
)  # fmt: skip
def test_settings_the_operator_would_refuse_are_refused_at_render(
    sets: tuple[str, ...], message: str
) -> None:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *OPERATOR_IMAGE]
    for item in sets:
        args += ["--set", item]
    for helm in ("helm3", "helm4"):
        proc = run_helm(helm, *args, check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
