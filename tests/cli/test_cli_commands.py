"""The `agentrl` command line, run in-process and as a real subprocess."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.cli.main import _parser, main
from conftest import EXAMPLES_DIR, example_policy, minimal_body

EXAMPLE = EXAMPLES_DIR / "qwen2.5-3b-gsm8k-agentcore.yaml"
RUN: dict[str, Any] = {"capture_output": True, "text": True}
IMAGE = "runtime@sha256:" + "1" * 64  # a test value: the image of the operator's default
NO_IMAGE = "spec.runtime.image: not set, and there is no default Ray pod image"


@pytest.fixture(autouse=True)
def _no_image_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRL_IMAGE", raising=False)


@pytest.fixture(autouse=True)
def policy_of_the_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples run as an IRSA ServiceAccount: judge them by the policy shipped with them
    (as the operator reads it, JSON in AGENTRL_POLICY). test_cli_policy.py covers the rest."""
    monkeypatch.setenv("AGENTRL_POLICY", json.dumps(example_policy()))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_ok_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "-f", str(EXAMPLE), "--image", IMAGE)
    assert code == 0
    assert out.count("\n") == 1 and ": OK " in out


def test_validate_without_any_image_warns_with_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """agentrl publishes no Ray pod image yet: validate says so plainly, and how to fix it,
    but passes (the cluster's operator may have a default of its own)."""
    code, out, err = run(capsys, "validate", "-f", str(EXAMPLE))
    assert code == 0
    (warning,), (ok,) = err.splitlines(), out.splitlines()
    assert f"{EXAMPLE}: warning: {NO_IMAGE}" in warning and ": OK " in ok
    for fix in ("images/slime/Dockerfile", "@sha256:<digest>", "operator.runtimeImage"):
        assert fix in warning


def test_render_without_any_image_refuses_with_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE))
    assert code == 1 and out == ""
    assert f"{EXAMPLE}: {NO_IMAGE}" in err and "warning" not in err
    assert "images/slime/Dockerfile" in err and "--image" in err
    # The command line needs no image: shown, with the same words as a warning.
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE), "--show-command")
    assert code == 0 and "train.py" in out and f"warning: {NO_IMAGE}" in err


def test_validate_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = minimal_body(resources={"parallelism": {"tensor": 3}}, grpo={"numRollouts": 0})
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(body))
    code, out, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1 and out == ""  # problems go to stderr, stdout only carries OK lines
    assert f"{spec}: spec.grpo.numRollouts: " in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("spec: [unclosed", "not valid YAML: line 1"),
        ("", "the file is empty"),
        # kubectl reads an unknown tag as a plain string; nothing is ever constructed
        ("a: !!python/object:os.system x\n", "metadata: required field is missing"),
    ],
)
def test_user_mistakes_never_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    spec = tmp_path / "spec.yaml"
    if content is not None:
        spec.write_text(content)
    code, out, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1
    assert expected in err and "Traceback" not in err + out


def test_render_yaml_is_multi_document(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE), "--image", IMAGE)
    assert code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["ConfigMap", "ConfigMap", "Service", "Service", "RayJob"]


def test_render_json_is_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    image = "img@sha256:" + "a" * 64
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE), "-o", "json", "--image", image)
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "List" and len(doc["items"]) == 5
    head = doc["items"][-1]["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["template"]["spec"]["containers"][0]["image"] == image


def test_installed_entry_point_runs() -> None:
    """The `agentrl` console script of the venv, as a user runs it."""
    exe = shutil.which("agentrl", path=str(Path(sys.executable).parent))
    assert exe is not None, "agentrl is not installed in this venv (pip install -e .)"
    ok = subprocess.run([exe, "validate", "-f", str(EXAMPLE)], check=False, **RUN)
    assert ok.returncode == 0 and ok.stdout.endswith("\n") and "OK" in ok.stdout, ok.stderr
    bad = subprocess.run([exe, "validate", "-f", "missing.yaml"], check=False, **RUN)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "error: missing.yaml: no such file or directory"


def test_show_command_prints_slime_argv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE), "--show-command")
    assert code == 0
    lines = [line.strip().rstrip("\\").strip() for line in out.splitlines()]
    assert "--rollout-function-path agentrl.bundle.rollout.generate_rollout" in lines
    assert "--num-rollout 100" in lines
    assert "kind:" not in out  # the command only, not the objects


def test_warnings_are_printed_but_do_not_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = minimal_body()
    body["spec"]["agent"].update(maxConcurrent=50, maxPoolConnections=5)
    spec = tmp_path / "warn.yaml"
    spec.write_text(yaml.safe_dump(body))
    code, out, err = run(capsys, "validate", "-f", str(spec), "--image", IMAGE)
    assert code == 0
    assert "warning: spec.agent.maxPoolConnections:" in err and ": OK " in out


def test_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(EXAMPLE.read_text()))
    code, out, _ = run(capsys, "validate", "-f", "-")
    assert code == 0 and "OK" in out


def test_not_an_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "list.yaml"
    spec.write_text("- a\n- b\n")
    code, _, err = run(capsys, "validate", "-f", str(spec))
    assert code == 1 and "the document is not a mapping" in err and "Traceback" not in err


