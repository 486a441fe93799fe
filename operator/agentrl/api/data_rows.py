"""The shape of a data row, one rule for the two places that judge it.

The launcher's preflight refuses a train or eval file in the pods when any of its rows
breaks it, before slime starts but after the GPUs are scheduled; `agentrl rehearse` applies
the same rule to the same rows on the user's machine, so a file it accepts is one the pods
accept. Every row, not a sample: slime's Dataset reads the whole train file when its
RolloutManager starts, and stops the job there on a row that is no object or whose `tools`
is no list; the rollout meets any other bad row at the step (or eval) that draws it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

ROW_SHAPE: Final = 'rows must be {"prompt": ..., "metadata": {...}}'
# A file's bad rows listed in one problem at most; the rest are counted.
LISTED_ROWS: Final = 5
# slime's `--tool-key` default, which agentrl's command line leaves as it is: slime's Dataset
# moves a row's top-level `tools` into its metadata (the agent payload), parsing a JSON
# string, and asserts that it is a list.
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/data.py#L225-L234
TOOLS_KEY: Final = "tools"
TOOLS_NOT_JSON: Final = "'tools' is a string that is not JSON"
TOOLS_NOT_LIST: Final = "'tools' must be a list of tool schemas"


def tools_problem(tools: Any) -> tuple[str, Any]:
    """(what is wrong with a row's top-level `tools`, or "", and the list it stands for)."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as exc:
            return f"{TOOLS_NOT_JSON} ({exc.msg})", None
    if not isinstance(tools, list):
        return f"{TOOLS_NOT_LIST}, got {type(tools).__name__}", None
    return "", tools


# How a file is opened to be judged: slime reads it as UTF-8 (and stops the job at the first
# byte that is not); escaped, such bytes stay in their line, so the line can be named.
ENCODING: Final = "utf-8"
ERRORS: Final = "surrogateescape"
_NOT_UTF8: Final = re.compile("[\udc80-\udcff]")


def row_problem(line: str) -> str | None:
    """What is wrong with one JSONL line as a data row, or None. A line read with
    `errors=ERRORS` that held bytes that are not UTF-8 is refused as such."""
    return _judge(line)[1]


def _judge(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the line's JSON object, or None; what is wrong with it as a data row, or None)."""
    if (bad := _NOT_UTF8.search(line)) is not None:
        return None, (
            f"not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02x}): slime reads the file "
            "as UTF-8 and stops the job when it reaches this row; re-encode the file as UTF-8"
        )
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg})"
    if not isinstance(row, dict):
        return None, "not a JSON object"
    return row, _object_problem(row)


def _object_problem(row: dict[str, Any]) -> str | None:
    if "prompt" not in row:
        return 'no "prompt" key'
    if not isinstance(row.get("metadata"), dict):
        return '"metadata" is missing or not an object (the agent receives it verbatim)'
    if TOOLS_KEY in row and (problem := tools_problem(row[TOOLS_KEY])[0]):
        return (
            f"{problem}: slime's Dataset (--tool-key tools) stops the job on it when it loads "
            "the file; give a list of tool schemas, or move it into metadata"
        )
    return None


@dataclass(frozen=True)
class RowReport:
    """What one pass over a file's lines found."""

    rows: int
    """Non-empty lines (empty ones are no rows, for slime too)."""
    bad: tuple[tuple[int, str], ...]
    """(line number, problem) of the first LISTED_ROWS bad rows."""
    more: int
    """Bad rows past those."""

    def problems(self, where: str) -> list[str]:
        """`where line N: problem` for each listed row, then how many more there are."""
        listed = [f"{where} line {n}: {problem}; {ROW_SHAPE}" for n, problem in self.bad]
        if self.more:
            listed.append(f"{where}: {self.more} more bad row(s) after these; {ROW_SHAPE}")
        return listed


def judge_rows(lines: Iterable[str], prompts: list[tuple[int, Any]] | None = None) -> RowReport:
    """Every line judged by `row_problem`, in one pass (a file may be larger than memory).
    `prompts`, when given, receives (line number, `prompt`) of each row that is a JSON
    object, in the same pass: what slime's Dataset counts for a prompt length."""
    rows, more = 0, 0
    bad: list[tuple[int, str]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rows += 1
        row, problem = _judge(line)
        if prompts is not None and row is not None:
            prompts.append((n, row.get("prompt")))
        if problem:
            if len(bad) < LISTED_ROWS:
                bad.append((n, problem))
            else:
                more += 1
    return RowReport(rows, tuple(bad), more)
