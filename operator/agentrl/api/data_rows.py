"""The shape of a data row, one rule for the two places that judge it.

The launcher's preflight refuses a train file in the pods when one of its first
`PREFLIGHT_ROWS` rows breaks it, and an eval file when any row does (the rollout reads eval
sets whole, at the first eval), before slime starts but after the GPUs are scheduled;
`agentrl rehearse` applies the same rule to the same rows on the user's machine, so a file
it accepts is one the pods accept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

PREFLIGHT_ROWS: Final = 20
ROW_SHAPE: Final = 'rows must be {"prompt": ..., "metadata": {...}}'


def row_problem(line: str) -> str | None:
    """What is wrong with one JSONL line as a data row, or None."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return f"not JSON ({e.msg})"
    if not isinstance(row, dict):
        return "not a JSON object"
    if "prompt" not in row:
        return 'no "prompt" key'
    if not isinstance(row.get("metadata"), dict):
        return '"metadata" is missing or not an object (the agent receives it verbatim)'
    return None


def first_row_problems(
    lines: Iterable[str], rows: int | None = PREFLIGHT_ROWS
) -> list[tuple[int, str]]:
    """(line number, problem) for each of the first `rows` non-empty lines (every one when
    None) that is no data row (empty lines are no rows and are passed over)."""
    found = [(n, line) for n, line in enumerate(lines, 1) if line.strip()][:rows]
    return [(n, problem) for n, line in found if (problem := row_problem(line))]
