"""The PodMonitor's endpoints as the Prometheus Operator turns them into scrape jobs, scraped
by a real Prometheus (Debian 2.42): each endpoint of the head pod must be its own target, with
its own `up` series.

`scrape_configs` transcribes what generatePodMonitorConfig writes for the fields the chart uses
(https://github.com/prometheus-operator/prometheus-operator/blob/f8fafd475f3d132e239432ae6172de60a6cb6516/pkg/prometheus/promcfg.go,
v0.93.0): one job per endpoint, the running-pod filter, the selector and port `keep`s, the
namespace/container/pod labels, `job` = `<namespace>/<name>`, `endpoint` = the port name, then
the endpoint's own relabelings. The rendered head pod stands in for kubernetes_sd's pod role as
a static target with the same meta labels.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import ROOT, one, render
from tests.support.process import free_port, stop

from agentrl.api.constants import METRICS_PORT_NAME
from agentrl.api.validation import parse_experiment
from agentrl.bundle.engine_metrics import ENGINE_METRICS_PATH
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.objects import render_all

WAIT_SECONDS = 90.0  # upper bound for a few scrapes at 1 s; a healthy run needs seconds
EXAMPLE = sorted((ROOT / "examples").glob("*.yaml"))[0]


def sanitize(name: str) -> str:
    """promcfg's sanitizeLabelName: a Kubernetes label key as a Prometheus label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def relabel(rule: dict[str, Any]) -> dict[str, Any]:
    """A monitoring.coreos.com RelabelConfig as Prometheus' relabel_config."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {keys.get(k, k): v for k, v in rule.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


def head_pod_meta(namespace: str) -> dict[str, str]:
    """kubernetes_sd's pod-role labels of the rendered head pod's metrics port."""
    exp, problems = parse_experiment(yaml.safe_load(EXAMPLE.read_text()))
    assert exp is not None, problems
    rayjob = render_all(exp, OperatorDefaults(image="runtime@sha256:" + "1" * 64), {}).rayjob
    template = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    # KubeRay adds its cluster label to the pods it creates.
    labels = {**template["metadata"]["labels"], "ray.io/cluster": f"{exp.metadata.name}-abcde"}
    (container,) = [
        c for c in template["spec"]["containers"]
        if any(p.get("name") == METRICS_PORT_NAME for p in c.get("ports", ()))
    ]  # fmt: skip
    meta = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": f"{exp.metadata.name}-head-xyz",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_name": container["name"],
        "__meta_kubernetes_pod_container_port_name": METRICS_PORT_NAME,
    }
    for key, value in labels.items():
        meta[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
        meta[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
    return meta


def scrape_configs(monitor: dict[str, Any], address: str, meta: dict[str, str]) -> list[Any]:
    """generatePodMonitorConfig's scrape jobs for `monitor` (see the module docstring)."""
    ns, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    spec = monitor["spec"]
    jobs = []
    for i, ep in enumerate(spec["podMetricsEndpoints"]):
        rules: list[dict[str, Any]] = [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
             "regex": "(Failed|Succeeded)"},
        ]  # fmt: skip
        for key, value in sorted(spec["selector"]["matchLabels"].items()):
            rules.append({"action": "keep", "regex": f"({value});true", "source_labels": [
                f"__meta_kubernetes_pod_label_{sanitize(key)}",
                f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"]})  # fmt: skip
        for expr in spec["selector"].get("matchExpressions", ()):
            assert expr["operator"] == "Exists", expr  # the only operator the chart uses
            rules.append({"action": "keep", "regex": "true", "source_labels": [
                f"__meta_kubernetes_pod_labelpresent_{sanitize(expr['key'])}"]})  # fmt: skip
        rules += [
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
             "regex": ep["port"]},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"],
             "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{ns}/{name}"},
            {"target_label": "endpoint", "replacement": ep["port"]},
        ]  # fmt: skip
        rules += [relabel(r) for r in ep.get("relabelings", ())]
        jobs.append({
            "job_name": f"podMonitor/{ns}/{name}/{i}",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "metrics_path": ep["path"],
            "static_configs": [{"targets": [address], "labels": meta}],
            "relabel_configs": rules,
        })  # fmt: skip
    return jobs


class HeadPod(http.server.BaseHTTPRequestHandler):
    """The head's metrics port: its own /metrics answers; the engine relay fails (slime's
    router unreachable), as it can while the head's own metrics are fine."""

    def do_GET(self) -> None:
        ok = self.path == "/metrics"
        body = b"agentrl_rollout_step 3\n" if ok else b"router unreachable\n"
        self.send_response(200 if ok else 500)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def get(url: str, path: str, **params: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(Prometheus URL, number of endpoints) scraping the default PodMonitor's jobs."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: run hack/setup.sh (Debian prometheus)"
    workdir: Path = tmp_path_factory.mktemp("podmonitor")
    head = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HeadPod)
    threading.Thread(target=head.serve_forever, daemon=True).start()
    monitor = one(render(), "PodMonitor")
    assert [e["path"] for e in monitor["spec"]["podMetricsEndpoints"]] == [
        "/metrics", ENGINE_METRICS_PATH]  # fmt: skip
    jobs = scrape_configs(monitor, f"127.0.0.1:{head.server_address[1]}", head_pod_meta("rl"))
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    server = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(workdir / "prometheus.log").open("w"),
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT_SECONDS
        while True:  # 6 scrapes per target: more than the tests' 5 s windows
            try:
                query = "sum(count_over_time(up[1m]))"
                scraped = get(url, "/api/v1/query", query=query)["result"]
                if scraped and float(scraped[0]["value"][1]) >= 6 * len(jobs):
                    break
            except OSError:
                assert server.poll() is None, (workdir / "prometheus.log").read_text()
            assert time.monotonic() < deadline, (workdir / "prometheus.log").read_text()
            time.sleep(0.5)
        yield url, len(jobs)
    finally:
        stop(server)
        head.shutdown()


def test_each_endpoint_is_a_target_of_its_own(prometheus: tuple[str, int]) -> None:
    url, endpoints = prometheus
    targets = get(url, "/api/v1/targets")["activeTargets"]
    assert len(targets) == endpoints
    assert all(t["labels"]["experiment"] and t["labels"]["ray_cluster"] for t in targets)
    labels = {json.dumps(t["labels"], sort_keys=True) for t in targets}
    assert len(labels) == endpoints, labels  # one label set each, or their series are one


def test_a_failing_engine_relay_is_down_and_the_head_stays_up(
    prometheus: tuple[str, int],
) -> None:
    url, endpoints = prometheus
    # Over the last seconds: one `up` series per endpoint, each steady. A series written by
    # both targets reads 0 and 1 in turn, so `up == 0` (or `for:` on it) never holds.
    lows = get(url, "/api/v1/query", query="min_over_time(up[5s])")["result"]
    highs = get(url, "/api/v1/query", query="max_over_time(up[5s])")["result"]
    assert len(lows) == len(highs) == endpoints, (lows, highs)
    steady = {r["metric"]["endpoint"]: r["value"][1] for r in lows}
    assert steady == {r["metric"]["endpoint"]: r["value"][1] for r in highs}
    assert steady == {METRICS_PORT_NAME: "1", "agentrl-engine-metrics": "0"}
