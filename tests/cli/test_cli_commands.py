"""The `agentrl` command line, run in-process and as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentrl.cli.main import main
from conftest import EXAMPLES_DIR, minimal_body

EXAMPLE = EXAMPLES_DIR / "qwen2.5-3b-gsm8k-agentcore.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_ok_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "-f", str(EXAMPLE))
    assert code == 0
    assert out.count("\n") == 1 and ": OK " in out


def test_validate_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = minimal_body(resources={"parallelism": {"tensor": 3}}, grpo={"numRollouts": 0})
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(body))
    code, out, _ = run(capsys, "validate", "-f", str(spec))
    assert code == 1
    assert f"{spec}: spec.grpo.numRollouts: " in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("spec: [unclosed", "not valid YAML: line 1"),
        ("", "the file is empty"),
        ("a: 1\n---\nb: 2\n", "holds 2 documents"),
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
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE))
    assert code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["ConfigMap", "ConfigMap", "Service", "RayJob"]


def test_render_json_is_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    image = "img@sha256:" + "a" * 64
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLE), "-o", "json", "--image", image)
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "List" and len(doc["items"]) == 4
    head = doc["items"][3]["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["template"]["spec"]["containers"][0]["image"] == image


def test_installed_entry_point_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", "validate", "-f", str(EXAMPLE)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
