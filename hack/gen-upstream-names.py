#!/usr/bin/env python3
"""Write operator/agentrl/api/upstream_names.py: the names the supported slime images accept.

`spec.model.type` names slime's `scripts/models/<type>.sh`, and `spec.model.toolCallParser`
and `reasoningParser` become SGLang's `--tool-call-parser` and `--reasoning-parser`, whose
argparse choices are SGLang's parser tables. A name outside them passes every type check and
stops slime's driver on a GPU worker. This script reads them from each supported slime row:
its `scripts/models/` and the SGLang its image builds on (the release named by the row's
`docker/Dockerfile`, with the row's own SGLang patches applied, as the image has it).

It also copies, for each model type, the flags of the script's MODEL_ARGS that Megatron's
and SGLang's parallelism checks read (layers, experts, attention and key/value heads, linear
biases, how the pipeline splits them; the list is
`agentrl.api.model_layout.SCRIPT_FLAGS`), read through bash as the launcher reads them, and
only where every row that has the type agrees on them.

    hack/gen-upstream-names.py ROW:SLIME_DIR:SGLANG_DIR ...           # write the module
    hack/gen-upstream-names.py --check ROW:SLIME_DIR:SGLANG_DIR ...   # exit 1 when it differs

tests/api/test_api_upstream_names.py runs it with `--check` on the pinned snapshots
(images/upstream.toml), so the checked-in table cannot drift from them.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "operator/agentrl/api/upstream_names.py"
TOOL_TABLE = ("sglang/srt/function_call/function_call_parser.py", "ToolCallParserEnum")
REASONING_TABLE = ("sglang/srt/parser/reasoning_parser.py", "DetectorMap")
SERVER_ARGS = "sglang/srt/server_args.py"
LINE_LENGTH = 100  # pyproject.toml's [tool.ruff] line-length
# agentrl.api.model_layout.SCRIPT_FLAGS (tests/api/test_api_model_layout.py keeps them equal);
# the last two groups are switches, the rest take a value.
LAYOUT_VALUE_FLAGS = (
    "--num-layers",
    "--num-experts",
    "--num-attention-heads",
    "--num-query-groups",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
)
LAYOUT_SWITCHES = (
    "--group-query-attention",
    "--disable-bias-linear",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
)


def model_args(script: Path) -> list[str] | None:
    """The script's MODEL_ARGS, read through bash (a bash array); None when it fails."""
    cmd = 'set -e; source "$1"; printf "%s\\0" "${MODEL_ARGS[@]}"'
    done = subprocess.run(
        ["bash", "-c", cmd, "bash", str(script)], capture_output=True, check=False, timeout=60
    )
    if done.returncode != 0:
        return None
    return [x.decode() for x in done.stdout.split(b"\0") if x]


def layout_args(args: list[str]) -> tuple[str, ...]:
    """The layout flags of MODEL_ARGS, in order, each with its value (switches alone)."""
    out: list[str] = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in LAYOUT_VALUE_FLAGS:
            out += [name, value] if eq else [name, args[i + 1] if i + 1 < len(args) else ""]
        elif arg in LAYOUT_SWITCHES:
            out.append(arg)
    return tuple(out)


