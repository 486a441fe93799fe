"""The operator process helper renders the chart's RBAC with helm homes of this run alone.

It once pointed helm at fixed /tmp/agentrl-helm-{cache,config,data}: shared by every clone
and user on the machine, so two suites side by side (or a directory left by another user)
shared helm's state. Needs no apiserver: only helm.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from tests.chart import chart_helpers
from tests.e2e import operator_process

from conftest import ROOT

HOMES = ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")


def test_chart_rbac_runs_helm_with_this_runs_own_homes(monkeypatch: pytest.MonkeyPatch) -> None:
    if not operator_process.HELM.is_file():
        pytest.skip(f"{operator_process.HELM} is missing: run hack/setup.sh")
    envs: list[dict[str, str]] = []
    run = subprocess.run

    def spy(*args: Any, **kwargs: Any) -> Any:
        envs.append(kwargs.get("env") or {})
        return run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    assert any(d["kind"] == "ClusterRole" for d in operator_process.chart_rbac())
    ours = chart_helpers.helm_env()
    assert envs and all(env[key] == ours[key] for env in envs for key in HOMES)


def test_two_runs_side_by_side_get_different_helm_homes() -> None:
    """What two clones' suites at once see: each its own helm homes, none shared."""
    show = "from tests.chart.chart_helpers import helm_env; e = helm_env(); " + "; ".join(
        f"print(e[{key!r}])" for key in HOMES
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", show], cwd=ROOT, capture_output=True, text=True,
            check=True, timeout=60,
        ).stdout.split()
        for _ in range(2)
    ]  # fmt: skip
    assert len(runs[0]) == 3 and not set(runs[0]) & set(runs[1])
