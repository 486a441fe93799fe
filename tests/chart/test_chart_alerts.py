"""The PrometheusRule the chart renders, checked and unit-tested by the real promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, ROOT, exported_series_names, metric_names, one, render

PROMTOOL_DIR = Path(__file__).parent / "promtool"
ALERTS = {
    "AgentRLFailedSessionRatioHigh",
    "AgentRLConnectionPoolSaturated",
    "AgentRLConnectionPoolDiscards",
    "AgentRLProgressStalled",
    "AgentRLExperimentStalled",
    "AgentRLExperimentFailed",
    "AgentRLOperatorDown",
    "AgentRLOperatorNoLeader",
}
# Keyed on the job the chart's ServiceMonitor creates: rendered only with it.
OPERATOR_JOB_ALERTS = {"AgentRLOperatorDown", "AgentRLOperatorNoLeader"}


def rules(values: Path | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = one(render(values=values), "PrometheusRule")["spec"]
    return spec


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool missing: run hack/setup.sh (Debian prometheus)"
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "values", [None, CHART / "ci" / "custom-labels-values.yaml"], ids=["default", "custom"]
)
def test_promtool_check_rules(values: Path | None, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules(values)))
    proc = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


def test_promtool_check_rules_without_service_monitor_or_runbooks(tmp_path: Path) -> None:
    sets = (
        "monitoring.serviceMonitor.enabled=false",
        "monitoring.prometheusRule.runbookUrl=",
        "monitoring.prometheusRule.alertLabels.severity=page",
    )
    spec = one(render(sets=sets), "PrometheusRule")["spec"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    proc = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS - OPERATOR_JOB_ALERTS)} rules found" in proc.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    (tmp_path / "agentrl-rules.yaml").write_text(yaml.safe_dump(rules()))
    shutil.copy(PROMTOOL_DIR / "alerts_test.yaml", tmp_path)
    proc = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_catch_a_changed_threshold(tmp_path: Path) -> None:
    """The unit tests bite: a rule rendered with another threshold fails them."""
    changed = rules(CHART / "ci" / "custom-labels-values.yaml")  # ratio 0.1, stalledAfter 1h
    (tmp_path / "agentrl-rules.yaml").write_text(yaml.safe_dump(changed))
    shutil.copy(PROMTOOL_DIR / "alerts_test.yaml", tmp_path)
    proc = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert proc.returncode != 0
    assert "AgentRLFailedSessionRatioHigh" in proc.stdout + proc.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_section() -> None:
    alerts = {r["alert"]: r for g in rules()["groups"] for r in g["rules"]}
    assert set(alerts) == ALERTS
    tests = yaml.safe_load((PROMTOOL_DIR / "alerts_test.yaml").read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t["alert_rule_test"]}
    firing = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert tested == firing == ALERTS
    doc = (ROOT / "docs" / "monitoring.md").read_text()
    headings = {re.sub(r"[^a-z0-9-]", "", h.lower()) for h in re.findall(r"^#+ (.+)$", doc, re.M)}
    for name, rule in alerts.items():
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor in headings, f"docs/monitoring.md has no section for {name}"


def test_alerts_read_only_exported_metrics() -> None:
    exported = exported_series_names() | {"up"}
    for group in rules()["groups"]:
        for rule in group["rules"]:
            names = metric_names(rule["expr"])
            assert names and names <= exported, (rule["alert"], names - exported)
