"""The gang preflight for real: the launcher on a local Ray gang, gloo standing in for NCCL.

The cluster is the rendered RayJob's (tests/support/ray_gang): a head and four GPU workers
with the Ray resources the render gives their groups, each a "pod" with its own name, node,
nvidia-smi and loader cache. The launcher runs as it does in the RayJob's driver
(`python -m agentrl.bundle.launch --gang-preflight`, RAY_ADDRESS naming the cluster): Ray
tasks pinned to each worker, one rank per GPU joining a torch.distributed process group at
the driver's TCPStore, the same calls as on GPUs with CPU tensors. Faults are injected the
way they happen: a worker whose nvidia-smi lists one GPU too few, a worker whose /dev/shm is
a small tmpfs, one whose loader cache names another CUDA runtime, and one whose raylet is
frozen (a hung node, whose ranks never join). The result also reaches the hub's /metrics,
which the operator's own parser turns into the Preflight condition.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_trees import ldconfig
from tests.support import ray_gang

from agentrl.api.constants import ConditionType
from agentrl.controller import preflight as operator_preflight
from agentrl.controller import status

pytestmark = pytest.mark.slow  # a five-node Ray cluster on this machine
WORKERS = 4
# spec.runtime.preflight.timeoutSeconds. With a frozen worker the launch waits it out, and
# every healthy rank must join within it (starting a rank imports torch: tens of seconds on
# a loaded 2-core machine). A healthy gang ends once its ranks join, so its bound costs
# nothing and only has to outlast a busy machine.
TIMEOUT = 60
HEALTHY_TIMEOUT = 300
SHM = "256Mi"  # spec.resources.shmSize: each pod's /dev/shm; the bad pod's is smaller


class Gang(ray_gang.Gang):
    def __init__(self, root: Path) -> None:
        super().__init__(root, WORKERS, SHM, TIMEOUT)
        self.last: str | None = None  # the last Preflight message read

    def mark(self) -> None:
        """Remember the reading /metrics shows now (an earlier launch's), so that `reading`
        returns only the next launch's."""
        with contextlib.suppress(OSError):  # no hub yet: nothing to remember
            reading = operator_preflight.parse_preflight(self.metrics())
            self.last = reading.message if reading is not None else None

    def reading(self, launcher: subprocess.Popen[str]) -> operator_preflight.Reading | None:
        """The Preflight reading /metrics shows once the launcher published it (it waits for
        this read before it exits on a failure); None if it exited without publishing."""
        while launcher.poll() is None:
            try:
                reading = operator_preflight.parse_preflight(self.metrics())
            except OSError:  # the hub is not up yet
                reading = None
            if reading is not None and reading.message != self.last:
                self.last = reading.message
                return reading
            time.sleep(0.5)
        reading = operator_preflight.parse_preflight(self.metrics())
        return reading if reading is not None and reading.message != self.last else None


@pytest.fixture(scope="module")
def gang(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gang]:
    g = Gang(tmp_path_factory.mktemp("gang"))
    try:
        yield g
    finally:
        g.cluster.shutdown()
        assert g.cluster.leftovers() == []


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " error: " in line]


def test_a_healthy_gang_passes_and_reports_bus_bandwidth_per_node_pair(gang: Gang) -> None:
    gang.cluster.healthy()
    launcher = gang.launch(timeout=HEALTHY_TIMEOUT)
    _, stderr = launcher.communicate(timeout=600)
    assert launcher.returncode == 0, stderr
    done = subprocess.CompletedProcess(launcher.args, 0, "", stderr)
    assert errors(done.stderr) == []
    assert "gang preflight passed: 4 GPU workers, 4 GPUs checked" in done.stderr
    pairs = [line for line in done.stderr.splitlines() if ":   busbw" in line and "nodes " in line]
    assert len(pairs) == 6  # every pair of four nodes
    for i in range(WORKERS):
        assert f"pod rlx-gpu-worker-{i} on node gpu-node-{i}" in done.stderr
    assert "whole gang" in done.stderr
    # What the operator reads from the hub's /metrics: the Preflight condition.
    reading = operator_preflight.parse_preflight(gang.metrics())
    assert reading is not None and reading.passed
    gang.last = reading.message
    st = status.apply_preflight({}, reading, "2026-01-01T00:00:00Z")
    (cond,) = [c for c in st["conditions"] if c["type"] == ConditionType.PREFLIGHT]
    assert (cond["status"], cond["reason"]) == ("True", "Passed")
    assert cond["message"].startswith("4 GPU workers, 4 GPUs checked")


def test_every_fault_is_named_with_its_pod_and_node_at_once(gang: Gang) -> None:
    gang.cluster.healthy()
    pods = gang.cluster.pods
    (pods[1] / "gpus").write_text("0")  # nvidia-smi lists no GPU on worker 1
    (pods[2] / "shm").write_text("64m")  # worker 2's /dev/shm is a 64 MiB tmpfs
    other = gang.major + 1  # worker 3's loader cache also names another CUDA runtime
    (pods[3] / "ldconfig.txt").write_text(ldconfig(f"/usr/lib/cuda-{other}/libcudart.so.{other}"))
    gang.cluster.stop(0)  # worker 0 hangs: its ranks never join
    gang.mark()
    launcher = gang.launch(timeout=TIMEOUT)
    reading = gang.reading(launcher)  # read while the launcher waits for it
    _, stderr = launcher.communicate(timeout=600)
    assert launcher.returncode == 2, stderr
    found = errors(stderr)
    text = "\n".join(found)
    assert any(
        "pod rlx-gpu-worker-1 on node gpu-node-1: GpuCount: sees 0 GPUs, "
        "spec.resources.gpusPerNode is 1" in line
        for line in found
    ), text
    assert any(
        "pod rlx-gpu-worker-2 on node gpu-node-2: Shm: /dev/shm holds 64.0 MiB, "
        f"spec.resources.shmSize asks for {SHM}" in line
        for line in found
    ), text
    assert any(
        "pod rlx-gpu-worker-3 on node gpu-node-3: CudaPin: CUDA runtime majors "
        f"[{gang.major}, {other}] are all reachable" in line
        for line in found
    ), text
    # The launcher's own detection names the file and where it was found, on that node.
    assert f"/usr/lib/cuda-{other}/libcudart.so.{other} (ldconfig cache)" in stderr
    assert any(
        "rlx-gpu-worker-0" in line and "AllReduce: rank 0 (GPU 0) did not join" in line
        for line in found
    ), text
    assert any("rlx-gpu-worker-0" in line and "did not answer" in line for line in found), text
    # The healthy ranks joined and waited; none of them is blamed.
    assert not any("rank 1 " in line or "rank 2 " in line for line in found), text
    assert reading is not None and not reading.passed
    assert reading.message.startswith(found[0].split(" error: ", 1)[1])
    assert "was not read within" not in stderr  # it exited once /metrics was read
