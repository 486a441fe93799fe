"""Run `python -m agentrl.controller` against the e2e apiserver as the chart's ServiceAccount.

The operator gets exactly the RBAC the chart ships: `helm template charts/agentrl --show-only
templates/rbac.yaml` is applied as it renders, and the operator authenticates with a real
token of the ServiceAccount that ClusterRoleBinding names. A subprocess (not a thread) so
the chaos test can SIGKILL it at any instant, like a node failure would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from tests.chart.chart_helpers import helm_env
from tests.support.kube import CACHE, ROOT, KubeHarness
from tests.support.process import free_port

HELM = CACHE / "tools" / "helm4" / "helm" / "helm"


def chart_rbac(watch: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The chart's ClusterRole + ClusterRoleBinding and its leader Lease's Role + RoleBinding,
    rendered with default values (plus the one the chart requires, the operator image: a test
    value; only the RBAC is used); with `watch`, as `watchNamespaces` renders it (a Role and
    RoleBinding in each)."""
    values = [f"watchNamespaces={{{','.join(watch)}}}"] if watch else []
    proc = subprocess.run(
        [str(HELM), "template", str(ROOT / "charts" / "agentrl"),
         "--show-only", "templates/rbac.yaml",
         "--show-only", "templates/leader-election-rbac.yaml",
         "--set", "image.repository=agentrl-operator",
         *(arg for value in values for arg in ("--set", value))],
        capture_output=True, text=True, check=True, timeout=60,
        env=helm_env(),
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def install_chart_rbac(kube: KubeHarness, watch: Sequence[str] = ()) -> Path:
    """Apply the chart's RBAC; return a kubeconfig of the ServiceAccount it binds. `watch`:
    the namespaces an operator started with AGENTRL_NAMESPACES serves, which the chart's
    `watchNamespaces` grants (created first: the chart puts a Role in each)."""
    for namespace in watch:
        kube.ensure_namespace(namespace)
    docs = chart_rbac(watch)
    kube.apply(docs)
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    (subject,) = [s for s in binding["subjects"] if s["kind"] == "ServiceAccount"]
    return kube.service_account_kubeconfig(subject["namespace"], subject["name"])


def chart_lease() -> tuple[str, str]:
    """(namespace, name) of the one Lease the chart's RBAC lets the operator write."""
    (role,) = [d for d in chart_rbac() if d["kind"] == "Role"]
    (name,) = [n for r in role["rules"] for n in r.get("resourceNames") or ()]
    return role["metadata"]["namespace"], name


class OperatorProcess:
    def __init__(self, kubeconfig: Path, logdir: Path, **env: str) -> None:
        self.kubeconfig, self.logdir = kubeconfig, logdir
        self.metrics_port, self.health_port = free_port(), free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "AGENTRL_METRICS_PORT": str(self.metrics_port),
            "AGENTRL_LIVENESS_ENDPOINT": f"http://127.0.0.1:{self.health_port}/healthz",
            "AGENTRL_SWEEP_INTERVAL": "1",
            "AGENTRL_LOG_LEVEL": "INFO",
            # The Ray pods' default image (agentrl publishes none): a test value, never pulled.
            "AGENTRL_IMAGE": "runtime@sha256:" + "1" * 64,
            **env,
        }
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.logdir / f"operator-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentrl.controller"], env=self.env, stdout=log,
            stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no graceful anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` (SIGSTOP freezes it, as a stalled node or a long pause would)."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def exited(self, timeout: float) -> int:
        """Wait for the process to end by itself; its exit status."""
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        self.proc = None
        return code

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:]
                         for p in sorted(self.logdir.glob("operator-*.log")))  # fmt: skip
