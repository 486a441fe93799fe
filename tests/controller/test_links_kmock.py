"""What the operator exports for other exporters and links: the experiment's pods (the GPU
panels join dcgm-exporter's series through them) and its Ray dashboard's address."""

from __future__ import annotations

from typing import Any

import pytest
from tests.conftest import minimal_body

from agentrl.api.constants import LABEL_COMPONENT, LABEL_EXPERIMENT
from agentrl.controller.config import ConfigError, OperatorConfig, load, ray_dashboard_link

from .conftest import TEST_IMAGE, Api, OperatorRun, wait_for
from .test_operator_kmock import EXP, NS, RAYJOBS, created, status_of

ADDRESS = "demo-raycluster-x7k2q-head-svc.rl.svc.cluster.local:8265"
PROXY = "http://localhost:8001/api/v1/namespaces/{namespace}/services/{service}:dashboard/proxy/"


def series(operator: OperatorRun, name: str) -> list[dict[str, str]]:
    return [
        s.labels
        for family in operator.metrics.registry.collect()
        for s in family.samples
        if s.name == name and s.value == 1
    ]


def pod(name: str, component: str) -> dict[str, Any]:
    labels = {LABEL_EXPERIMENT: "demo", LABEL_COMPONENT: component}
    return {"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"},
            "metadata": {"name": name, "namespace": NS, "labels": labels}}  # fmt: skip


@pytest.fixture
def op_config() -> OperatorConfig:
    return OperatorConfig(metrics_port=0, liveness_endpoint="", sweep_interval=0.1,
                          scrape_timeout=1.0, image=TEST_IMAGE,
                          ray_dashboard_url=PROXY)  # fmt: skip


async def test_the_experiments_pods_are_exported_while_they_exist(
    api: Api, operator: OperatorRun
) -> None:
    await created(api)
    await api.create(pod("demo-x7k2q-head-abcde", "head"))
    await api.create(pod("demo-x7k2q-gpu-worker-fghij", "worker"))
    want = [
        {"experiment_namespace": NS, "experiment": "demo", "pod": "demo-x7k2q-head-abcde",
         "component": "head"},
        {"experiment_namespace": NS, "experiment": "demo", "pod": "demo-x7k2q-gpu-worker-fghij",
         "component": "worker"},
    ]  # fmt: skip
    await wait_for(
        lambda: (
            sorted(series(operator, "agentrl_experiment_pod_info"), key=str)
            == sorted(want, key=str)
        ),
        what="both pods exported",
    )
    await api.delete("v1/pods", NS, "demo-x7k2q-head-abcde")
    await wait_for(
        lambda: series(operator, "agentrl_experiment_pod_info") == want[1:], what="one left"
    )
    await api.delete(EXP, NS, "demo")
    await wait_for(lambda: not series(operator, "agentrl_experiment_pod_info"), what="all gone")


async def test_the_ray_dashboard_link_follows_the_operators_template(
    api: Api, operator: OperatorRun
) -> None:
    await created(api, minimal_body())
    status = {"jobDeploymentStatus": "Initializing", "dashboardURL": ADDRESS,
              "rayClusterName": "demo-raycluster-x7k2q"}  # fmt: skip
    await api.patch(RAYJOBS, NS, "demo", {"status": status}, "status")
    await wait_for(lambda: status_of(api).get("dashboardURL") == ADDRESS, what="mirrored")
    url = ("http://localhost:8001/api/v1/namespaces/rl/services/"
           "demo-raycluster-x7k2q-head-svc:dashboard/proxy/")  # fmt: skip
    await wait_for(
        lambda: (
            [s["ray_dashboard_url"] for s in series(operator, "agentrl_experiment_info")] == [url]
        ),
        what="the link",
    )


def test_ray_dashboard_templates() -> None:
    key = ("rl", "demo")
    assert ray_dashboard_link("http://{address}", key, ADDRESS, None) == f"http://{ADDRESS}"
    ingress = "https://ray.example.com/{namespace}/{cluster}/"
    assert ray_dashboard_link(ingress, key, ADDRESS, "demo-raycluster-x7k2q") == (
        "https://ray.example.com/rl/demo-raycluster-x7k2q/"
    )
    assert load({}).ray_dashboard_url == "http://{address}"
    assert load({"AGENTRL_RAY_DASHBOARD_URL": PROXY}).ray_dashboard_url == PROXY
    with pytest.raises(ConfigError, match=r"AGENTRL_RAY_DASHBOARD_URL.*\{svc\}"):
        load({"AGENTRL_RAY_DASHBOARD_URL": "http://{svc}/"})


async def test_a_pod_seen_before_its_experiment_counts_once_the_experiment_arrives(
    api: Api, operator: OperatorRun
) -> None:
    """The watches list pods and experiments at the same time (each start, each new leader);
    a running pod may not change again for days, so one seen first is kept and replayed."""
    await api.create(pod("demo-x7k2q-gpu-worker-fghij", "worker"))
    assert operator.memo is not None
    controller = operator.memo.controller
    await wait_for(lambda: controller.early_pods, what="the pod kept aside")
    assert not series(operator, "agentrl_experiment_pod_info")
    await created(api)
    await wait_for(
        lambda: (
            [s["pod"] for s in series(operator, "agentrl_experiment_pod_info")]
            == ["demo-x7k2q-gpu-worker-fghij"]
        ),
        what="the pod replayed",
    )
    assert controller.early_pods == {}
