"""`benchmarks/reconcile.py` runs on both backends, so it cannot rot (no timing asserted)."""

from __future__ import annotations

import re

import pytest
from tests.support.process import run_benchmark

NUMBER = r"\d+\.\d+"
OPERATORS = 3  # agentrl, same-work, bare


def run(*args: str) -> str:
    return run_benchmark("reconcile.py", *args, timeout=900)


def row(label: str, cell: str = NUMBER) -> str:
    return rf"^{re.escape(label)}\s+" + r"\s+".join([cell] * OPERATORS) + "$"


def test_quick_mode_reports_agentrl_against_both_baselines() -> None:
    text = run("--quick")
    assert "== 20 experiments on kmock ==" in text, text
    assert re.search(r"^\s+agentrl\s+same-work\s+bare$", text, re.M), text
    assert re.search(row("create -> child p50 (s)"), text, re.M), text
    assert re.search(row("operator writes per CR"), text, re.M), text
    assert re.search(row("writes in steady state", r"\d+"), text, re.M), text
    # The same-work baseline makes exactly agentrl's requests (the five children and one status
    # PATCH): the comparison is fair.
    requests = re.search(rf"^operator API requests per CR\s+({NUMBER})\s+({NUMBER})", text, re.M)
    assert requests is not None and requests.group(1) == requests.group(2) == "6.00", text
    assert re.search(rf"^p50 ratio agentrl / same-work: {NUMBER}x \(goal <= 1.3x\)$", text, re.M)
    assert re.search(rf"^p50 ratio agentrl / bare: {NUMBER}x$", text, re.M), text


@pytest.mark.e2e
def test_the_real_apiserver_backend_runs() -> None:
    text = run("--backends", "apiserver", "--sizes", "5", "--steady", "1")
    assert "== 5 experiments on apiserver ==" in text, text
    assert re.search(row("create -> child p50 (s)"), text, re.M), text
    assert re.search(row("operator API requests per CR", "-"), text, re.M), text
    assert re.search(rf"^p50 ratio agentrl / same-work: {NUMBER}x", text, re.M), text