def test_an_empty_directory_is_a_user_mistake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("not a manifest")
    code, out, err = run(capsys, "render", "-f", str(tmp_path))
    assert code == 1 and out == "" and "no .json, .yaml, .yml files" in err


def test_crd_prints_the_checked_in_crd(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "crd")
    assert code == 0
    assert out == (EXAMPLES_DIR.parent / "crds" / "rlexperiments.agentrl.io.yaml").read_text()


def test_image_from_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    image = "env/image@sha256:" + "e" * 64
    monkeypatch.setenv("AGENTRL_IMAGE", image)
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE), "-o", "json")
    assert code == 0 and image in out


def test_invalid_spec_renders_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(minimal_body(agent={})))
    code, out, err = run(capsys, "render", "-f", str(spec))
    assert code == 1 and out == "" and "spec.agent: no agent backend is set" in err


def test_unpinned_images_are_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "render", "-f", str(EXAMPLE), "--image", "slime:latest")
    assert code == 0
    assert "warning: spec.runtime.image: not set; the default image slime:latest is not " in err
    spec = tmp_path / "tagged.yaml"
    spec.write_text(yaml.safe_dump(minimal_body(runtime={"image": "slime:latest"})))
    code, _, err = run(capsys, "validate", "-f", str(spec))
    assert code == 0 and "warning: spec.runtime.image: slime:latest is not pinned" in err


def test_show_command_honours_output_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`-o json` gives the same words the text shows, one word an item, per experiment."""
    code, text, _ = run(capsys, "render", "-f", str(EXAMPLE), "--show-command")
    assert code == 0
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE), "--show-command", "-o", "json")
    assert code == 0
    (entry,) = json.loads(out)["experiments"]
    body = yaml.safe_load(EXAMPLE.read_text())
    assert (entry["namespace"], entry["name"]) == (
        body["metadata"].get("namespace", "default"),
        body["metadata"]["name"],
    )
    argv = entry["command"]
    assert argv[argv.index("--num-rollout") + 1] == "100"
    assert " ".join(shlex.quote(a) for a in argv) == " ".join(
        line.strip().rstrip("\\").strip() for line in text.splitlines()
    )


# The user-facing docs that show `agentrl` command lines.
DOCS = [EXAMPLES_DIR.parent / "README.md", *sorted((EXAMPLES_DIR.parent / "docs").glob("*.md")),
        EXAMPLES_DIR.parent / "charts" / "agentrl" / "README.md",
        EXAMPLES_DIR.parent / "images" / "README.md"]  # fmt: skip
VERBS = r"render|validate|crd|logs|rehearse|completion"


def documented_flags() -> set[tuple[str, str, str]]:
    """(file, verb, flag) of every `agentrl VERB ... -x/--xx` in inline code and shell blocks
    of the docs (a synopsis continued on indented `[...]` lines included)."""
    found = set()
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        blocks = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
        spans = re.findall(r"`([^`]+)`", re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S))
        for block in blocks:
            joined = re.sub(r"\n\s+(?=\[)", " ", re.sub(r"\\\n\s*", " ", block))
            spans += joined.splitlines()
        for span in spans:
            words = " ".join(span.split())
            for verb, tail in re.findall(rf"\bagentrl ({VERBS})\b([^#;&>]*)", words):
                own = re.split(r"\bagentrl |\bkubectl |\bpython", tail)[0]
                for flag in re.findall(r"(?<![\w/.<-])(--?[a-zA-Z][\w-]*)", own):
                    found.add((path.name, verb, flag))
    return found


def test_every_agentrl_flag_the_docs_show_exists() -> None:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {
        verb: {o for action in parser._actions for o in action.option_strings}
        for verb, parser in sub.choices.items()
    }
    shown = documented_flags()
    assert {
        ("rehearse.md", "rehearse", "--model-dir"),
        ("README.md", "render", "--summary"),
    } <= shown
    assert sorted(s for s in shown if s[2] not in options[s[1]]) == []


def commands_in_example_comments() -> list[tuple[str, list[str]]]:
    """Every `agentrl validate|render ...` an example file's comments tell the reader to run."""
    found = []
    for path in sorted(EXAMPLES_DIR.rglob("*.yaml")):
        for line in path.read_text(encoding="utf-8").splitlines():
            comment = line.partition("#")[2] if line.lstrip().startswith("#") else ""
            for command in re.findall(r"agentrl (?:validate|render)\b[^`;]*", comment):
                found.append((f"{path.name}: {command.strip()}", shlex.split(command)[1:]))
    return found


EXAMPLE_COMMANDS = commands_in_example_comments()


@pytest.mark.parametrize(("where", "argv"), EXAMPLE_COMMANDS, ids=[w for w, _ in EXAMPLE_COMMANDS])
def test_the_commands_the_examples_tell_you_to_run_pass(
    where: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a reader runs them, from the repository root, with no policy in the environment."""
    monkeypatch.delenv("AGENTRL_POLICY", raising=False)
    monkeypatch.chdir(EXAMPLES_DIR.parent)
    code, _, err = run(capsys, *argv)
    assert code == 0, f"{where}\n{err}"
