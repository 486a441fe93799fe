"""`agentrl validate -o json` and one input naming the same experiment twice (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentrl.cli.main import main
from conftest import ROOT, minimal_body

IMAGE = "r@sha256:" + "1" * 64


def test_json_lists_every_problem_of_every_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = minimal_body(), minimal_body(resources={"nodes": 0, "cpu": "0"})
    bad["metadata"]["name"] = "bad"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all([good, bad, secret]))
    code = main(["validate", "-f", str(path), "-o", "json", "--image", IMAGE])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and err == "" and report["valid"] is False
    first, second = report["documents"]
    assert first == {"source": f"{path}#1", "valid": True, "namespace": "rl", "name": "demo",
                     "problems": []}  # fmt: skip
    assert second["valid"] is False and {p["path"] for p in second["problems"]} == {
        "spec.resources.nodes", "spec.resources.cpu",
    }  # fmt: skip
    assert all(set(p) == {"path", "message", "hint", "severity"} for p in second["problems"])
    assert report["notes"] == [f"{path}#3: skipped v1/Secret s (not an RLExperiment)"]


def test_json_of_a_valid_input_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(minimal_body()))
    assert main(["validate", "-f", str(path), "-o", "json", "--image", IMAGE]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_the_same_namespace_and_name_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = tmp_path / "a.yaml", tmp_path / "b.yaml"
    one.write_text(yaml.safe_dump(minimal_body()))
    two.write_text(yaml.safe_dump(minimal_body(grpo={"numRollouts": 20})))
    code = main(["validate", "-f", str(one), "-f", str(two), "--image", IMAGE])
    out, err = capsys.readouterr()
    assert code == 1 and out.count(": OK") == 1
    assert f"{two}: metadata.name: RLExperiment rl/demo is also defined in {one}" in err
    other = minimal_body()
    other["metadata"]["namespace"] = "other"
    two.write_text(yaml.safe_dump(other))
    assert main(["validate", "-f", str(one), "-f", str(two), "--image", IMAGE]) == 0


@pytest.mark.parametrize(
    ("content", "source", "message"),
    [
        (None, "nope.yaml", "no such file or directory"),
        ("", "spec.yaml", "the file is empty"),
        (yaml.safe_dump({"apiVersion": "v1", "kind": "Secret"}), "spec.yaml",
         "no RLExperiment found"),
    ],
)  # fmt: skip
def test_json_when_the_input_cannot_be_read_is_still_a_report(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    source: str,
    message: str,
) -> None:
    """A tool reading the JSON gets a document for every outcome, with the same exit status;
    the human message stays on stderr."""
    path = tmp_path / source
    if content is not None:
        path.write_text(content)
    code = main(["validate", "-o", "json", "-f", str(path), "--image", IMAGE])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and report["valid"] is False
    (document,) = report["documents"]
    assert document["source"] == str(path) and document["valid"] is False
    (problem,) = document["problems"]
    assert set(problem) == {"path", "message", "hint", "severity"}
    assert problem["severity"] == "error" and problem["message"].startswith(message)
    assert message in err and "Traceback" not in err


def test_json_of_a_yaml_error_is_the_document_s_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("spec: [unclosed")
    code = main(["validate", "-o", "json", "-f", str(path), "--image", IMAGE])
    out, err = capsys.readouterr()
    (document,) = json.loads(out)["documents"]
    assert code == 1 and err == "" and document["source"] == str(path)
    assert document["problems"][0]["message"].startswith("not valid YAML: line 1")


def test_json_when_the_policy_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "x.yaml"
    spec.write_text(yaml.safe_dump(minimal_body()))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"policy": {"bogus": 1}}))
    code = main(["validate", "-o", "json", "-f", str(spec), "--policy", str(policy),
                 "--image", IMAGE])  # fmt: skip
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and report["valid"] is False and report["policy"] == str(policy)
    (document,) = report["documents"]
    assert document["source"] == str(policy)
    assert document["problems"][0]["message"].startswith("holds no policy")
    assert f"error: {policy}: holds no policy" in err


def test_docs_name_every_key_of_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/api.md describes the document as printed: its top-level keys (which it once left
    out, listing only each experiment's) and each experiment's."""
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(minimal_body()))
    main(["validate", "-f", str(path), "-o", "json", "--image", IMAGE])
    report = json.loads(capsys.readouterr().out)
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    described = text[text.index("`validate -o json` prints") :].split("\n\n")[0]
    keys = {*report, *report["documents"][0]} - {"namespace", "name"}
    assert sorted(k for k in keys if f'"{k}"' not in described and f"`{k}`" not in described) == []
    assert "`namespace`/`name`" in described
