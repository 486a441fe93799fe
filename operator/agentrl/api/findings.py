"""The shape every validation rule yields, shared by the rule modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

from agentrl.api.models import RLExperiment

Severity = Literal["error", "warning"]
# (wire path, message, hint, severity)
Finding = tuple[str, str, str, Severity]
Rule = Callable[[RLExperiment], Iterator[Finding]]


def err(path: str, message: str, hint: str) -> Finding:
    return (path, message, hint, "error")


def warn(path: str, message: str, hint: str) -> Finding:
    """A problem that never blocks creation (shown as a ConfigWarning condition)."""
    return (path, message, hint, "warning")


def repeats(values: list[str]) -> Iterator[tuple[int, str]]:
    """(index, value) of every value seen before (the first occurrence is fine)."""
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            yield i, value
        seen.add(value)
