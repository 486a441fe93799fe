"""A rendered RayJob's gang on this machine: a local Ray head and N GPU workers, each a "pod".

Test support for the launcher's gang preflight (tests/bundle/launch/test_gang_preflight.py,
benchmarks/preflight.py). The head and the workers start with the Ray resources the render
gives their groups (`rayStartParams`, read by Ray's own `ray start` parser through
tests/support/kuberay_cli), as Ray's `cluster_utils.Cluster` nodes this process owns. Each
worker's processes see their pod through the env: its name and Kubernetes node (the
downward-API variables the render sets), and a bin directory with

- `nvidia-smi`: answers `--list-gpus` and the health query in nvidia-smi's own formats, from
  the pod's `gpus` file (a count) and `health.csv` (rows as `--format=csv,noheader,nounits`
  prints them), so a test can take a GPU away or break one;
- `ldconfig`: prints the pod's `ldconfig.txt`, this machine's own `ldconfig -p` with one
  CUDA runtime major (tests/support/loader_cache.py); a test writes another to put a second
  runtime in one pod's cache.

Each pod's `shm` file holds the size of its /dev/shm: `sitecustomize` mounts a tmpfs of that
size there in a private mount namespace of each Python process Ray starts on that worker
(as root, as the project's machines and CI run: the check then reads a real tmpfs). Without
the right to mount (another user, a container without CAP_SYS_ADMIN) `os.statvfs` of
/dev/shm answers the pod's size in those processes instead. A healthy
pod's is the size the rendered worker template's /dev/shm volume gives it, never this
machine's own /dev/shm (a container's is 64 MiB by default, which would fail a healthy
gang); a test shrinks one to inject a fault.

`stop(i)` freezes a worker's raylet (SIGSTOP): Ray still lists the node, but nothing starts
there any more, as on a hung node. Teardown resumes it, shuts the cluster down by process id
and kills any process it left behind (by id, never by name).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import yaml
from ray._private import ray_constants
from ray.cluster_utils import Cluster
from tests.conftest import TEST_IMAGE
from tests.support import kuberay_cli, loader_cache
from tests.support.process import free_port

from agentrl.api.models import RLExperiment
from agentrl.api.quantity import parse_quantity
from agentrl.api.runtime import RuntimeConfig
from agentrl.render import OperatorDefaults, render_all

REPO = Path(__file__).resolve().parents[2]
FOUR_NODES = REPO / "examples" / "qwen3-32b-swe-4node-tp-pp.yaml"

FAKE_NVIDIA_SMI = """#!/bin/sh
pod="$(dirname "$0")/.."
n=$(cat "$pod/gpus")
case "$1" in
  --list-gpus)
    i=0
    while [ "$i" -lt "$n" ]; do
      echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000$i-1111-2222-3333-444444444444)"
      i=$((i + 1))
    done ;;
  --query-gpu=*)
    if [ -f "$pod/health.csv" ]; then cat "$pod/health.csv"; exit 0; fi
    i=0
    while [ "$i" -lt "$n" ]; do
      echo "$i, 00000000:0$i:00.0, 0, No, No, None"
      i=$((i + 1))
    done ;;
  *) echo "fake nvidia-smi: unsupported $*" >&2; exit 2 ;;
esac
"""

# Runs first in every Python process Ray starts on the pod: a private /dev/shm of the size
# the pod's `shm` file names (bytes, or tmpfs's k/m/g), in this process's own mount namespace.
# Without CAP_SYS_ADMIN (a user other than root, or a container that drops it) no tmpfs can
# be mounted: statvfs of /dev/shm then answers the pod's size instead, never this machine's.
# An exception here would only be printed by `site`, and the checks would read the host's.
SITECUSTOMIZE = """
import ctypes, os
_size = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shm")


def _bytes(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def _mounted(size):
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 0x40000
    return (
        libc.unshare(CLONE_NEWNS) == 0
        and libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0
        and libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, ("size=" + size).encode()) == 0
    )


