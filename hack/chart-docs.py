#!/usr/bin/env python3
"""Generate charts/agentrl/README.md's values table from the `# --` comments in values.yaml.

helm-docs would do this, but it is a Go binary we cannot fetch here; this is the same idea in
one small file. `--check` exits 1 when README.md is stale or a value has no `# --` comment
(tests/chart runs it), so the table and the comments never drift apart.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "agentrl"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")
DOC = re.compile(r"^ *# -- (?P<text>.+)$")
BEGIN = "<!-- values-table:begin -->"
END = "<!-- values-table:end -->"


@dataclass(frozen=True)
class Value:
    key: str
    type: str
    default: str
    description: str


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number" if isinstance(value, float) else "int"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "string"


def _lookup(values: dict[str, Any], path: list[str]) -> Any:
    node: Any = values
    for part in path:
        node = node[part]
    return node


def parse(text: str) -> tuple[list[Value], list[str]]:
    """Documented values in file order, and the keys that lack a `# --` comment."""
    values = yaml.safe_load(text)
    lines = text.splitlines()
    out: list[Value] = []
    missing: list[str] = []
    stack: list[tuple[int, str]] = []
    covered_indent: int | None = None  # inside a value documented as a whole
    for i, line in enumerate(lines):
        match = KEY.match(line)
        if not match or line.lstrip().startswith("#"):
            continue
        indent = len(match["indent"])
        if covered_indent is not None:
            if indent > covered_indent:
                continue
            covered_indent = None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [match["key"]]
        doc = DOC.match(lines[i - 1]) if i else None
        value = _lookup(values, path)
        if doc:
            shown = json.dumps(value) if value not in ("", None) else '`""`'
            out.append(Value(".".join(path), _type(value), shown, doc["text"]))
            covered_indent = indent
        elif isinstance(value, dict) and value:
            stack.append((indent, match["key"]))
        else:
            missing.append(".".join(path))
    return out, missing


def table(rows: list[Value]) -> str:
    lines = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for row in rows:
        default = row.default if row.default.startswith("`") else f"`{row.default}`"
        cells = [f"`{row.key}`", row.type, default, row.description]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def render_readme(readme: str, rows: list[Value]) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table(rows)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    rows, missing = parse((CHART / "values.yaml").read_text(encoding="utf-8"))
    if missing:
        print("values without a `# --` comment: " + ", ".join(missing), file=sys.stderr)
        return 1
    path = CHART / "README.md"
    current = path.read_text(encoding="utf-8")
    if BEGIN not in current or END not in current:
        print(f"{path} lacks the {BEGIN} / {END} markers", file=sys.stderr)
        return 1
    wanted = render_readme(current, rows)
    if "--check" in argv:
        if wanted != current:
            print(f"{path} is stale: run hack/chart-docs.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
