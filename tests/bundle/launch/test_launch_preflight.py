"""Preflight checks on temporary trees: every problem reported, each naming its field."""

from __future__ import annotations

import json
from pathlib import Path

from launch_trees import EXAMPLE_C, example_doc, experiment, touch

from agentrl.api.models import RLExperimentSpec
from agentrl.bundle.launch import preflight

ROW = json.dumps({"prompt": "q", "metadata": {"a": 1}})


def _spec(**over: object) -> RLExperimentSpec:
    doc = example_doc(EXAMPLE_C)
    doc["spec"]["model"]["path"] = "/models/Qwen2.5-7B-Instruct"
    doc["spec"]["checkpoint"] = {"path": "/ckpt/run"}
    for key, value in over.items():
        doc["spec"][key] = value
    return experiment(doc).spec


def _good_tree(root: Path) -> None:
    touch(root, "/models/Qwen2.5-7B-Instruct/config.json", "{}")
    touch(root, "/data/web/train.jsonl", f"{ROW}\n\n{ROW}\n")
    touch(root, "/data/web/dev.jsonl", ROW)
    touch(root, "/data/web/hard.jsonl", ROW)


def test_good_tree_has_no_problems(tmp_path: Path) -> None:
    _good_tree(tmp_path)
    assert preflight.run_all(tmp_path, _spec(), visible_gpus=None) == []
    assert (tmp_path / "ckpt/run").is_dir()
    assert list((tmp_path / "ckpt/run").iterdir()) == []  # the write probe is removed


def test_every_problem_at_once(tmp_path: Path) -> None:
    _good_tree(tmp_path)
    (tmp_path / "models/Qwen2.5-7B-Instruct/config.json").unlink()
    (tmp_path / "data/web/hard.jsonl").unlink()
    touch(
        tmp_path,
        "/data/web/train.jsonl",
        f'{ROW}\n{{"prompt": "x", "metadata": "s"}}\nnot json\n[1]\n',
    )
    problems = preflight.run_all(tmp_path, _spec(), visible_gpus=4)
    text = "\n".join(problems)
    assert "spec.model.path: /models/Qwen2.5-7B-Instruct has no config.json" in text
    assert (
        'spec.data.train: /data/web/train.jsonl line 2: "metadata" is missing or not an object'
        in text
    )
    assert "line 3: not JSON" in text and "line 4: not a JSON object" in text
    assert "spec.data.eval[1].path: cannot read /data/web/hard.jsonl" in text
    assert "spec.resources.gpusPerNode is 8 but this node sees 4 GPUs" in text
    assert len(problems) == 6


def test_model_given_as_hub_id_is_refused() -> None:
    # slime's --use-kl-loss requires --ref-load to exist on disk (slime_validate_args).
    spec = experiment(example_doc(EXAMPLE_C)).spec
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
