"""The launcher's gang preflight result, as the experiment's /metrics carries it (pure).

The launcher hands its result to the hub before slime starts (or before it stops the run),
as `agentrl_preflight_info{result, reason, message} 1`; the sweep reads it from the same
scrape as the training progress, and `status.apply_preflight` makes it the `Preflight`
condition `kubectl describe rlx` shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agentrl.api.constants import METRIC_PREFLIGHT_INFO


@dataclass(frozen=True)
class Reading:
    passed: bool
    reason: str  # the check that failed first, or "Passed"
    message: str  # the first problem, or what passed and was measured


def parse_preflight(text: str) -> Reading | None:
    """The preflight result a scrape shows, or None before the launcher has published one."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == METRIC_PREFLIGHT_INFO and sample.value == 1:
                labels = sample.labels
                return Reading(
                    passed=labels.get("result") == "passed",
                    reason=labels.get("reason") or "Unknown",
                    message=labels.get("message") or "",
                )
    return None
