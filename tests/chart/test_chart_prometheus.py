"""A real Prometheus (Debian 2.42) scrapes agentrl's real metric registries and loads the
chart's rules; every dashboard query and every alert expression must return data.

No timing assertions: the waits are upper bounds for scrapes to accumulate (1 s interval).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import one, render
from test_chart_dashboard import dashboard, queries, substitute
from tests.support.process import free_port, stop

FIXTURE = Path(__file__).parent / "metrics_fixture.py"
WAIT_SECONDS = 90.0  # upper bound for enough scrapes; a healthy run needs a few seconds
# Alerts that need history (a series older than stalledAfter, or than window + min(window, 5m))
# are loaded with 10 s windows, so that seconds of scraping are enough; the others as rendered.
SHORT_WINDOWS = (
    "monitoring.prometheusRule.window=10s",
    "monitoring.prometheusRule.stalledAfter=10s",
    "monitoring.prometheusRule.experimentStalledFor=5s",
)
# A second head pod with the same experiment name (names are unique only per namespace).
OTHER_NAMESPACE = "rl-b"
HISTORY_ALERTS = {"AgentRLProgressStalled", "AgentRLExperimentFailed", "AgentRLExperimentStalled"}


def loaded_rules() -> dict[str, Any]:
    """The PrometheusRule's spec as this Prometheus loads it (see SHORT_WINDOWS)."""
    spec: dict[str, Any] = one(render(), "PrometheusRule")["spec"]
    short = one(render(sets=SHORT_WINDOWS), "PrometheusRule")["spec"]
    by_name = {r["alert"]: r for g in short["groups"] for r in g["rules"]}
    for group in spec["groups"]:
        group["rules"] = [
            by_name[r["alert"]] if r["alert"] in HISTORY_ALERTS else r for r in group["rules"]
        ]
    return spec


@dataclass
class Prom:
    url: str

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[Any]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        result: list[Any] = data["result"]
        return result

    def wait_for(self, expr: str, deadline: float) -> list[Any]:
        while True:
            result = self.query(expr)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.5)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: run hack/setup.sh (Debian prometheus)"
    workdir = tmp_path_factory.mktemp("prometheus")
    fixture = subprocess.Popen(
        [sys.executable, str(FIXTURE)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert fixture.stdout is not None
        ports = dict(item.split("=") for item in fixture.stdout.readline().split())
        (workdir / "rules.yaml").write_text(yaml.safe_dump(loaded_rules()))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [
                {  # what the PodMonitor's relabelling yields for a head pod
                    "job_name": "agentrl-experiments",
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{ports['bundle']}"],
                            "labels": {"namespace": ns, "experiment": "demo"},
                        }
                        # Another team's experiment of the same name in its own namespace.
                        for ns in ("rl", OTHER_NAMESPACE)
                    ],
                },
                {  # the PodMonitor's second endpoint: the head relaying its SGLang engines
                    "job_name": "agentrl-engines",
                    "metrics_path": "/engine-metrics",
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{ports['hub']}"],
                            "labels": {"namespace": "rl", "experiment": "demo"},
                        }
                    ],
                },
                {  # dcgm-exporter as its own chart's ServiceMonitor scrapes it (honorLabels
                    # false): its pod and namespace labels arrive as exported_pod/_namespace
                    "job_name": "dcgm-exporter",
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{ports['dcgm']}"],
                            "labels": {"namespace": "gpu-operator", "pod": "nvidia-dcgm-x"},
                        }
                    ],
                },
                {  # the operator as the chart's ServiceMonitor names it (job = Service name)
                    "job_name": "agentrl",
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{ports['operator']}"],
                            "labels": {"namespace": "agentrl"},
                        }
                    ],
                },
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "prometheus.log").open("w"),
        )
        try:
            prom = Prom(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + WAIT_SECONDS
            while True:
                try:
                    urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2).close()
                    break
                except OSError:
                    assert server.poll() is None, (workdir / "prometheus.log").read_text()
                    assert time.monotonic() < deadline, "prometheus never became ready"
                    time.sleep(0.3)
            yield prom
        finally:
            stop(server)
    finally:
        stop(fixture)


def test_both_targets_are_scraped(prometheus: Prom) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    up = prometheus.wait_for("up == 1", deadline)
    want = {"agentrl-experiments", "agentrl", "agentrl-engines", "dcgm-exporter"}
    while {r["metric"]["job"] for r in up} != want and time.monotonic() < deadline:
        time.sleep(0.5)
        up = prometheus.query("up == 1")
    assert {r["metric"]["job"] for r in up} == want


