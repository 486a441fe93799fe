"""checkov on the rendered chart: zero failures beyond a short, justified skip list.

One run on the default install (checkov is slow on 2 cores). The run is without skips, so a
skip that no longer triggers shows up as a failure here and gets removed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chart_helpers import MONITORING_API, NAMESPACE, OPERATOR_IMAGE, RELEASE, ROOT, run_helm

# check id -> why the chart cannot or should not satisfy it.
JUSTIFIED_SKIPS = {
    # The operator is a Kubernetes client: it authenticates with its ServiceAccount token.
    "CKV_K8S_38": "the operator needs its ServiceAccount token to talk to the API server",
    # Which peers reach the operator (Prometheus namespace, kubelet probes) and which API
    # server address it egresses to are cluster-specific; platform teams own NetworkPolicies.
    "CKV2_K8S_6": "NetworkPolicies depend on the cluster's CNI and Prometheus placement",
}


def test_checkov_finds_nothing_beyond_the_justified_skips(tmp_path: Path) -> None:
    manifest = tmp_path / "agentrl.yaml"
    args = ["template", RELEASE, str(ROOT / "charts" / "agentrl"), "-n", NAMESPACE]
    args += [*OPERATOR_IMAGE, "--api-versions", MONITORING_API]
    manifest.write_text(run_helm("helm3", *args).stdout)
    checkov = Path(sys.executable).parent / "checkov"
    # --skip-download: no calls home (there is no network here, and CI needs none).
    flags = ["--framework", "kubernetes", "--quiet", "--compact", "--skip-download"]
    proc = subprocess.run(
        [str(checkov), "-f", str(manifest), *flags, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(proc.stdout)
    failed = sorted({c["check_id"] for c in report["results"]["failed_checks"]})
    assert failed == sorted(JUSTIFIED_SKIPS), report["results"]["failed_checks"]
    assert report["summary"]["parsing_errors"] == 0
    # It really looked: Deployment, Service, RBAC, ... were checked, not an empty file.
    assert report["summary"]["passed"] > 50
    assert report["summary"]["resource_count"] >= 10
