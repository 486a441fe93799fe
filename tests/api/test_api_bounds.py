"""Document bounds: whatever a caller hands `parse_experiment` (the CLI's YAML, the operator's
JSON, a Python program's dicts), nothing past a limit reaches pydantic, and each violation is
reported at its field."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentrl.api import bounds
from agentrl.api.validation import parse_experiment
from conftest import minimal_body


def nested(depth: int) -> Any:
    node: Any = "leaf"
    for _ in range(depth):
        node = {"a": node}
    return node


def paths(body: dict[str, Any]) -> list[str]:
    exp, problems = parse_experiment(body)
    assert exp is None
    return [p.path for p in problems]


def test_deep_nesting_is_refused_without_recursion() -> None:
    body = minimal_body()
    body["spec"]["resources"] = {"affinity": nested(20_000)}  # deepcopy would recurse
    (path,) = paths(body)
    assert path.startswith("spec.resources.affinity.a.a") and path.count(".a") < 70


def test_shared_references_count_once_per_use() -> None:
    """A DAG built by a program (or YAML aliases) is bounded by its expanded size."""
    node: Any = ["x"] * 10
    for _ in range(8):
        node = [node] * 10  # 10^9 values when expanded, a few objects in memory
    body = minimal_body()
    body["spec"]["resources"] = {"tolerations": node}
    (path,) = paths(body)
    assert path.startswith("spec.resources.tolerations")


def test_a_cycle_terminates() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    problems = bounds.check_document({"spec": {"resources": {"affinity": loop}}})
    assert problems and "deeper" in problems[0].message


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (10**30, "64-bit"),
        (math.inf, "finite"),
        (math.nan, "finite"),
        ("a\x00b", "NUL"),
        ("safe\u202eevil", "bidirectional"),
        (b"bytes", "not a JSON value"),
        ({1, 2}, "not a JSON value"),
    ],
)
def test_values_json_cannot_carry(value: Any, words: str) -> None:
    body = minimal_body(runtime={"env": [{"name": "A", "value": value}]})
    _, problems = parse_experiment(body)
    (problem,) = problems
    assert problem.path == "spec.runtime.env[0].value" and words in problem.message


def test_non_string_keys_and_escaped_paths() -> None:
    body = minimal_body(resources={"nodeSelector": {1: "a", "b\u202ec": "d"}})
    found = paths(body)
    assert "spec.resources.nodeSelector.1" in found
    assert all("\u202e" not in p for p in found)  # printed paths never carry the override


def test_an_oversized_object_names_its_largest_field() -> None:
    body = minimal_body(runtime={"extraArgs": ["x" * 30_000] * 60})
    (path,) = paths(body)
    assert path == "spec.runtime.extraArgs"


def test_limits_are_the_api_servers() -> None:
    assert bounds.MAX_REQUEST_BYTES == 3 * 2**20
    assert bounds.MAX_OBJECT_BYTES == 1.5 * 2**20
    assert bounds.INT64_MAX == 2**63 - 1


def test_status_and_managed_fields_are_not_the_users_to_size() -> None:
    body = minimal_body()
    body["status"] = {"conditions": [{"message": "x" * 2_000_000}]}
    body["metadata"]["managedFields"] = [{"fieldsV1": nested(200)}]
    exp, problems = parse_experiment(body)
    assert exp is not None and problems == []