def test_every_dashboard_query_returns_data(prometheus: Prom) -> None:
    """Numbers, not NaN: a query of 0/0 (a mean over a window without observations) returns
    a NaN sample, which Grafana draws as nothing; `x == x` keeps only numbers."""
    deadline = time.monotonic() + WAIT_SECONDS
    empty = [
        where
        for where, expr in queries(dashboard())
        if not prometheus.wait_for(f"({expr}) == ({expr})", deadline)
    ]
    assert empty == []


def test_every_split_reaches_the_reward_panels(prometheus: Prom) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    result = prometheus.wait_for("max by (split) (agentrl_batch_reward_mean)", deadline)
    assert {r["metric"]["split"] for r in result} == {"train", "eval"}


def test_every_alert_expression_returns_data(prometheus: Prom) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    rules = [r for g in loaded_rules()["groups"] for r in g["rules"]]
    results = {}
    for rule in rules:
        if rule["alert"] == "AgentRLOperatorDown":
            continue  # below: the operator *is* scraped here
        results[rule["alert"]] = prometheus.wait_for(rule["expr"], deadline)
    assert {name for name, result in results.items() if not result} == set()
    ratio = results["AgentRLFailedSessionRatioHigh"]
    assert {r["metric"]["split"] for r in ratio} == {"train"}  # eval fails 20%: not above
    assert all(r["metric"]["experiment"] == "demo" for r in ratio)


def test_operator_down_fires_only_for_an_operator_that_is_not_scraped(prometheus: Prom) -> None:
    def down_expr(namespace: str) -> str:
        groups = one(render(namespace=namespace), "PrometheusRule")["spec"]["groups"]
        (rule,) = [r for g in groups for r in g["rules"] if r["alert"] == "AgentRLOperatorDown"]
        expr: str = rule["expr"]
        return expr

    deadline = time.monotonic() + WAIT_SECONDS
    assert prometheus.wait_for(down_expr("elsewhere"), deadline)
    prometheus.wait_for('up{job="agentrl"} == 1', deadline)
    assert prometheus.query(down_expr("agentrl")) == []


