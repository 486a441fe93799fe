"""Where Ray runs the RayJob's driver, proved on a local two-node Ray with Ray's own code.

The RayJob is agentrl's render of the example the launcher tests' pod tree is built from.
KubeRay turns it into two things this test rebuilds the way KubeRay's controller does
(tests/support/kuberay_cli.py):

- each pod's `ray start` flags from its group's rayStartParams (` --key=value `, run by
  bash), read here by Ray's own `ray start` command-line parser;
- the submitter's `ray job submit --no-wait --runtime-env-json <quoted JSON of
  runtimeEnvYAML> --entrypoint-resources <quoted> -- <entrypoint>`, run here through bash
  with the real `ray` CLI against the cluster's dashboard.

The cluster is Ray's own `cluster_utils.Cluster`: a head with the head group's resources and
a GPU worker with the worker group's (GPUs are a logical count here). Each node's processes
see the pod they stand for through the env (`AGENTRL_POD_GPUS`, see
tests/support/upstream_site/torch_cuda.py), and both run with Ray's older rule of blanking
CUDA_VISIBLE_DEVICES for a zero-GPU process (`RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1`), the
harder case. The entrypoint is the real launcher in a launch_pod tree; where it starts slime,
slime's own parse_args (Megatron's validate_args included) runs on the argv and env it
exec'd train.py with. Two controls show why each field is there: without
`entrypointResources` Ray runs the driver on the head; without the runtime env Ray hides the
worker's GPUs from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from launch_pod import Pod, slime_upstream
from launch_trees import EXAMPLE_C, example_doc, experiment
from ray.cluster_utils import Cluster
from ray.job_submission import JobStatus, JobSubmissionClient
from tests.conftest import TEST_IMAGE
from tests.support import kuberay_cli
from tests.support.process import free_port

from agentrl.api.constants import CONFIG_PATH
from agentrl.render import OperatorDefaults, render_all

pytestmark = pytest.mark.slow  # a two-node Ray cluster and three jobs
RAY_CLI = str(Path(sys.executable).parent / "ray")
# Ray releases before ray-project/ray#62492 blank CUDA_VISIBLE_DEVICES for a zero-GPU
# process; the Ray in the slime image may be one of them.
OLD_RAY_RULE = {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}
# The entrypoint in place of the rendered one (which reads the config at CONFIG_PATH): prints
# what the driver process sees, then runs the launcher of the pod tree in the env the pod
# image gives it (keeping what Ray and the node set).
WRAPPER = """
import json, os, sys
seen = {k: os.environ.get(k) for k in ("AGENTRL_TEST_NODE", "CUDA_VISIBLE_DEVICES",
                                       "AGENTRL_POD_GPUS")}
print("DRIVER " + json.dumps(seen), flush=True)
spec = json.load(open(sys.argv[1]))
env = {**spec["env"], **{k: v for k, v in os.environ.items() if k in spec["from_node"]}}
os.execvpe(spec["argv"][0], spec["argv"], env)
"""


class RayCluster:
    """The rendered RayJob's cluster on this machine: the head and one GPU worker."""

    def __init__(self, rayjob: dict[str, Any]) -> None:
        head, worker, gpus = kuberay_cli.cluster_groups(rayjob)
        self.dashboard = free_port()
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "num_gpus": int(head["num_gpus"]),
                "resources": head["resources"],
                "gcs_server_port": free_port(),
                "include_dashboard": True,
                "dashboard_host": "127.0.0.1",
                "dashboard_port": self.dashboard,
                "dashboard_agent_listen_port": free_port(),
                "env_vars": {"AGENTRL_TEST_NODE": "head", "AGENTRL_POD_GPUS": "0", **OLD_RAY_RULE},
            },
        )
        self.cluster.add_node(
            num_cpus=1,
            num_gpus=gpus,
            resources=worker["resources"],
            dashboard_agent_listen_port=free_port(),
            env_vars={"AGENTRL_TEST_NODE": "worker", "AGENTRL_POD_GPUS": str(gpus), **OLD_RAY_RULE},
        )
        self.address = f"http://127.0.0.1:{self.dashboard}"
        self.client = self._client()

    def _client(self) -> JobSubmissionClient:
        deadline = time.monotonic() + 120
        while True:
            try:
                return JobSubmissionClient(self.address)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def run(self, job: dict[str, Any], name: str, entry: str) -> tuple[JobStatus, str]:
        command = kuberay_cli.submit_command(job, RAY_CLI, self.address, name, entry)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 300
        while not (status := self.client.get_job_status(name)).is_terminal():
            assert time.monotonic() < deadline, f"job {name} still {status}"
            time.sleep(0.5)
        return status, self.client.get_job_logs(name)

    def shutdown(self) -> None:
        self.cluster.shutdown()


