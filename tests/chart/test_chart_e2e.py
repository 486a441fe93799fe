"""`helm install` into a real kube-apiserver (tests/support/kube.py), then `kubectl auth can-i`
as the operator's ServiceAccount: it can do what the operator needs and nothing else; and as
researchers holding the built-in `edit`, `view` and `admin` roles in a namespace, which the
chart's aggregated ClusterRoles extend to RLExperiments.

The Deployment never gets pods (no scheduler, no kubelet); what is under test is that the chart
installs on a real API server and that its RBAC is exactly right; the scoped release's operator
also runs here as a local process, as its account with its Deployment's settings, to show that
RBAC is enough for it to reconcile at once. Aggregation is the real
kube-controller-manager's clusterrole-aggregation controller, started for that test only.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chart_helpers import CHART, HELMS, OPERATOR_IMAGE, helm_env
from test_chart_rbac import CLUSTER, NAMED, NAMESPACED, RESEARCHERS, SCOPED_CLUSTER
from tests.conftest import minimal_body
from tests.e2e.operator_process import OperatorProcess

from support.kube import KubeHarness, controller_manager, running_harness

pytestmark = pytest.mark.e2e

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# Things the operator must never touch (beyond verbs missing from its rules).
FORBIDDEN = (
    ("get", "secrets"),
    ("list", "secrets"),
    ("watch", "secrets"),
    ("create", "pods/exec"),
    ("create", "pods"),
    ("delete", "pods"),
    ("get", "pods/log"),
    ("delete", "rlexperiments.agentrl.io"),
    ("create", "rlexperiments.agentrl.io"),
    ("create", "deployments.apps"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("create", "serviceaccounts/token"),
    ("update", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "nodes"),
    ("*", "*"),
)


def helm(kube: KubeHarness, version: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(HELMS[version]), "--kubeconfig", str(kube.kubeconfig), *args],
        capture_output=True,
        text=True,
        env=helm_env(),
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def can_i(kube: KubeHarness, sa: str, verb: str, resource: str, namespace: str | None) -> bool:
    """`kubectl auth can-i` impersonating `sa`; `resource` may name a subresource (`x/status`)."""
    name, _, sub = resource.partition("/")  # kubectl reads `x/y` as object y, hence the flag
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    extra = [f"--subresource={sub}"] if sub else []
    proc = kube.kubectl("auth", "can-i", verb, name, *extra, *scope, f"--as={sa}", check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stderr
    return answer == "yes"


def can_i_named(kube: KubeHarness, sa: str, verb: str, resource: str, name: str) -> bool:
    """`kubectl auth can-i VERB RESOURCE/NAME` for a cluster-scoped object."""
    proc = kube.kubectl("auth", "can-i", verb, f"{resource}/{name}", f"--as={sa}", check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stderr
    return answer == "yes"


def resource_name(group: str, resource: str) -> str:
    name, _, sub = resource.partition("/")
    full = f"{name}.{group}" if group else name
    return f"{full}/{sub}" if sub else full


@pytest.fixture(scope="module")
def installed() -> Iterator[KubeHarness]:
    """Two releases: cluster-wide with helm 3, one watching team-a only with helm 4.

    A control plane of its own (not the session one of tests/e2e): cluster-scoped names such
    as the ClusterRole cannot collide with the operator's e2e tier, and it stops with this
    module instead of living until the end of the session.
    """
    with running_harness() as kube:
        yield from _install(kube)


def _install(kube: KubeHarness) -> Iterator[KubeHarness]:
    for ns in ("team-a", "team-b", "rl"):
        kube.ensure_namespace(ns)
    # 1.20 cannot take the CRD's CEL rules: the chart says so instead of a schema dump.
    refused = subprocess.run(
        [str(HELMS["helm3"]), "--kubeconfig", str(kube.kubeconfig), "install", "early",
         str(CHART), "-n", "early", "--create-namespace", *OPERATOR_IMAGE],
        capture_output=True, text=True, env=helm_env(), timeout=180, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "needs Kubernetes >= 1.25" in refused.stderr
    # No operator image (agentrl publishes none): stopped before anything exists, with the fix.
    no_image = subprocess.run(
        [str(HELMS["helm4"]), "--kubeconfig", str(kube.kubeconfig), "install", "no-image",
         str(CHART), "-n", "no-image", "--set", "crds.install=false"],
        capture_output=True, text=True, env=helm_env(), timeout=180, check=False,
    )  # fmt: skip
    assert no_image.returncode != 0 and "image.repository is not set" in no_image.stderr
    assert kube.kubectl("get", "namespace", "no-image", check=False).returncode != 0
    # The harness already installed the CRD (made 1.20-compatible); the chart must not own it.
    common = ["--set", "crds.install=false", *OPERATOR_IMAGE]
    out = helm(kube, "helm3", "install", "agentrl", str(CHART), "-n", "agentrl",
               "--create-namespace", *common)  # fmt: skip
    # No Prometheus Operator on this API server: monitors skipped, and NOTES say so.
    assert "monitoring.coreos.com/v1 is not served" in out.stdout
    # helm 3's NOTES too (test_chart_render checks them with helm 4's client-only dry run).
    assert "No default Ray pod image is set (operator.runtimeImage)" in out.stdout
    assert "the CRD rlexperiments.agentrl.io must already exist" in out.stdout
    helm(kube, "helm4", "install", "scoped", str(CHART), "-n", "scoped", "--create-namespace",
         "--set", "watchNamespaces={team-a}", "--set", "monitoring.dashboard.enabled=false",
         *common)  # fmt: skip
    yield kube
    helm(kube, "helm3", "uninstall", "agentrl", "-n", "agentrl")
    helm(kube, "helm4", "uninstall", "scoped", "-n", "scoped")
    # Uninstall removes the RBAC with the release (nothing left granting the old account).
    assert kube.kubectl("get", "clusterrole", "agentrl", check=False).returncode != 0


def test_release_objects_exist(installed: KubeHarness) -> None:
    kube = installed
    assert kube.kubectl_json("get", "deployment", "agentrl", "-n", "agentrl")["spec"]["replicas"]
    kube.kubectl("get", "serviceaccount", "agentrl", "-n", "agentrl")
    kube.kubectl("get", "configmap", "agentrl-dashboard", "-n", "agentrl")
    kube.kubectl("get", "clusterrole", "agentrl")
    roles = kube.kubectl_json("get", "roles", "-A", "-l", "app.kubernetes.io/instance=scoped")
    assert sorted((r["metadata"]["namespace"], r["metadata"]["name"]) for r in roles["items"]) == [
        ("scoped", "scoped-agentrl-leader-election"),  # the leader Lease's, release namespace
        ("team-a", "scoped-agentrl"),
    ]
    # Two replicas, and a disruption budget in the API version this cluster serves (1.20:
    # policy/v1beta1; policy/v1 from 1.21).
    pdb = kube.kubectl_json("get", "poddisruptionbudgets.policy", "agentrl", "-n", "agentrl")
    assert pdb["spec"]["maxUnavailable"] == 1


def test_cluster_wide_account_can_do_exactly_what_the_operator_needs(
    installed: KubeHarness,
) -> None:
    sa = "system:serviceaccount:agentrl:agentrl"
    for (group, resource), verbs in NAMESPACED.items():
        name = resource_name(group, resource)
        for verb in VERBS:
            assert can_i(installed, sa, verb, name, "rl") == (verb in verbs), (verb, name)
    for (group, resource), verbs in CLUSTER.items():
        name = resource_name(group, resource)
        for verb in VERBS:
            assert can_i(installed, sa, verb, name, None) == (verb in verbs), (verb, name)
    for (group, resource, obj), verbs in NAMED.items():
        name = resource_name(group, resource)
        allowed = verbs | CLUSTER.get((group, resource), set())  # + what every object has
        for verb in VERBS:
            assert can_i_named(installed, sa, verb, name, obj) == (verb in allowed), (verb, obj)
        # That one object only: not our own CRD, not any other.
        assert not can_i_named(installed, sa, "get", name, "rlexperiments.agentrl.io")
        assert not can_i_named(installed, sa, "get", name, "rayclusters.ray.io")
    for verb, name in FORBIDDEN:
        assert not can_i(installed, sa, verb, name, "rl"), (verb, name)
    # Cluster-wide, kopf never reads namespaces: only the scoped account may.
    assert not can_i(installed, sa, "list", "namespaces", None)


def test_scoped_account_is_limited_to_its_namespaces(installed: KubeHarness) -> None:
    sa = "system:serviceaccount:scoped:scoped-agentrl"  # release name + chart name
    assert can_i(installed, sa, "watch", "rlexperiments.agentrl.io", "team-a")
    assert can_i(installed, sa, "get", "rlexperiments.agentrl.io", "team-a")  # its RayJob gone
    assert can_i(installed, sa, "create", "rayjobs.ray.io", "team-a")
    for (group, resource), verbs in SCOPED_CLUSTER.items():
        name = resource_name(group, resource)
        for verb in VERBS:
            assert can_i(installed, sa, verb, name, None) == (verb in verbs), (verb, name)
    assert can_i_named(installed, sa, "get", "customresourcedefinitions.apiextensions.k8s.io",
                       "rayjobs.ray.io")  # fmt: skip
    for ns in ("team-b", "rl"):
        assert not can_i(installed, sa, "list", "rlexperiments.agentrl.io", ns)
        assert not can_i(installed, sa, "get", "rlexperiments.agentrl.io", ns)
        assert not can_i(installed, sa, "create", "configmaps", ns)
    assert not can_i(installed, sa, "list", "rlexperiments.agentrl.io", None)  # cluster-wide
    for verb, name in FORBIDDEN:
        assert not can_i(installed, sa, verb, name, "team-a"), (verb, name)


def test_scoped_operator_reconciles_at_once_as_its_account(
    installed: KubeHarness, tmp_path: Path
) -> None:
    """The scoped release's operator, run with its Deployment's own settings as its own
    ServiceAccount, takes the Lease and creates an experiment's RayJob within the failover
    promise (a lease duration plus a retry period), with no request refused on the way.

    kopf serving named namespaces (not cluster-wide) lists and watches `namespaces` first; a
    403 there is retried through its error backoffs (54 s) before it falls back, so every
    start and failover of a scoped release reconciled nothing for a minute, logging errors.
    """
    kube = installed
    pod = kube.kubectl_json("get", "deployment", "scoped-agentrl", "-n", "scoped")["spec"][
        "template"
    ]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    # This host's free ports instead of the pod's; everything else as the chart sets it.
    for key in ("AGENTRL_METRICS_PORT", "AGENTRL_LIVENESS_ENDPOINT"):
        env.pop(key)
    assert env["AGENTRL_NAMESPACES"] == "team-a"
    promise = float(env["AGENTRL_LEASE_DURATION_SECONDS"]) + float(
        env["AGENTRL_RETRY_PERIOD_SECONDS"]
    )
    kubeconfig = kube.service_account_kubeconfig("scoped", pod["serviceAccountName"])
    kube.apply({**minimal_body(), "metadata": {"name": "prompt", "namespace": "team-a"}})
    op = OperatorProcess(kubeconfig, tmp_path, **env)
    started = time.monotonic()
    op.start()
    try:
        while not kube.kubectl_json("get", "rayjobs.ray.io", "-n", "team-a")["items"]:
            elapsed = time.monotonic() - started
            assert elapsed < promise, f"no RayJob after {elapsed:.0f}s:\n{op.logs()}"
            time.sleep(0.5)
    finally:
        op.stop()
        kube.kubectl("delete", "rlx", "prompt", "-n", "team-a", "--wait=false")
    # kopf names every 403 "forbidden" (APIForbiddenError, "... is forbidden: User ..."); a bare
    # "403" would also match the replica's random identity or a log line's milliseconds.
    logs = op.logs()
    for refused in ("forbidden", "not enough permissions"):
        assert refused not in logs.lower(), logs


def test_real_token_of_the_account(installed: KubeHarness) -> None:
    """The same answers with the account's own token, as the operator pod would present it."""
    config: Path = installed.service_account_kubeconfig("agentrl", "agentrl")
    installed.kubectl("get", "rlexperiments", "-A", kubeconfig=config)
    installed.kubectl("create", "configmap", "probe", "-n", "rl", kubeconfig=config)
    # Children go by garbage collection; the operator itself deletes nothing.
    kept = installed.kubectl("delete", "configmap", "probe", "-n", "rl", kubeconfig=config,
                             check=False)  # fmt: skip
    assert kept.returncode != 0 and "forbidden" in kept.stderr
    installed.kubectl("delete", "configmap", "probe", "-n", "rl")
    denied = installed.kubectl("get", "secrets", "-n", "rl", kubeconfig=config, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr


def aggregated(kube: KubeHarness, role: str) -> set[str]:
    """The verbs the built-in `role` holds on rlexperiments.agentrl.io right now."""
    rules = kube.kubectl_json("get", "clusterrole", role).get("rules") or []
    return {
        verb for rule in rules
        if "agentrl.io" in rule.get("apiGroups", ()) and "rlexperiments" in rule["resources"]
        for verb in rule["verbs"]
    }  # fmt: skip


def test_namespace_editors_create_experiments_and_viewers_only_read(
    installed: KubeHarness,
) -> None:
    kube = installed
    users = {"alice": "edit", "bob": "view", "carol": "admin"}
    for user, role in users.items():
        kube.kubectl("create", "rolebinding", f"{user}-{role}", f"--clusterrole={role}",
                     f"--user={user}", "-n", "team-b")  # fmt: skip
    with controller_manager(kube, ["clusterrole-aggregation"]):
        deadline = time.monotonic() + 60
        while any(aggregated(kube, role) != verbs_of(role) for role in ("view", "edit", "admin")):
            assert time.monotonic() < deadline, "the built-in roles were never aggregated"
            time.sleep(0.5)
    for user, role in users.items():
        for (group, resource), verbs in RESEARCHERS[role].items():
            name = resource_name(group, resource)
            for verb in VERBS:
                assert can_i(kube, user, verb, name, "team-b") == (verb in verbs), (user, verb)
            assert not can_i(kube, user, "get", name, "team-a")  # only where they are bound
        assert not can_i(kube, user, "patch", "rlexperiments.agentrl.io/status", "team-b")
    # For real, as each user: alice creates, bob reads and may not delete, alice deletes.
    exp = yaml.safe_dump({**minimal_body(), "metadata": {"name": "alices", "namespace": "team-b"}})
    alice, bob = kube.user_kubeconfig("alice"), kube.user_kubeconfig("bob")
    kube.kubectl("apply", "-f", "-", input=exp, kubeconfig=alice)
    got = kube.kubectl_json("get", "rlx", "alices", "-n", "team-b", kubeconfig=bob)
    assert got["spec"]["model"]["path"] == minimal_body()["spec"]["model"]["path"]
    kube.kubectl("get", "--raw", "/apis/agentrl.io/v1alpha1/namespaces/team-b/rlexperiments/"
                 "alices/status", kubeconfig=bob)  # fmt: skip
    suspend = ("patch", "rlx", "alices", "--type=merge", "-p", '{"spec": {"suspend": true}}')
    for verb in (("delete", "rlx", "alices"), suspend):
        denied = kube.kubectl(*verb, "-n", "team-b", kubeconfig=bob, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr
    kube.kubectl(*suspend, "-n", "team-b", kubeconfig=alice)
    kube.kubectl("delete", "rlx", "alices", "-n", "team-b", kubeconfig=alice)


def verbs_of(role: str) -> set[str]:
    return RESEARCHERS[role][("agentrl.io", "rlexperiments")]
