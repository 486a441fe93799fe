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
from chart_helpers import (
    CHART,
    CI_VALUES,
    HELMS,
    OPERATOR_IMAGE,
    ROOT,
    find,
    load_all,
    notes,
    one,
    render,
    render_text,
    run_helm,
)

from agentrl.api.constants import LABEL_EXPERIMENT, METRICS_PORT, METRICS_PORT_NAME
from agentrl.api.validation import parse_experiment
from agentrl.bundle.engine_metrics import ENGINE_METRICS_PATH
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
        "monitoring.prometheusRule.failedSessionRatio=0.15",  # --set: a string, not a number
        "monitoring.assumeApiAvailable=maybe",
        "monitoring.dashboard.uid=team/a",
    ):
        proc = run_helm(helm, "lint", "--strict", str(CHART), *OPERATOR_IMAGE, "--set", bad,
                        check=False)  # fmt: skip
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
    paths = []
    for endpoint in spec[endpoints_key]:
        assert isinstance(endpoint["port"], str)  # by name, so port numbers may change
        assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])
        paths.append(endpoint["path"])
    # The head pod also relays its SGLang engines' metrics (agentrl.bundle.engine_metrics).
    assert paths in (["/metrics"], ["/metrics", "/engine-metrics"])


def test_default_install_objects() -> None:
    objs = render()
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRole",  # researchers' view, aggregated into view/edit/admin
            "ClusterRole",  # researchers' edit, aggregated into edit/admin
            "ClusterRoleBinding",
            "ConfigMap",
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "PodMonitor",
            "PrometheusRule",
            "Role",  # the leader Lease's, in the release namespace
            "RoleBinding",
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


def test_thresholds_take_numbers_from_set_json() -> None:
    """What the README says: `--set` gives the schema a string, `--set-json` a number."""
    args = ["lint", "--strict", str(CHART), *OPERATOR_IMAGE]
    ok = run_helm("helm3", *args, "--set-json", "monitoring.prometheusRule.failedSessionRatio=0.15")
    assert "0 chart(s) failed" in ok.stdout + ok.stderr


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_monitoring_objects_render_without_the_api_when_assumed(helm: str) -> None:
    """`helm template | kubectl apply`, or the Prometheus Operator's CRDs installed later."""
    assumed = render(helm, sets=("monitoring.assumeApiAvailable=true",), monitoring_api=False)
    assert {o["kind"] for o in assumed} >= MONITORING_KINDS
    assert assumed == render(helm, sets=("monitoring.assumeApiAvailable=true",))
    # Switching one off still wins.
    off = ("monitoring.assumeApiAvailable=true", "monitoring.podMonitor.enabled=false")
    kinds = {o["kind"] for o in render(helm, sets=off, monitoring_api=False)}
    assert kinds & MONITORING_KINDS == {"ServiceMonitor", "PrometheusRule"}