def _answering(size):
    real = os.statvfs

    def statvfs(path):
        st = real(path)
        if isinstance(path, int) or os.path.abspath(os.fsdecode(path)) != "/dev/shm":
            return st
        fields = list(st)  # f_bsize, f_frsize, f_blocks, f_bfree, f_bavail, ...
        blocks = size // (st.f_frsize or 4096)
        fields[2:5] = [blocks, min(st.f_bfree, blocks), min(st.f_bavail, blocks)]
        return os.statvfs_result(fields)

    os.statvfs = statvfs


if os.path.exists(_size):
    _text = open(_size).read().strip()
    if not _mounted(_text):
        _answering(_bytes(_text))
"""


class GangCluster:
    """The head and `workers` GPU workers of a rendered RayJob, on this machine."""

    def __init__(self, rayjob: Mapping[str, Any], root: Path, workers: int) -> None:
        head, worker, self.gpus = kuberay_cli.cluster_groups(rayjob)
        self.shm_bytes = shm_bytes(rayjob)
        self.root = root
        self.pods = [self._pod(i) for i in range(workers)]
        self.stopped: list[int] = []
        self._mine = {p.pid for p in psutil.Process().children(recursive=True)}
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "num_gpus": int(head["num_gpus"]),
                "resources": head["resources"],
                "gcs_server_port": free_port(),
                "include_dashboard": False,
                "node_name": "head",
                # A frozen worker stays listed (as a hung node does, for a while).
                "_system_config": {"health_check_failure_threshold": 100000},
                "env_vars": {"AGENTRL_POD_NAME": "rlx-head", "AGENTRL_NODE_NAME": "cpu-node"},
            },
        )
        self.nodes = []
        for i, pod in enumerate(self.pods):
            node = self.cluster.add_node(
                num_cpus=1,
                num_gpus=self.gpus,
                resources=worker["resources"],
                node_name=self.pod_name(i),
                env_vars=self._env(i, pod),
            )
            self.nodes.append(node)
        self.address = self.cluster.address

    @staticmethod
    def pod_name(i: int) -> str:
        return f"rlx-gpu-worker-{i}"

    @staticmethod
    def node_name(i: int) -> str:
        return f"gpu-node-{i}"

    def _pod(self, i: int) -> Path:
        pod = self.root / f"pod-{i}"
        pod.mkdir(parents=True)
        (pod / "site").mkdir()
        bin_dir = loader_cache.install(pod)
        (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
        (bin_dir / "nvidia-smi").chmod(0o755)
        (pod / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        return pod

    def _env(self, i: int, pod: Path) -> dict[str, str]:
        self._as_rendered(pod)
        python_path = os.pathsep.join(
            p for p in (str(pod / "site"), os.environ.get("PYTHONPATH")) if p
        )
        return {
            "AGENTRL_POD_NAME": self.pod_name(i),
            "AGENTRL_NODE_NAME": self.node_name(i),
            "PATH": f"{pod / 'bin'}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": python_path,
            "GLOO_SOCKET_IFNAME": "lo",
        }

    def healthy(self) -> None:
        """Undo every fault the pods' files inject."""
        for pod in self.pods:
            self._as_rendered(pod)
            loader_cache.reset(pod)
            (pod / "health.csv").unlink(missing_ok=True)

    def _as_rendered(self, pod: Path) -> None:
        """The pod as the render makes it: its GPUs, and its /dev/shm volume's size."""
        (pod / "gpus").write_text(str(self.gpus))
        (pod / "shm").write_text(str(self.shm_bytes))

    def stop(self, i: int) -> None:
        """Freeze worker i's raylet: listed by Ray, but nothing starts there."""
        os.kill(self._raylet(i), signal.SIGSTOP)
        self.stopped.append(i)

    def _raylet(self, i: int) -> int:
        (info,) = self.nodes[i].all_processes[ray_constants.PROCESS_TYPE_RAYLET]
        pid: int = info.process.pid
        return pid

    def _started(self) -> list[psutil.Process]:
        return [p for p in psutil.Process().children(recursive=True) if p.pid not in self._mine]

    def shutdown(self) -> None:
        """Resume frozen raylets, shut the cluster down, then kill by id every process it
        started (seen before the shutdown, so one re-parented meanwhile is not missed)."""
        started = self._started()
        for i in self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._raylet(i), signal.SIGCONT)
        try:
            self.cluster.shutdown()
        finally:
            left = [p for p in {*started, *self._started()} if p.is_running()]
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(left, timeout=10)

    def leftovers(self) -> list[str]:
        """Processes the cluster started that still run (none after `shutdown`)."""
        out = []
        for p in self._started():
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(" ".join(p.cmdline()[:3]))
        return out


