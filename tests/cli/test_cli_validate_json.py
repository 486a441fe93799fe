"""`agentrl validate -o json` and one input naming the same experiment twice (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentrl.cli.main import main
from conftest import minimal_body

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