def alerts_of(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    rule = one(objs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_operator_down_alert_only_with_the_service_monitor() -> None:
    """absent(up{job=...}) with nothing scraping the operator would fire for ever."""
    assert "AgentRLOperatorDown" in alerts_of(render())
    objs = render(sets=("monitoring.serviceMonitor.enabled=false",))
    assert not find(objs, "ServiceMonitor")
    alerts = alerts_of(objs)
    assert "AgentRLOperatorDown" not in alerts
    assert "AgentRLOperatorNoLeader" not in alerts  # keyed on the same job
    assert "AgentRLExperimentFailed" in alerts  # the operator group keeps its other alert


def test_alert_labels_override_the_chart_labels_once() -> None:
    """alertLabels.severity replaces the chart's severity: one key, the user's value (render()
    rejects duplicate keys, so a duplicate would already fail here)."""
    sets = (
        "monitoring.prometheusRule.alertLabels.severity=page",
        "monitoring.prometheusRule.alertLabels.team=ml",
    )
    text = render_text(sets=sets)
    alerts = alerts_of(load_all(text))
    for alert in alerts.values():
        assert alert["labels"]["severity"] == "page"
        assert alert["labels"]["team"] == "ml"
    assert alerts["AgentRLOperatorDown"]["labels"] == {
        "severity": "page",
        "team": "ml",
        "namespace": "agentrl",
    }
    (rule_text,) = [d for d in text.split("\n---") if "kind: PrometheusRule" in d]
    assert rule_text.count("severity:") == len(alerts)
    assert "severity: warning" not in rule_text and "severity: critical" not in rule_text
    # The raw text really had one key per mapping (the strict loader is what says so).
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key"):
        load_all("labels:\n  severity: warning\n  severity: page\n")


def test_common_labels_override_standard_labels_but_never_selector_labels() -> None:
    sets = (
        "commonLabels.app\\.kubernetes\\.io/part-of=ml-platform",
        "commonLabels.app\\.kubernetes\\.io/name=other",
        "podLabels.app\\.kubernetes\\.io/version=custom",
        "monitoring.additionalLabels.app\\.kubernetes\\.io/part-of=monitoring",
        "monitoring.dashboard.additionalLabels.grafana_dashboard=off",
    )
    objs = render(sets=sets)  # duplicate keys would fail to load
    deploy = one(objs, "Deployment")
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == "agentrl"
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert pod_labels["app.kubernetes.io/version"] == "custom"
    assert pod_labels["app.kubernetes.io/part-of"] == "ml-platform"
    service = one(objs, "Service")
    assert service["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ml-platform"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    monitor = one(objs, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["metadata"]["labels"]["app.kubernetes.io/part-of"] == "monitoring"
    (dashboard,) = find(objs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's label wins


def test_runbook_urls_are_quoted_and_left_out_without_a_base() -> None:
    text = render_text()
    base = "https://github.com/agentrl/agentrl/blob/main/docs/monitoring.md"
    assert text.count(f'runbook_url: "{base}#agentrl') == len(alerts_of(load_all(text)))
    custom = alerts_of(render(sets=("monitoring.prometheusRule.runbookUrl=https://wiki/a b",)))
    assert custom["AgentRLProgressStalled"]["annotations"]["runbook_url"] == (
        "https://wiki/a b#agentrlprogressstalled"
    )
    empty = render_text(sets=("monitoring.prometheusRule.runbookUrl=",))
    assert "runbook_url" not in empty
    for alert in alerts_of(load_all(empty)).values():
        assert set(alert["annotations"]) == {"summary", "description"}


@pytest.mark.parametrize(
    ("window", "settled"), [("10m", "15m"), ("1h30m", "95m"), ("90s", "3m"), ("2s", "4s")]
)
def test_experiment_failed_waits_for_the_operator_series_to_settle(
    window: str, settled: str
) -> None:
    """window + min(window, 5m), as a duration PromQL takes (offset has no arithmetic)."""
    alerts = alerts_of(render(sets=(f"monitoring.prometheusRule.window={window}",)))
    expr = alerts["AgentRLExperimentFailed"]["expr"]
    assert f'agentrl_experiment_condition{{condition="Failed"}} offset {window},' in expr
    assert f"max by (job) (agentrl_experiments offset {settled})" in expr


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_install_without_an_operator_image_stops_with_the_fix(helm: str) -> None:
    """agentrl has published no operator image: the chart's defaults cannot run, so helm
    stops before anything is created, saying what to build and set; no digest is made up."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == "" and values["image"]["digest"] == ""
    proc = run_helm(helm, "template", "agentrl", str(CHART), check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "image.repository is not set: agentrl has published no operator image yet" in (
        proc.stderr
    )
    for fix in ("top-level Dockerfile", "image.digest=sha256:<digest>", "images/README.md"):
        assert fix in proc.stderr, fix
    # `helm lint` renders in lint mode, where a missing required value is only reported.
    lint = run_helm(helm, "lint", "--strict", str(CHART))
    assert "image.repository is not set" in lint.stdout + lint.stderr


def test_notes_warn_about_an_unpinned_operator_image() -> None:
    assert "pulled by tag" not in notes("helm4")  # OPERATOR_IMAGE is pinned
    tagged = notes("helm4", "--set", "image.digest=", "--set", "image.tag=v1")
    assert "WARNING: the operator image is pulled by tag (agentrl/operator:v1)" in tagged


def test_notes_say_no_default_ray_pod_image_is_set_and_how_to_set_one() -> None:
    default = notes("helm4")
    assert "No default Ray pod image is set (operator.runtimeImage)" in default
    for words in ("spec.runtime.image", "images/slime/Dockerfile", "operator.runtimeImage=",
                  "@sha256:<digest>"):  # fmt: skip
        assert words in default, words
    pinned = notes("helm4", "--set", "operator.runtimeImage=rt@sha256:" + "1" * 64)
    assert "No default Ray pod image" not in pinned


def test_notes_state_the_minimum_kuberay() -> None:
    from agentrl.render.kuberay import KUBERAY_MIN_VERSION

    assert f"release {KUBERAY_MIN_VERSION} or newer" in notes("helm4")


def test_notes_name_the_crd_prerequisite_and_how_to_list_experiments() -> None:
    default = notes("helm4")
    assert "kubectl get rlx -A" in default
    assert "must already exist" not in default
    assert "monitoring.coreos.com/v1 is not served" in default  # a client dry run: no API
    external = notes("helm4", "--set", "crds.install=false")
    assert "the CRD rlexperiments.agentrl.io must already exist" in external
    assumed = notes("helm4", "--set", "monitoring.assumeApiAvailable=true")
    assert "is not served" not in assumed


def test_operator_deployment_is_hardened_and_pinned() -> None:
    objs = render()
    deploy = one(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "agentrl/operator@sha256:" + "0" * 64  # OPERATOR_IMAGE
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
    # Two replicas, one leading on the Lease (test_chart_ha.py has the rest).
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    svc = one(objs, "Service")
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == set(ports)
    assert (
        svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


def test_operator_settings_reach_the_operator_config() -> None:
    from agentrl.controller.config import load

    runtime = "agentrl/runtime@sha256:" + "1" * 64  # a test value, never pulled
    deploy = one(render(values=CHART / "ci" / "namespaced-values.yaml",
                        sets=(f"operator.runtimeImage={runtime}",)), "Deployment")  # fmt: skip
    env = {
        e["name"]: e["value"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    cfg = load(env)
    assert cfg.namespaces == ("team-a", "team-b")
    assert cfg.image == runtime
    assert cfg.image_pull_secrets == ("pull-secret",)
    assert cfg.extra_labels == {"team": "research"}
    assert cfg.metrics_port == 8080
    assert cfg.stuck_creating_after == 300
    assert cfg.stuck_unschedulable_after == 900


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
    defaults = OperatorDefaults(image="runtime@sha256:" + "1" * 64)  # a test value
    rayjob = render_all(exp, defaults, {}).rayjob
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
    endpoint, relay = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == relay["port"] == METRICS_PORT_NAME == "agentrl-metrics"
    assert relay["path"] == ENGINE_METRICS_PATH
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


def test_dashboard_uid_is_configurable_for_a_second_release() -> None:
    import json

    source = json.loads((CHART / "files" / "dashboards" / "agentrl.json").read_text())
    assert source["uid"] == "agentrl-experiments"
    (cm,) = find(render(sets=("monitoring.dashboard.uid=team-b-agentrl",)), "ConfigMap")
    shipped = json.loads(cm["data"]["agentrl.json"])
    assert shipped["uid"] == "team-b-agentrl"
    assert shipped == {**source, "uid": "team-b-agentrl"}  # nothing else changed


def test_packaged_chart_renders_the_same(tmp_path: Path) -> None:
    """`helm package` keeps files/ (CRD copy, dashboard) and drops only what .helmignore says."""
    run_helm("helm3", "package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("agentrl-*.tgz")
    args = ["template", "agentrl", str(package), "-n", "agentrl", *OPERATOR_IMAGE, "--api-versions"]
    packaged = run_helm("helm3", *args, "monitoring.coreos.com/v1").stdout
    objs = [doc for doc in yaml.safe_load_all(packaged) if doc]
    assert objs == render()


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_crd_install_refuses_api_servers_without_cel(helm: str) -> None:
    args = ["template", "agentrl", str(CHART), *OPERATOR_IMAGE, "--kube-version", "1.24.9"]
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


def test_the_engines_metrics_can_be_left_unscraped() -> None:
    (default,) = find(render(), "PodMonitor")
    (off,) = find(render(sets=("monitoring.podMonitor.engineMetrics=false",)), "PodMonitor")
    paths = [[e["path"] for e in m["spec"]["podMetricsEndpoints"]] for m in (default, off)]
    assert paths == [["/metrics", "/engine-metrics"], ["/metrics"]]
    # The relay's endpoint is the head's metrics port, relabelled the same way, and its
    # targets get an `endpoint` label of their own (test_chart_podmonitor_targets.py).
    first, relay = default["spec"]["podMetricsEndpoints"]
    own = {"targetLabel": "endpoint", "replacement": "agentrl-engine-metrics", "action": "replace"}
    assert relay["port"] == first["port"] and relay["relabelings"] == [*first["relabelings"], own]