def rendered() -> dict[str, Any]:
    """The RayJob of the example the pod tree is built from, as agentrl renders it."""
    objs = render_all(experiment(example_doc(EXAMPLE_C)), OperatorDefaults(image=TEST_IMAGE), {})
    (job,) = [o for o in objs if o["kind"] == "RayJob"]
    return job


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pod, dict[str, Any], Any]]:
    slime_upstream.require_upstream()
    root = tmp_path_factory.mktemp("placement")
    pod = Pod(root / "pod")
    job = rendered()
    cluster = RayCluster(job)
    try:
        yield pod, job, cluster
    finally:
        cluster.shutdown()


def entry(pod: Pod, tmp: Path) -> str:
    """The driver command: the rendered entrypoint's launcher, in the pod tree's env."""
    wrapper = tmp / "driver.py"
    wrapper.write_text(WRAPPER)
    env = pod.env()
    from_node = ("AGENTRL_POD_GPUS", "CUDA_VISIBLE_DEVICES", "AGENTRL_TEST_NODE")
    spec = {
        "argv": pod.command(),
        "env": {k: v for k, v in env.items() if k not in from_node},
        "from_node": from_node,
    }
    (tmp / "driver.json").write_text(json.dumps(spec))
    return f"{sys.executable} {wrapper} {tmp / 'driver.json'}"


def driver_seen(logs: str) -> dict[str, Any]:
    (line,) = [x for x in logs.splitlines() if x.startswith("DRIVER ")]
    seen: dict[str, Any] = json.loads(line.removeprefix("DRIVER "))
    return seen


def test_the_rendered_entrypoint_is_the_launcher(setup: tuple[Pod, dict[str, Any], Any]) -> None:
    pod, job, _ = setup
    assert job["spec"]["entrypoint"] == f"python3 -m agentrl.bundle.launch --config {CONFIG_PATH}"
    assert pod.command()[1:4] == ["-m", "agentrl.bundle.launch", "--config"]


def test_the_driver_runs_on_a_gpu_worker_that_slime_can_use(
    setup: tuple[Pod, dict[str, Any], Any], tmp_path: Path
) -> None:
    pod, job, cluster = setup
    status, logs = cluster.run(job["spec"], "agentrl-rendered", entry(pod, tmp_path))
    assert status == JobStatus.SUCCEEDED, logs
    assert driver_seen(logs) == {
        "AGENTRL_TEST_NODE": "worker",
        "CUDA_VISIBLE_DEVICES": None,  # Ray left the pod's GPUs visible
        "AGENTRL_POD_GPUS": str(pod.exp.spec.resources.gpus_per_node),
    }
    # The launcher exec'd train.py there; slime's own parse_args, in that env, gets past
    # Megatron's validate_args.
    recorded = pod.recorded()
    env = {"CUDA_VISIBLE_DEVICES": None, **recorded["env"]}
    [result] = slime_upstream.run_slime(pod.row, [{"argv": recorded["argv"][1:], "env": env}])
    assert "parse_error" not in result, result.get("trace")


def test_without_entrypoint_resources_ray_runs_the_driver_on_the_head(
    setup: tuple[Pod, dict[str, Any], Any], tmp_path: Path
) -> None:
    pod, job, cluster = setup
    old = {
        k: v for k, v in job["spec"].items() if k not in ("entrypointResources", "runtimeEnvYAML")
    }
    status, logs = cluster.run(old, "agentrl-no-resources", entry(pod, tmp_path))
    assert status == JobStatus.FAILED
    assert driver_seen(logs)["AGENTRL_TEST_NODE"] == "head"
    assert "slime's driver sees no CUDA device: this pod has no GPU" in logs


def test_without_the_runtime_env_ray_hides_the_workers_gpus(
    setup: tuple[Pod, dict[str, Any], Any], tmp_path: Path
) -> None:
    pod, job, cluster = setup
    bare = {k: v for k, v in job["spec"].items() if k != "runtimeEnvYAML"}
    status, logs = cluster.run(bare, "agentrl-no-runtime-env", entry(pod, tmp_path))
    assert status == JobStatus.FAILED
    seen = driver_seen(logs)
    assert (seen["AGENTRL_TEST_NODE"], seen["CUDA_VISIBLE_DEVICES"]) == ("worker", "")
    assert "slime's driver sees no CUDA device: CUDA_VISIBLE_DEVICES is empty" in logs
