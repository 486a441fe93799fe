"""Random damage to the example experiments never crashes validation.

The previous unknown-key handling raised IndexError, TypeError and KeyError on inputs like
these (keys that look like pydantic's validator tags, `null` where an object belongs, unknown
keys beside type errors). Whatever the damage, `parse_experiment` returns problems, each at a
wire path of the document, and refuses when an error is among them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.api.bounds import printable
from agentrl.api.validation import errors, parse_experiment
from conftest import example_paths, load_example, minimal_body

BASES = [load_example(p.name) for p in example_paths()] + [minimal_body()]
KEYS = ["foo", "function-x", "x[0]", "", "a.b", "numRollout", "0", "list[str]",
        "function-after[_x(), str]", "claimNme", "\u202e", "a\x00b"]  # fmt: skip
VALUES: list[Any] = [1, -1, 2**40, 1.5, float("inf"), "x", "", None, True, [], {}, [1],
                     {"a": 1}, "1e2.5", "-1", "s3://b/x.jsonl"]  # fmt: skip


def containers(node: Any) -> Iterator[Any]:
    if isinstance(node, dict | list):
        yield node
        for child in node.values() if isinstance(node, dict) else node:
            yield from containers(child)


@st.composite
def damaged(draw: st.DrawFn) -> dict[str, Any]:
    body = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        node = draw(st.sampled_from(list(containers(body))))
        value = copy.deepcopy(draw(st.sampled_from(VALUES)))
        if isinstance(node, dict) and (not node or draw(st.booleans())):
            node[draw(st.sampled_from(KEYS))] = value
        elif isinstance(node, dict):
            node[draw(st.sampled_from(sorted(node)))] = value
        elif node:
            node[draw(st.integers(0, len(node) - 1))] = value
    return body


@settings(max_examples=400, deadline=None)
@given(damaged())
def test_damage_never_crashes_and_every_problem_is_placed(body: dict[str, Any]) -> None:
    exp, problems = parse_experiment(body)
    assert (exp is None) == bool(errors(problems))
    roots = {printable(str(key)) for key in body}
    for problem in problems:
        assert problem.message
        assert problem.path == "" or any(
            problem.path == root or problem.path.startswith((f"{root}.", f"{root}["))
            for root in roots
        ), problem
        assert str(problem).isprintable()
