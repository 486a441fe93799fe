"""The chart under real helm 3 and helm 4: lint, render, and every rendered object validated.

Core kinds go through kubernetes-validate (Kubernetes 1.30 schemas, strict: unknown fields
fail); the CRD must equal `crds/` and accept the examples; Prometheus Operator kinds are
checked structurally against what the operator renders into Ray pods.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from chart_helpers import CHART, CI_VALUES, HELMS, ROOT, find, one, render, run_helm

from agentrl.api.constants import LABEL_EXPERIMENT, METRICS_PORT, METRICS_PORT_NAME
from agentrl.api.validation import parse_experiment
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.objects import render_all
from kube_checks import core_errors, crd_version_schema, to_jsonschema

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
VALUES_IDS = [p.stem for p in CI_VALUES]
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def test_ci_values_cover_the_documented_cases() -> None:
    assert set(VALUES_IDS) >= {
        "default-values",
        "namespaced-values",
        "monitoring-off-values",
        "custom-labels-values",
    }


@pytest.mark.parametrize("helm", sorted(HELMS))
@pytest.mark.parametrize("values", CI_VALUES, ids=VALUES_IDS)
def test_lint_strict(helm: str, values: Path) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), "--values", str(values))
    assert "0 chart(s) failed" in proc.stdout + proc.stderr


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_schema_rejects_unknown_keys_and_bad_values(helm: str) -> None:
    for bad in (
        "monitoring.podMonitor.intervall=30s",  # typo in our object
        "operator.bogus=1",
        "image.digest=sha256:abc",  # not a digest
        "operator.runtimeImage=agentrl/runtime:latest",  # not pinned by digest
        "watchNamespaces[0]=Team_A",
        "monitoring.prometheusRule.failedSessionRatio=2",
    ):
        proc = run_helm(helm, "lint", "--strict", str(CHART), "--set", bad, check=False)
        assert proc.returncode != 0, bad
        key = bad.split("=")[0].split(".")[-1].split("[")[0]
        assert key in proc.stdout + proc.stderr, (bad, proc.stdout)


@pytest.mark.parametrize("helm", sorted(HELMS))
@pytest.mark.parametrize("values", CI_VALUES, ids=VALUES_IDS)
def test_every_rendered_object_is_valid(helm: str, values: Path) -> None:
    objs = render(helm, values)
    assert objs
    for obj in objs:
        kind = obj["kind"]
        if kind in MONITORING_KINDS:
            check_monitoring_object(obj)
        else:
            assert core_errors(obj) == [], f"{kind} {obj['metadata']['name']}"
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "agentrl"


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_helm3_and_helm4_render_the_same_objects(helm: str) -> None:
    for values in CI_VALUES:
        assert render(helm, values) == render("helm3", values)


def check_monitoring_object(obj: dict[str, Any]) -> None:
    """The Prometheus Operator fields we set, with their types (no CRD schema offline)."""
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    spec = obj["spec"]
    if obj["kind"] == "PrometheusRule":
        for group in spec["groups"]:
            assert group["name"] and group["rules"]
            for rule in group["rules"]:
                assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
                assert isinstance(rule["expr"], str) and rule["alert"]
                assert DURATION.match(rule.get("for", "0s"))
                assert all(isinstance(v, str) for v in rule["labels"].values())
        return
    endpoints_key = "endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    assert set(spec) <= {"selector", "namespaceSelector", endpoints_key}
    assert spec["selector"]["matchLabels"]
    for endpoint in spec[endpoints_key]:
        assert isinstance(endpoint["port"], str)  # by name, so port numbers may change
        assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])
        assert endpoint["path"] == "/metrics"


def test_default_install_objects() -> None:
    objs = render()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "CustomResourceDefinition",
            "Deployment",
            "PodMonitor",
            "PrometheusRule",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
        ]
    )


def test_monitoring_objects_skipped_without_the_api_and_when_disabled() -> None:
    kinds = {o["kind"] for o in render(monitoring_api=False)}
    assert not kinds & MONITORING_KINDS
    off = {o["kind"] for o in render(values=CHART / "ci" / "monitoring-off-values.yaml")}
    assert not off & (MONITORING_KINDS | {"CustomResourceDefinition", "ConfigMap"})


def test_operator_deployment_is_hardened_and_pinned() -> None:
    objs = render()
    deploy = one(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert re.fullmatch(r"agentrl/operator@sha256:[0-9a-f]{64}", container["image"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"]["memory"]
    assert container["resources"]["requests"]["cpu"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The operator (agentrl.controller.config) reads exactly these.
    assert env["AGENTRL_METRICS_PORT"] == str(ports["http-metrics"]) == "8080"
    assert env["AGENTRL_LIVENESS_ENDPOINT"] == f"http://0.0.0.0:{ports['http-health']}/healthz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http-health"}
    assert deploy["spec"]["replicas"] == 1  # kopf standalone: one reconciler at a time
    assert deploy["spec"]["strategy"]["type"] == "Recreate"
    svc = one(objs, "Service")
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == set(ports)
    assert (
        svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


def test_operator_settings_reach_the_operator_config() -> None:
    from agentrl.controller.config import load

    deploy = one(render(values=CHART / "ci" / "namespaced-values.yaml"), "Deployment")
    env = {
        e["name"]: e["value"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    cfg = load(env)
    assert cfg.namespaces == ("team-a", "team-b")
    assert cfg.image.startswith("agentrl/runtime@sha256:")
    assert cfg.image_pull_secrets == ("pull-secret",)
    assert cfg.extra_labels == {"team": "research"}
    assert cfg.metrics_port == 8080


def test_sync_script_check_mode_agrees() -> None:
    script = ROOT / "hack" / "sync-crd.sh"
    ok = subprocess.run([str(script), "--check"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr


def test_crd_equals_the_generated_one_and_is_kept() -> None:
    source = yaml.safe_load((ROOT / "crds" / "rlexperiments.agentrl.io.yaml").read_text())
    copy = CHART / "files" / "crds" / "rlexperiments.agentrl.io.yaml"
    assert copy.read_text() == (ROOT / "crds" / "rlexperiments.agentrl.io.yaml").read_text(), (
        "run hack/sync-crd.sh"
    )
    crd = one(render(), "CustomResourceDefinition")
    assert crd["spec"] == source["spec"]
    assert crd["metadata"]["name"] == source["metadata"]["name"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    no_keep = one(render(sets=("crds.keep=false",)), "CustomResourceDefinition")
    assert "annotations" not in no_keep["metadata"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_crd_schema_accepts_the_examples(example: Path) -> None:
    crd = one(render(), "CustomResourceDefinition")
    schema = to_jsonschema(crd_version_schema(crd, "v1alpha1"))
    validator = jsonschema.Draft7Validator(schema)
    body = yaml.safe_load(example.read_text())
    assert list(validator.iter_errors(body)) == []
    body["spec"]["grpo"]["numRolloutz"] = 3  # a typo is an unknown field: pruned/rejected
    assert list(validator.iter_errors(body))


def test_pod_monitor_selects_the_rendered_head_pod_and_its_metrics_port() -> None:
    """The PodMonitor must match what the operator actually renders, not what we assume."""
    body = yaml.safe_load(EXAMPLES[0].read_text())
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    rayjob = next(o for o in render_all(exp, OperatorDefaults(), {}) if o["kind"] == "RayJob")
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    workers = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    monitor = one(render(), "PodMonitor")
    selector = monitor["spec"]["selector"]

    def selects(labels: dict[str, str]) -> bool:
        exprs_ok = all(
            e["operator"] == "Exists" and e["key"] in labels
            for e in selector.get("matchExpressions", [])
        )
        return selector["matchLabels"].items() <= labels.items() and exprs_ok

    assert selects(head["metadata"]["labels"])
    assert not any(selects(w["template"]["metadata"]["labels"]) for w in workers)
    head_ports = {
        p["name"]: p["containerPort"]
        for c in head["spec"]["containers"]
        for p in c.get("ports", [])
    }
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == METRICS_PORT_NAME == "agentrl-metrics"
    assert head_ports[METRICS_PORT_NAME] == METRICS_PORT == 9400
    (relabel,) = [r for r in endpoint["relabelings"] if r["targetLabel"] == "experiment"]
    label = re.sub(r"[^a-zA-Z0-9_]", "_", LABEL_EXPERIMENT)
    assert relabel["sourceLabels"] == [f"__meta_kubernetes_pod_label_{label}"]


def test_pod_monitor_follows_watch_namespaces() -> None:
    assert one(render(), "PodMonitor")["spec"]["namespaceSelector"] == {"any": True}
    namespaced = one(render(values=CHART / "ci" / "namespaced-values.yaml"), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_custom_labels_reach_every_monitoring_object_and_the_dashboard() -> None:
    objs = render(values=CHART / "ci" / "custom-labels-values.yaml")
    for kind in MONITORING_KINDS:
        labels = one(objs, kind)["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack"
        assert labels["cost-centre"] == "ml-platform"
    assert one(objs, "PodMonitor")["metadata"]["labels"]["scrape"] == "ray"
    assert "scrape" not in one(objs, "ServiceMonitor")["metadata"]["labels"]
    for rule in one(objs, "PrometheusRule")["spec"]["groups"][0]["rules"]:
        assert rule["labels"]["team"] == "ml-platform"
    (dashboard,) = find(objs, "ConfigMap")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["labels"]["dashboards"] == "ml"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "agentrl"}
    assert all(
        o["metadata"]["name"].startswith("rl-operator")
        for o in objs
        if o["kind"] != "CustomResourceDefinition"
    )


def test_dashboard_configmap_carries_the_checked_in_json() -> None:
    import json

    (cm,) = find(render(), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = json.loads((CHART / "files" / "dashboards" / "agentrl.json").read_text())
    assert json.loads(cm["data"]["agentrl.json"]) == source


def test_packaged_chart_renders_the_same(tmp_path: Path) -> None:
    """`helm package` keeps files/ (CRD copy, dashboard) and drops only what .helmignore says."""
    run_helm("helm3", "package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("agentrl-*.tgz")
    args = ["template", "agentrl", str(package), "-n", "agentrl", "--api-versions"]
    packaged = run_helm("helm3", *args, "monitoring.coreos.com/v1").stdout
    objs = [doc for doc in yaml.safe_load_all(packaged) if doc]
    assert objs == render()


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_crd_install_refuses_api_servers_without_cel(helm: str) -> None:
    args = ["template", "agentrl", str(CHART), "--kube-version", "1.24.9"]
    proc = run_helm(helm, *args, check=False)
    assert proc.returncode != 0
    assert "needs Kubernetes >= 1.25" in proc.stderr
    run_helm(helm, *args, "--set", "crds.install=false")  # the operator itself runs there


def test_operator_down_alert_keys_on_the_service_monitor_job() -> None:
    """Prometheus Operator names the job after the Service; the alert must use that name."""
    for values in CI_VALUES:
        objs = render(values=values)
        rules = find(objs, "PrometheusRule")
        if not rules:
            continue
        (alert,) = [r for g in rules[0]["spec"]["groups"] for r in g["rules"]
                    if r["alert"] == "AgentRLOperatorDown"]  # fmt: skip
        service = one(objs, "Service")["metadata"]
        assert f'job="{service["name"]}", namespace="{service["namespace"]}"' in alert["expr"]
        monitor = one(objs, "ServiceMonitor")["spec"]
        assert "jobLabel" not in monitor
        assert monitor["selector"]["matchLabels"].items() <= service["labels"].items()