def shm_bytes(rayjob: Mapping[str, Any]) -> int:
    """The size of the volume a rendered RayJob's worker template mounts at /dev/shm."""
    (group,) = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return int(parse_quantity(volume["emptyDir"]["sizeLimit"]))


def auth_env() -> dict[str, str]:
    """Ray's token auth as this process's clusters run it (tests/conftest.py sets it), for a
    driver launched with an env of its own: as KubeRay gives every container of a cluster."""
    return {k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN") if k in os.environ}


def gang_doc(workers: int, shm: str, timeout: int) -> dict[str, Any]:
    """The four-node example reshaped to `workers` nodes of one GPU each (a rank per GPU;
    CPU ranks are costly on this machine), with its gang preflight's budget."""
    (doc,) = [d for d in yaml.safe_load_all(FOUR_NODES.read_text()) if d]
    spec = doc["spec"]
    res = spec["resources"]
    res.update({"nodes": workers, "gpusPerNode": 1, "shmSize": shm, "colocate": True})
    res["parallelism"] = {"tensor": 1, "pipeline": 1}
    res["rolloutGpusPerEngine"] = 1
    for key in ("extraResources", "rolloutGpus"):
        res.pop(key, None)
    spec.setdefault("runtime", {})["preflight"] = {"timeoutSeconds": timeout}
    return dict(doc)


class Gang:
    """A GangCluster of the rendered RayJob, and the launcher's runtime config for it."""

    def __init__(self, root: Path, workers: int, shm: str, timeout: int) -> None:
        doc = gang_doc(workers, shm, timeout)
        self.major = loader_cache.pod_major()
        self.driver_bin = loader_cache.install(root / "driver")  # the driver's pod, too
        for name in (f"libcudart.so.{self.major}", f"libcudart.so.{self.major}.0.76"):
            (root / "cuda" / "lib64").mkdir(parents=True, exist_ok=True)
            (root / "cuda" / "lib64" / name).write_text("")
        doc["spec"]["runtime"]["cudaHome"] = str(root / "cuda")
        self.exp = RLExperiment.model_validate(doc)
        objs = render_all(self.exp, OperatorDefaults(image=TEST_IMAGE), {})
        (self.rayjob,) = [o for o in objs if o["kind"] == "RayJob"]
        self.metrics_port = free_port()
        self.config_path = root / "config.json"
        self._write_config()
        self.cluster = GangCluster(self.rayjob, root / "pods", workers)

    def _write_config(self) -> None:
        self.config_path.write_text(
            RuntimeConfig(
                experiment="gang",
                namespace="rl",
                bundle_version="t",
                spec=self.exp.spec,
                gateway_url="http://gw:9090",
                metrics_port=self.metrics_port,
            ).to_json()
        )

    def launch(self, mib: int = 1, timeout: int | None = None) -> subprocess.Popen[str]:
        """The launcher as the RayJob's driver runs it, gang preflight only, on gloo;
        `timeout` sets this launch's spec.runtime.preflight.timeoutSeconds."""
        if timeout is not None:
            self.exp.spec.runtime.preflight.timeout_seconds = timeout
            self._write_config()
        cmd = [sys.executable, "-m", "agentrl.bundle.launch", "--config", str(self.config_path)]
        cmd += ["--gang-preflight", "--preflight-backend", "gloo", "--preflight-mib", str(mib)]
        env = {
            "PATH": f"{self.driver_bin}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "RAY_ADDRESS": self.cluster.address,
            "GLOO_SOCKET_IFNAME": "lo",
            "HOME": str(self.config_path.parent),
            **auth_env(),
        }
        return subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def metrics(self) -> str:
        return read_metrics(self.metrics_port)


def read_metrics(port: int) -> str:
    """The hub's /metrics on this machine."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text: str = resp.read().decode()
        return text