def dict_keys(path: Path, name: str) -> list[str]:
    """The string keys of the class-level dict literal `name` in `path`."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        target = getattr(node, "target", None) or next(iter(getattr(node, "targets", [])), None)
        if isinstance(target, ast.Name) and target.id == name:
            value = getattr(node, "value", None)
            if isinstance(value, ast.Dict):
                return [k.value for k in value.keys if isinstance(k, ast.Constant)]
    raise SystemExit(f"{path}: no dict literal {name}")


def extra_choices(server_args: Path, flag: str) -> list[str]:
    """Literal choices SGLang adds to a parser table for `flag` (`["auto"] + table`)."""
    for node in ast.walk(ast.parse(server_args.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and first.value == flag):
            continue
        for kw in node.keywords:
            if kw.arg == "choices" and isinstance(kw.value, ast.BinOp):
                left = kw.value.left
                if isinstance(left, ast.List):
                    return [e.value for e in left.elts if isinstance(e, ast.Constant)]
        return []
    raise SystemExit(f"{server_args}: no {flag} argument")


def sglang_version(slime: Path) -> str:
    text = (slime / "docker" / "Dockerfile").read_text(encoding="utf-8")
    found = re.search(r"^ARG SGLANG_IMAGE_TAG=v([0-9][^\s-]*)", text, re.MULTILINE)
    if found is None:
        raise SystemExit(f"{slime}/docker/Dockerfile: no SGLANG_IMAGE_TAG")
    return found.group(1)


def table(rows: list[tuple[str, Path, Path]]) -> str:
    types: dict[str, list[str]] = {}
    tools: dict[str, list[str]] = {}
    reasoning: dict[str, list[str]] = {}
    versions: dict[str, str] = {}
    layouts: dict[str, set[tuple[str, ...] | None]] = {}
    for row, slime, sglang in rows:
        versions[row] = sglang_version(slime)
        for script in sorted((slime / "scripts" / "models").glob("*.sh")):
            types.setdefault(script.stem, []).append(row)
            found = model_args(script)
            layout = None if found is None else layout_args(found)
            layouts.setdefault(script.stem, set()).add(layout)
        args = sglang / SERVER_ARGS
        for name in [*extra_choices(args, "--tool-call-parser"), *dict_keys(sglang / TOOL_TABLE[0],
                                                                            TOOL_TABLE[1])]:
            tools.setdefault(name, []).append(row)
        for name in [*extra_choices(args, "--reasoning-parser"),
                     *dict_keys(sglang / REASONING_TABLE[0], REASONING_TABLE[1])]:
            reasoning.setdefault(name, []).append(row)

    def mapping(values: dict[str, list[str]]) -> str:
        lines = "".join(
            f"    {_q(name)}: ({', '.join(_q(r) for r in rows_of)}{',' * (len(rows_of) == 1)}),\n"
            for name, rows_of in sorted(values.items())
        )
        return "{\n" + lines + "}"

    of_row = ", ".join(f"{_q(k)}: {_q(v)}" for k, v in versions.items())
    agreed: dict[str, tuple[str, ...]] = {}
    for name, seen in sorted(layouts.items()):
        (only,) = seen if len(seen) == 1 else (None,)
        if only is not None:
            agreed[name] = only
    layout_lines = "".join(_entry(name, args) for name, args in agreed.items())

    return f'''"""Names the supported slime images accept: generated, do not edit by hand.

`hack/gen-upstream-names.py` writes this file from each supported slime row (images/README.md):
the model types of its `scripts/models/`, and the tool-call and reasoning parsers of the
SGLang its image builds on. Each name maps to the rows that have it. MODEL_LAYOUT_ARGS holds,
per model type, the flags of its script's MODEL_ARGS that Megatron's and SGLang's parallelism
checks read (`agentrl.api.model_layout`), where every row that has the type agrees on them.
"""

from typing import Final

# slime row (commit) -> the SGLang release its image builds on
SGLANG_OF_ROW: Final[dict[str, str]] = {{{of_row}}}
MODEL_TYPES: Final[dict[str, tuple[str, ...]]] = {mapping(types)}
TOOL_CALL_PARSERS: Final[dict[str, tuple[str, ...]]] = {mapping(tools)}
REASONING_PARSERS: Final[dict[str, tuple[str, ...]]] = {mapping(reasoning)}
MODEL_LAYOUT_ARGS: Final[dict[str, tuple[str, ...]]] = {{
{layout_lines}}}
'''


def _entry(name: str, args: tuple[str, ...]) -> str:
    """One `name: (args...)` line, or, past ruff's line length, one item a line, as ruff
    format writes a collection that does not fit."""
    line = f"    {_q(name)}: ({', '.join(_q(a) for a in args)}{',' * (len(args) == 1)}),\n"
    if len(line) - 1 <= LINE_LENGTH:
        return line
    return f"    {_q(name)}: (\n" + "".join(f"        {_q(a)},\n" for a in args) + "    ),\n"


def _q(text: str) -> str:
    """A Python string literal in double quotes, as ruff format writes it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("rows", nargs="+", metavar="ROW:SLIME_DIR:SGLANG_DIR")
    args = parser.parse_args(argv)
    rows = []
    for spec in args.rows:
        row, slime, sglang = spec.split(":", 2)
        rows.append((row, Path(slime), Path(sglang)))
    text = table(rows)
    if args.check:
        return 0 if OUT.read_text(encoding="utf-8") == text else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
