"""Preflight checks on temporary trees: every problem reported, each naming its field."""

from __future__ import annotations

import json
from pathlib import Path

from launch_trees import example_docs, experiment, touch

from agentrl.api.models import RLExperimentSpec
from agentrl.bundle.launch import preflight

ROW = json.dumps({"prompt": "q", "metadata": {"a": 1}})


def _spec(**over: object) -> RLExperimentSpec:
    doc = json.loads(json.dumps(example_docs()["builtin-http-two-evals"]))
    doc["spec"]["checkpoint"] = {"path": "/ckpt/run"}
    for key, value in over.items():
        doc["spec"][key] = value
    return experiment(doc).spec


def _good_tree(root: Path) -> None:
    touch(root, "/models/Qwen2.5-3B-Instruct/config.json", "{}")
    touch(root, "/data/train.jsonl", f"{ROW}\n\n{ROW}\n")
    touch(root, "/data/gsm8k-test.jsonl", ROW)
    touch(root, "/data/math500.jsonl", ROW)


def test_good_tree_has_no_problems(tmp_path: Path) -> None:
    _good_tree(tmp_path)
    assert preflight.run_all(tmp_path, _spec(), visible_gpus=None) == []
    assert (tmp_path / "ckpt/run").is_dir()
    assert list((tmp_path / "ckpt/run").iterdir()) == []  # the write probe is removed


def test_every_problem_at_once(tmp_path: Path) -> None:
    _good_tree(tmp_path)
    (tmp_path / "models/Qwen2.5-3B-Instruct/config.json").unlink()
    (tmp_path / "data/math500.jsonl").unlink()
    touch(
        tmp_path, "/data/train.jsonl", f'{ROW}\n{{"prompt": "x", "metadata": "s"}}\nnot json\n[1]\n'
    )
    problems = preflight.run_all(tmp_path, _spec(), visible_gpus=4)
    text = "\n".join(problems)
    assert "spec.model.path: /models/Qwen2.5-3B-Instruct has no config.json" in text
    assert (
        'spec.data.train: /data/train.jsonl line 2: "metadata" is missing or not an object' in text
    )
    assert "line 3: not JSON" in text and "line 4: not a JSON object" in text
    assert "spec.data.eval[1].path: cannot read /data/math500.jsonl" in text
    assert "spec.resources.gpusPerNode is 8 but this node sees 4 GPUs" in text
    assert len(problems) == 6


def test_model_given_as_hub_id_is_refused() -> None:
    spec = _spec(model={"path": "Qwen/Qwen2.5-3B-Instruct", "type": "qwen2.5-3B"})
    assert "is not a directory inside the pods" in preflight.check_model(Path("/"), spec)[0]


def test_empty_jsonl(tmp_path: Path) -> None:
    touch(tmp_path, "/d.jsonl", "\n")
    assert preflight.check_jsonl(tmp_path, "spec.data.train", "/d.jsonl") == [
        "spec.data.train: /d.jsonl is empty"
    ]


def test_checkpoint_path_under_a_file_is_not_writable(tmp_path: Path) -> None:
    touch(tmp_path, "/ckpt", "a file where the directory should be")
    problems = preflight.check_checkpoint(tmp_path, _spec())
    assert problems and "spec.checkpoint.path: /ckpt/run is not writable" in problems[0]
