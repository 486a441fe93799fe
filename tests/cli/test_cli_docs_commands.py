"""The `agentrl` command lines the docs' shell blocks show parse with the real argparse, and a
synopsis there names every option its verb has.

test_cli_commands.py checks that each flag the docs name exists; this checks whole lines: a
value-taking flag shown without its value, two flags argparse refuses together, a missing
required `-f`, or a flag added to a verb but not to its synopsis.
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from agentrl.cli.main import _parser
from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "charts" / "agentrl" / "README.md", ROOT / "images" / "README.md"]  # fmt: skip
VERBS = ("render", "validate", "crd", "logs", "rehearse", "completion")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _shell_lines() -> list[tuple[str, str]]:
    """(where, line) of every `agentrl VERB ...` command in a bash/sh/console block of the
    docs (in a console block only the `$ ` lines: the rest is output) and every synopsis
    (a line with `[...]`) in any block; backslash continuations and indented `[...]` lines
    joined, a prompt or path before `agentrl` dropped, and what follows a comment, pipe,
    redirect or `)` cut off."""
    command = re.compile(rf"(?:\$ |\S*/|source <\()?(agentrl (?:{'|'.join(VERBS)})(?=\s|$).*)")
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for block in re.finditer(r"```([^\n]*)\n(.*?)```", text, flags=re.S):
            lang, first = block.group(1).strip(), text[: block.start()].count("\n") + 2
            body = re.sub(r"\n\s+(?=\[)", " ", re.sub(r"\\\n\s*", " ", block.group(2)))
            for offset, raw in enumerate(body.splitlines()):
                if lang == "console" and not raw.startswith("$ "):
                    continue  # output, e.g. "agentrl logs: rl/...: driver output of ..."
                # `$ agentrl`, `.venv/bin/agentrl`, `source <(agentrl ...)`
                match = command.match(raw.strip())
                if not match:
                    continue  # prose or another program
                line = re.split(r"\s(?:#|\||>|;|&&)|\)", match.group(1))[0].strip()
                if lang not in ("bash", "sh", "shell", "console") and "[" not in line:
                    continue  # output in a plain block, e.g. rehearse's report
                found.append((f"{path.relative_to(ROOT)}:{first + offset}", line))
    return found


LINES = _shell_lines()
COMMANDS = [(w, line) for w, line in LINES if "[" not in line]
SYNOPSES = [(w, line) for w, line in LINES if "[" in line]


def test_the_docs_show_commands_and_synopses() -> None:
    shown = {line.split()[1] for _, line in COMMANDS}
    assert {"logs", "rehearse", "completion", "crd"} <= shown
    assert {line.split()[1] for _, line in SYNOPSES} >= {"rehearse"}


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_line_parses(
    where: str, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        _parser().parse_args(shlex.split(line)[1:])
    except SystemExit as exc:
        err = capsys.readouterr().err
        pytest.fail(f"{where}: `{line}` does not parse (exit {exc.code}): {err}")


@pytest.mark.parametrize(("where", "line"), SYNOPSES, ids=[w for w, _ in SYNOPSES])
def test_every_documented_synopsis_names_every_option(where: str, line: str) -> None:
    """A synopsis in a block is the verb's whole usage: it lists every option (`-h` aside),
    by its short or long name, and nothing else."""
    verb = line.split()[1]
    parser = _subparsers()[verb]
    named = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", line))
    missing = [
        "/".join(action.option_strings)
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, argparse._HelpAction)
        and not named & set(action.option_strings)
    ]
    known = {o for action in parser._actions for o in action.option_strings}
    assert (missing, sorted(named - known)) == ([], []), f"{where}: {line}"


def test_a_synopsis_missing_an_option_is_caught() -> None:
    """The check above reads what it should: rehearse without --timeout is incomplete."""
    line = "agentrl rehearse -f F --engine URL [--prompts N]"
    with pytest.raises(AssertionError, match="--timeout"):
        test_every_documented_synopsis_names_every_option("here", line)
