"""`agentrl completion bash|zsh|fish`, completing for real in each shell.

bash: the generated function is called with COMP_WORDS as bash's completion sets it.
fish: `complete -C` asks fish itself what it would offer. zsh: an interactive zsh on a
pseudo-terminal loads compinit and the script, gets a TAB, and a wrapper around compadd
writes down what the completion system offered. A kubectl TEST DOUBLE on PATH answers the
live lookups (experiment names, namespaces, contexts) and records how it was called.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.cli import completion
from agentrl.cli.main import _parser, main

MISSING = "{} is missing: hack/setup.sh installs zsh and fish for the completion tests"
KUBECTL_DOUBLE = (
    f"#!{sys.executable}\n"
    + r"""# TEST DOUBLE for kubectl: answers the completion scripts' lookups, records its argv.
import json, os, sys
with open(os.environ["KUBECTL_RECORD"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
args = sys.argv[1:]
# As kubectl prints a jsonpath: `{range}...{"\n"}{end}` one per line, else space-separated.
sep = "\n" if any("{range" in a for a in args) else " "
if "rlexperiments.agentrl.io" in args:
    print(sep.join(["qwen3b-gsm8k", "qwen32b-swe"]), end=sep.strip())
elif "namespaces" in args:
    print(sep.join(["default", "rl"]), end=sep.strip())
elif args[:2] == ["config", "get-contexts"]:
    print("lab\nprod")
"""
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(KUBECTL_DOUBLE)
    (bin_dir / "kubectl").chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECTL_RECORD": str(tmp_path / "kubectl.jsonl"),
    }


def _script(tmp_path: Path, shell: str, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["completion", shell]) == 0
    path = tmp_path / f"agentrl.{shell}"
    path.write_text(capsys.readouterr().out)
    return path


def _kubectl_calls(env: dict[str, str]) -> list[list[str]]:
    record = Path(env["KUBECTL_RECORD"])
    return [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []


# ---- bash ------------------------------------------------------------------------------


def _bash(script: Path, line: str, env: dict[str, str], cwd: Path) -> list[str]:
    words = line.split(" ")  # a trailing space leaves an empty current word, as in bash
    cmd = (
        f"source {shlex.quote(str(script))}; "
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
        '_agentrl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    bash = shutil.which("bash") or "/bin/bash"
    done = subprocess.run(
        [bash, "-c", cmd], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return sorted(x for x in done.stdout.splitlines() if x)


def test_bash_completes_commands_flags_values_files_and_live_names(
    tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, "bash", capsys)
    registered = subprocess.run(
        ["bash", "-c", f"source {script}; complete -p agentrl"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert registered.stdout.strip() == "complete -F _agentrl agentrl"
    (tmp_path / "exp.yaml").write_text("")
    (tmp_path / "exp.json").write_text("")

    def complete(line: str) -> list[str]:
        return _bash(script, line, env, tmp_path)

    assert complete("agentrl ") == sorted(
        ["render", "validate", "crd", "logs", "rehearse", "completion", "-h", "--help", "--version"]
    )
    assert complete("agentrl lo") == ["logs"]
    assert complete("agentrl render -o ") == ["json", "yaml"]
    assert complete("agentrl render --sh") == ["--show-command"]
    assert complete("agentrl validate -f exp.") == ["exp.json", "exp.yaml"]
    # Every option that takes a path completes one, not only -f (nothing was offered before).
    assert complete("agentrl validate --policy exp.") == ["exp.json", "exp.yaml"]
    assert complete("agentrl render --policy exp.") == ["exp.json", "exp.yaml"]
    assert complete("agentrl rehearse --data exp.") == ["exp.json", "exp.yaml"]
    assert complete("agentrl rehearse --model-dir exp.") == ["exp.json", "exp.yaml"]
    assert complete("agentrl completion ") == ["bash", "fish", "zsh"]
    assert complete("agentrl logs --f") == ["--follow"]
    assert complete("agentrl logs --context ") == ["lab", "prod"]
    assert complete("agentrl logs -n ") == ["default", "rl"]
    assert complete("agentrl logs --context lab -n rl qwen3") == ["qwen32b-swe", "qwen3b-gsm8k"]
    lookup = _kubectl_calls(env)[-1]
    assert lookup[:5] == ["--context", "lab", "-n", "rl", "get"]  # honours what was typed
    assert lookup[5] == "rlexperiments.agentrl.io"


def test_bash_without_kubectl_offers_no_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, "bash", capsys)
    empty = tmp_path / "empty-path"
    empty.mkdir()  # the script needs nothing but bash's builtins, and finds no kubectl
    bare = {"PATH": str(empty), "HOME": str(tmp_path)}
    assert _bash(script, "agentrl logs ", bare, tmp_path) == []
    assert _bash(script, "agentrl lo", bare, tmp_path) == ["logs"]


# ---- fish ------------------------------------------------------------------------------


def _fish(script: Path, line: str, env: dict[str, str]) -> list[str]:
    fish = shutil.which("fish")
    if fish is None:
        pytest.fail(MISSING.format("fish"))
    cmd = f"source {shlex.quote(str(script))}; complete -C {shlex.quote(line)}"
    done = subprocess.run(
        [fish, "-N", "-c", cmd], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return sorted(x.split("\t")[0] for x in done.stdout.splitlines() if x)


def test_fish_completes_commands_flags_values_and_live_names(
    tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, "fish", capsys)
    assert _fish(script, "agentrl ren", env) == ["render"]
    (tmp_path / "values.yaml").write_text("")
    policy = _fish(script, f"agentrl validate --policy {tmp_path}/val", env)
    assert policy == [f"{tmp_path}/values.yaml"]
    assert _fish(script, "agentrl render -o ", env) == ["json", "yaml"]
    assert "--show-command" in _fish(script, "agentrl render --", env)
    assert _fish(script, "agentrl completion ", env) == ["bash", "fish", "zsh"]
    assert _fish(script, "agentrl logs -n rl ", env) == ["qwen32b-swe", "qwen3b-gsm8k"]
    assert _kubectl_calls(env)[-1][:3] == ["-n", "rl", "get"]


# ---- zsh -------------------------------------------------------------------------------

ZSHRC = """\
autoload -U compinit && compinit -u -d {dump}
source {script}
# What the completion system offers, written down: every compadd call's matches.
compadd() {{
    if [[ " $* " == *" -"[OAD]" "* ]]; then builtin compadd "$@"; return; fi
    local -a __matches
    builtin compadd -O __matches "$@"
    print -rl -- $__matches >> {matches}
    builtin compadd "$@"
}}
__done() {{ print -r -- '<done>' >> {matches} }}
comppostfuncs=(__done)
PS1='READY> '
"""


def _zsh(script: Path, line: str, env: dict[str, str], home: Path) -> list[str]:
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.fail(MISSING.format("zsh"))
    matches = home / "matches"
    matches.unlink(missing_ok=True)
    zdot = home / "zdot"
    zdot.mkdir(exist_ok=True)
    (zdot / ".zshrc").write_text(
        ZSHRC.format(dump=home / "zcompdump", script=script, matches=matches)
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: an interactive zsh on the pseudo-terminal
        os.execve(zsh, [zsh, "-i"], {**env, "ZDOTDIR": str(zdot), "TERM": "xterm"})
    try:
        _wait_for(lambda screen: b"READY> " in screen, fd)
        os.write(fd, line.encode() + b"\t")
        _wait_for(lambda _: matches.exists() and "<done>" in matches.read_text(), fd)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    return sorted({x for x in matches.read_text().splitlines() if x and x != "<done>"})


def _wait_for(ready: object, fd: int, limit: float = 60.0) -> None:
    """Read the terminal until `ready(screen)` holds (bounded wait, nothing measured)."""
    screen = b""
    deadline = time.monotonic() + limit
    while not ready(screen):  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"zsh did not get there; screen: {screen[-400:]!r}")
        if select.select([fd], [], [], 0.1)[0]:
            screen += os.read(fd, 4096)


def test_zsh_completes_commands_flags_values_and_live_names(
    tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, "zsh", capsys)
    assert _zsh(script, "agentrl ren", env, tmp_path) == ["render"]
    (tmp_path / "values.yaml").write_text("")
    policy = _zsh(script, f"agentrl validate --policy {tmp_path}/val", env, tmp_path)
    assert "values.yaml" in policy
    assert _zsh(script, "agentrl render -o ", env, tmp_path) == ["json", "yaml"]
    assert "--show-command" in _zsh(script, "agentrl render --", env, tmp_path)
    assert _zsh(script, "agentrl logs -n rl ", env, tmp_path) == ["qwen32b-swe", "qwen3b-gsm8k"]
    assert _kubectl_calls(env)[-1][:3] == ["-n", "rl", "get"]


# ---- generated from the parser ---------------------------------------------------------


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_a_new_subcommand_is_completed_without_touching_the_generator(shell: str) -> None:
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    extra = sub.add_parser("diff", help="a subcommand added later")
    extra.add_argument("--against", choices=("main", "last"))
    text = completion.script(parser, shell)
    assert "diff" in text and "against" in text and "main last" in text


def test_the_command_says_how_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["completion", "--help"])
    out = capsys.readouterr().out
    for line in completion.INSTALL.values():
        assert line in out
