"""The whole launch with the gang preflight on: it runs after the driver's own checks, and a
problem it finds stops the run before slime starts, in the job log, the log file on the
checkpoint volume and the hub's /metrics.

The pod is launch_pod's (slime's real parser is built), its spec with two GPUs a node and
`preflight.gang: true`, on a local Ray gang of one GPU worker of two GPUs. The launcher
runs as the RayJob's driver does, with no backend flag: NCCL, which this CPU build of torch
cannot give a device to, so each rank fails at once and the driver stops waiting for the
others. (tests/bundle/launch/test_gang_preflight.py runs the collective itself, on gloo.)
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_pod import Pod, slime_upstream
from tests.conftest import TEST_IMAGE
from tests.support import ray_gang
from tests.support.process import free_port

from agentrl.api.models import RLExperiment
from agentrl.api.runtime import RuntimeConfig
from agentrl.controller import preflight as operator_preflight
from agentrl.render import OperatorDefaults, render_all

pytestmark = pytest.mark.slow  # a two-node Ray cluster and slime's parser
GPUS = 2


@pytest.fixture
def gang_pod(tmp_path: Path) -> Iterator[tuple[Pod, ray_gang.GangCluster, int]]:
    slime_upstream.require_upstream()
    pod = Pod(tmp_path / "pod", gang=True)
    spec = pod.exp.spec
    spec.resources.gpus_per_node = GPUS
    spec.resources.shm_size = "256Mi"  # the gang's pods below mount 1Gi
    pod.exp.spec.runtime.preflight.timeout_seconds = 120
    config = RuntimeConfig.load(str(pod.config_path))
    port = free_port()
    config = config.model_copy(update={"spec": spec, "metrics_port": port})
    pod.config_path.write_text(config.to_json())
    # The gang: the render of the four-node example cut to one worker of the pod's GPUs.
    doc = ray_gang.gang_doc(1, "1Gi", 120)
    doc["spec"]["resources"]["gpusPerNode"] = GPUS
    objs = render_all(RLExperiment.model_validate(doc), OperatorDefaults(image=TEST_IMAGE), {})
    (rayjob,) = [o for o in objs if o["kind"] == "RayJob"]
    cluster = ray_gang.GangCluster(rayjob, tmp_path / "pods", 1)
    try:
        yield pod, cluster, port
    finally:
        cluster.shutdown()
        assert cluster.leftovers() == []


def test_a_failed_gang_preflight_stops_the_launch_and_is_reported_everywhere(
    gang_pod: tuple[Pod, ray_gang.GangCluster, int],
) -> None:
    pod, cluster, port = gang_pod
    env = pod.env(RAY_ADDRESS=cluster.address, GLOO_SOCKET_IFNAME="lo", **ray_gang.auth_env())
    launcher = subprocess.Popen(
        pod.command(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    reading = None  # read while the launcher waits for it, before it exits
    while launcher.poll() is None and reading is None:
        try:
            reading = operator_preflight.parse_preflight(ray_gang.read_metrics(port))
        except OSError:  # the hub is not up yet
            reading = None
        time.sleep(0.5)
    _, stderr = launcher.communicate(timeout=600)
    assert launcher.returncode == 2, stderr
    worker = f"pod {cluster.pod_name(0)} on node {cluster.node_name(0)}: AllReduce: rank "
    assert f"agentrl-launch: error: {worker}" in stderr
    assert "gang preflight failed" in stderr and "slime was not started" in stderr
    assert not pod.record.exists()  # train.py never ran
    # The launcher's log file on the checkpoint volume has the same account.
    (log,) = pod.log_files()
    assert f"error: {worker}" in log.read_text()
    assert reading is not None and not reading.passed
    assert reading.reason == "AllReduce" and reading.message.startswith(worker)
