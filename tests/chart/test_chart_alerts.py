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
from run_timeline import SCRAPE_S, Run, events, input_series

PROMTOOL_DIR = Path(__file__).parent / "promtool"
ALERTS = {
    "AgentRLFailedSessionRatioHigh",
    "AgentRLConnectionPoolSaturated",
    "AgentRLConnectionPoolDiscards",
    "AgentRLResultCallbacksLost",
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


def timeline_test(run: Run, until_min: int, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """A promtool test over a run's series as the bundle's real code exports them."""
    return {
        "interval": f"{SCRAPE_S}s",
        "input_series": input_series(run, until_min * 60),
        "alert_rule_test": cases,
    }


def run_promtool_tests(tests: list[dict[str, Any]], tmp_path: Path) -> str:
    (tmp_path / "agentrl-rules.yaml").write_text(yaml.safe_dump(rules()))
    suite = {"rule_files": ["agentrl-rules.yaml"], "evaluation_interval": "15s", "tests": tests}
    (tmp_path / "timeline_test.yaml").write_text(yaml.safe_dump(suite, width=1 << 20))
    proc = promtool("test", "rules", "timeline_test.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_progress_stalled_is_quiet_on_a_healthy_run_and_fires_on_a_stuck_one(
    tmp_path: Path,
) -> None:
    """20-minute steps, rollout 0 done 26 minutes after the head pod started (load, eval at
    step 0, generate): well inside stalledAfter (30m). Rollout 0 sets the step gauge to 0; the
    gauge read 0 before it too, so the first move came only with rollout 1 (46m) and the
    alert fired at 45m. A run whose step 0 finishes and nothing after still fires."""
    healthy = Run()
    assert [t for t, what, _ in events(healthy) if what == "train"][:2] == [26 * 60, 46 * 60]
    quiet = [
        {"eval_time": f"{m}m", "alertname": "AgentRLProgressStalled", "exp_alerts": []}
        for m in range(30, 101, 5)
    ]
    stuck = {
        "eval_time": "75m",  # rollout 0 at 26m, then nothing: 26m + 30m + 15m = 71m
        "alertname": "AgentRLProgressStalled",
        "exp_alerts": [
            {
                "exp_labels": {"severity": "warning", "namespace": "rl", "experiment": "demo"},
                "exp_annotations": {
                    "summary": "An experiment's rollout step has not advanced.",
                    "description": "Experiment rl/demo has been at the same rollout step for "
                    "more than 30m while its head pod is up.",
                    "runbook_url": "https://github.com/agentrl/agentrl/blob/main/docs/"
                    "monitoring.md#agentrlprogressstalled",
                },
            }
        ],
    }
    tests = [
        timeline_test(healthy, 100, quiet),
        timeline_test(Run(steps=1), 80, [{**quiet[0]}, stuck]),
    ]
    assert "SUCCESS" in run_promtool_tests(tests, tmp_path)