def test_prometheus_loads_the_rules_and_fires_experiment_failed(prometheus: Prom) -> None:
    groups = prometheus.get("/api/v1/rules")["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    assert names == {r["alert"] for g in loaded_rules()["groups"] for r in g["rules"]}
    want = {"AgentRLExperimentFailed", "AgentRLExperimentStalled"}
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        alerts = prometheus.get("/api/v1/alerts")["alerts"]
        firing = [a["labels"] for a in alerts if a["state"] == "firing"]
        if want <= {a["alertname"] for a in firing} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # Failed has no `for`: it fires once the operator's series is 20 s old (10s window + 10s)
    # and another experiment failed in the last 10 s, which the fixture makes happen every 5 s;
    # the kept failure of rl/c never does. Stalled fires 5 s after rl/e is first seen Stalled.
    failed = {a["experiment"] for a in firing if a["alertname"] == "AgentRLExperimentFailed"}
    assert failed and all(name.startswith("failed-") for name in failed), failed
    stalled = [a for a in firing if a["alertname"] == "AgentRLExperimentStalled"]
    assert [(a["namespace"], a["experiment"], a["reason"]) for a in stalled] == [
        ("rl", "e", "ImagePullBackOff")
    ]
    rules = [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]
    assert all(r["health"] == "ok" for r in rules), [r for r in rules if r["health"] != "ok"]


def test_dashboard_variables_find_the_experiment(prometheus: Prom) -> None:
    """The namespace and experiment variables' label_values() queries, as Grafana runs them."""
    deadline = time.monotonic() + WAIT_SECONDS
    prometheus.wait_for("agentrl_rollout_step", deadline)
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name, expected in (("namespace", ["rl", OTHER_NAMESPACE]), ("experiment", ["demo"])):
        query = variables[name]["query"].replace("$namespace", "rl")
        metric, label = query.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        assert label == name
        values = prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert values == expected
    # The hidden `run` variable the reward XY panel repeats over: each experiment as
    # <namespace>/<experiment> (query_result is an instant query; the regex is Grafana's).
    query = variables["run"]["query"].removeprefix("query_result(").removesuffix(")")
    query = substitute(query, {"$namespace": ".+", "$experiment": ".+", "$__range": "1h"})
    pattern = re.compile(variables["run"]["regex"].strip("/"))
    runs = []
    for r in prometheus.wait_for(query, deadline):  # the line Grafana makes of a sample
        line = ", ".join(f'{k}="{v}"' for k, v in sorted(r["metric"].items()))
        runs += pattern.findall(f"{{{line}}} {r['value'][1]} {r['value'][0]}")
    assert sorted(runs) == sorted(f"{ns}/demo" for ns in ("rl", OTHER_NAMESPACE))


def test_panels_keep_same_named_experiments_of_two_namespaces_apart(prometheus: Prom) -> None:
    """Experiment names are unique only within a namespace, and the namespace variable selects
    all of them by default: every series a panel draws for an experiment names its namespace,
    so rl/demo and rl-b/demo are two series, never one sum or average of both."""
    deadline = time.monotonic() + WAIT_SECONDS
    prometheus.wait_for(f'agentrl_samples_total{{namespace="{OTHER_NAMESPACE}"}}', deadline)
    legends = legend_formats()
    merged, drawn, alike = [], {}, []
    for where, expr in queries(dashboard()):
        shown: list[str] = []
        for r in prometheus.wait_for(expr, deadline):
            labels = r["metric"]
            # Grafana's {{label}} substitution: two series alike in their legend are one to
            # the reader (the Ray dashboards' bars are links: the wrong one opens another
            # team's dashboard).
            shown.append(legend(legends[where], labels))
            if "experiment" not in labels:
                continue  # the XY panel, repeated per experiment
            ns = labels.get("namespace", labels.get("experiment_namespace"))
            if ns is None:
                merged.append(where)
            drawn.setdefault(where, set()).add((ns, labels["experiment"]))
        # W&B runs are labelled by their W&B group; the fixture's two head targets are one
        # registry and so report one group, where rl-b's own run would report rl-b/demo.
        if len(set(shown)) < len(shown) and not where.startswith("W&B runs/"):
            alike.append(where)
    assert merged == []
    assert alike == []
    (samples,) = panel_exprs("Training samples/s")
    assert drawn[next(w for w in drawn if w.startswith("Training samples/s/"))] == {
        ("rl", "demo"),
        (OTHER_NAMESPACE, "demo"),
    }, samples


def legend(fmt: str, labels: dict[str, str]) -> str:
    """A legend as Grafana renders it: each {{label}} replaced by the series' value."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: labels.get(m[1], ""), fmt)


def legend_formats() -> dict[str, str]:
    """Each query's legend (a panel target's legendFormat, an annotation's titleFormat), by
    the names queries() gives them."""
    dash = dashboard()
    out = {
        f"{p['title']}/{t['refId']}": t.get("legendFormat", "")
        for p in dash["panels"]
        for t in p.get("targets", ())
    }
    for a in dash["annotations"]["list"]:
        out[f"annotation {a['name']}"] = a.get("target", {}).get("titleFormat", "")
    return out


def panel_exprs(title: str) -> list[str]:
    return [expr for where, expr in queries(dashboard()) if where.startswith(f"{title}/")]


def test_gpu_panels_show_the_experiments_gpus_and_no_one_elses(prometheus: Prom) -> None:
    """dcgm-exporter's page names two GPUs of the experiment's worker pod and one of another
    team's pod; the operator maps the worker pod to rl/demo. Scraped as dcgm-exporter's own
    chart does (its pod labels arrive as exported_pod, exported_namespace)."""
    deadline = time.monotonic() + WAIT_SECONDS
    (util,) = panel_exprs("GPU utilisation")
    result = prometheus.wait_for(util, deadline)
    assert [(r["metric"], float(r["value"][1])) for r in result] == [
        ({"namespace": "rl", "experiment": "demo"}, 89.0)  # mean of 87 and 91
    ]
    used, total = panel_exprs("GPU memory used")
    assert float(prometheus.wait_for(used, deadline)[0]["value"][1]) == (71234 + 70980) * 2**20
    assert float(prometheus.wait_for(total, deadline)[0]["value"][1]) == 2 * 80727 * 2**20
    (power,) = panel_exprs("GPU power")
    assert [float(r["value"][1]) for r in prometheus.wait_for(power, deadline)] == [612.4 + 598.1]


def test_engine_panels_show_each_engine_the_head_relays(prometheus: Prom) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    running, queued = panel_exprs("Engine requests running and queued")
    result = prometheus.wait_for(running, deadline)
    assert len({r["metric"]["engine"] for r in result}) == 2  # both stub engines
    assert {float(r["value"][1]) for r in result} == {42.0}
    assert {float(r["value"][1]) for r in prometheus.wait_for(queued, deadline)} == {7.0}
    hit, kv = panel_exprs("Engine prefix-cache hit rate and KV usage")
    assert {float(r["value"][1]) for r in prometheus.wait_for(hit, deadline)} == {0.62}
    assert {float(r["value"][1]) for r in prometheus.wait_for(kv, deadline)} == {0.71}
