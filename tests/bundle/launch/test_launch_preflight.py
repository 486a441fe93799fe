"""Preflight checks on temporary trees: every problem reported, each naming its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_trees import EXAMPLE_C, example_doc, experiment, touch

from agentrl.api.models import RLExperimentSpec
from agentrl.bundle.launch import preflight
from agentrl.bundle.rollout.inputs import load_eval_groups
from agentrl.slimecmd import CheckpointDir

ROW = json.dumps({"prompt": "q", "metadata": {"a": 1}})


def _spec(**over: object) -> RLExperimentSpec:
    doc = example_doc(EXAMPLE_C)
    doc["spec"]["model"]["path"] = "/models/Qwen2.5-7B-Instruct"
    doc["spec"]["model"]["refLoad"] = "/models/Qwen2.5-7B-Instruct"
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


def test_a_hub_id_needs_the_trainer_weights_on_disk(tmp_path: Path) -> None:
    # slime's checkpoint loader asserts --ref-load is an existing, non-empty directory.
    doc = example_doc(EXAMPLE_C)
    del doc["spec"]["model"]["refLoad"]
    alone = experiment(doc).spec  # parsed only: the validate rule would refuse it first
    (problem,) = preflight.check_model(tmp_path, alone)
    assert "a Hugging Face id and no refLoad is set" in problem
    with_ref = experiment(example_doc(EXAMPLE_C)).spec
    touch(tmp_path, "/models/qwen2.5-7b-instruct/config.json", "{}")
    assert preflight.check_model(tmp_path, with_ref) == []
    (warning,) = preflight.model_warnings(with_ref)
    assert "download it in every pod at start" in warning


def test_ref_load_takes_what_slime_loads(tmp_path: Path) -> None:
    spec = experiment(example_doc(EXAMPLE_C)).spec  # refLoad /models/qwen2.5-7b-instruct
    (tmp_path / "models/qwen2.5-7b-instruct").mkdir(parents=True)
    (problem,) = preflight.check_model(tmp_path, spec)
    assert "neither an HF checkpoint (config.json) nor a Megatron one" in problem
    touch(tmp_path, "/models/qwen2.5-7b-instruct/latest_checkpointed_iteration.txt", "release")
    assert preflight.check_model(tmp_path, spec) == []
    iteration = _spec(model={**example_doc(EXAMPLE_C)["spec"]["model"],
                             "refLoad": "/ckpt/iter_0000300"})  # fmt: skip
    touch(tmp_path, "/ckpt/iter_0000300/common.pt")
    assert preflight.check_model(tmp_path, iteration) == []


def test_empty_jsonl(tmp_path: Path) -> None:
    touch(tmp_path, "/d.jsonl", "\n")
    assert preflight.check_jsonl(tmp_path, "spec.data.train", "/d.jsonl") == [
        "spec.data.train: /d.jsonl is empty"
    ]


def test_checkpoint_path_under_a_file_is_not_writable(tmp_path: Path) -> None:
    touch(tmp_path, "/ckpt", "a file where the directory should be")
    problems = preflight.check_checkpoint(tmp_path, _spec())
    assert problems and "spec.checkpoint.path: /ckpt/run is not writable" in problems[0]


def test_a_checkpoint_path_that_is_the_trainers_weights_is_refused(tmp_path: Path) -> None:
    _good_tree(tmp_path)
    spec = _spec(checkpoint={"path": "/models/Qwen2.5-7B-Instruct/"})
    (problem,) = preflight.check_checkpoint(tmp_path, spec)
    assert problem.startswith("spec.checkpoint.path: /models/Qwen2.5-7B-Instruct/ is also the")
    assert not list((tmp_path / "models/Qwen2.5-7B-Instruct").glob(".agentrl-write-test-*"))


def test_read_checkpoint_reports_the_tracker_and_entries(tmp_path: Path) -> None:
    spec = _spec()
    assert preflight.read_checkpoint(tmp_path, spec) == (CheckpointDir(None, ()), [])
    touch(tmp_path, "/ckpt/run/iter_0000010/common.pt")
    touch(tmp_path, "/ckpt/run/latest_checkpointed_iteration.txt", "10\n")
    found, problems = preflight.read_checkpoint(tmp_path, spec)
    assert problems == []
    assert found == CheckpointDir("10\n", ("iter_0000010", "latest_checkpointed_iteration.txt"))
    assert preflight.read_checkpoint(tmp_path, _spec(checkpoint={})) == (None, [])


def test_raw_mode_needs_megatron_weights(tmp_path: Path) -> None:
    _good_tree(tmp_path)
    spec = _spec()  # refLoad is the HF checkpoint
    assert preflight.check_weights_for_mode(tmp_path, spec, "bridge") == []
    assert preflight.check_weights_for_mode(tmp_path, spec, None) == []
    (problem,) = preflight.check_weights_for_mode(tmp_path, spec, "raw")
    assert problem.startswith("spec.model.refLoad: /models/Qwen2.5-7B-Instruct holds Hugging")
    touch(tmp_path, "/models/Qwen2.5-7B-Instruct/latest_checkpointed_iteration.txt", "release")
    assert preflight.check_weights_for_mode(tmp_path, spec, "raw") == []


def _with_context(context_length: int) -> RLExperimentSpec:
    doc = example_doc(EXAMPLE_C)
    doc["spec"]["model"]["path"] = "/models/Qwen2.5-7B-Instruct"
    doc["spec"]["model"]["refLoad"] = "/models/Qwen2.5-7B-Instruct"
    doc["spec"]["model"]["contextLength"] = context_length
    return experiment(doc).spec


def test_a_context_length_above_the_checkpoints_is_refused_before_sglang_starts(
    tmp_path: Path,
) -> None:
    """SGLang's ModelConfig raises for a context_length above the one it derives from the
    checkpoint's config.json (unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set):
    slime's engines would fail to start once the GPUs are up. The context is SGLang's
    (`agentrl.api.model_context`, checked against SGLang's own function in the gateway's
    tests): a linear factor multiplies the length, a YaRN one does not."""
    config = {"max_position_embeddings": 32768}
    touch(tmp_path, "/models/Qwen2.5-7B-Instruct/config.json", json.dumps(config))
    (problem,) = preflight.check_context_length(tmp_path, _with_context(65536), {})
    assert problem.startswith("spec.model.contextLength: 65536 is more than the 32768 tokens")
    assert "set it to 32768 or less" in problem
    assert preflight.check_context_length(tmp_path, _with_context(32768), {}) == []
    allowed = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert preflight.check_context_length(tmp_path, _with_context(65536), allowed) == []
    linear = {**config, "rope_parameters": {"rope_type": "linear", "factor": 4.0}}
    touch(tmp_path, "/models/Qwen2.5-7B-Instruct/config.json", json.dumps(linear))
    assert preflight.check_context_length(tmp_path, _with_context(131072), {}) == []
    yarn = {**config, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    touch(tmp_path, "/models/Qwen2.5-7B-Instruct/config.json", json.dumps(yarn))
    assert len(preflight.check_context_length(tmp_path, _with_context(131072), {})) == 1
    touch(tmp_path, "/models/Qwen2.5-7B-Instruct/config.json", "{}")  # nothing to judge by
    assert preflight.check_context_length(tmp_path, _with_context(131072), {}) == []


def test_every_row_of_an_eval_file_is_checked(tmp_path: Path) -> None:
    """The rollout reads an eval set whole at the first eval and ends the run on a bad row;
    the preflight used to look at the first 20 rows only, as it does for the train file."""
    _good_tree(tmp_path)
    spec = _spec()
    dev = spec.data.eval[0]
    touch(tmp_path, dev.path, "\n".join([ROW] * 24 + ["{not json", ROW]) + "\n")
    with pytest.raises(ValueError, match=r"dev.jsonl:25: not valid JSON"):  # the rollout's reader
        load_eval_groups(dev.model_copy(update={"path": str(tmp_path) + dev.path}), "eval")
    (problem,) = preflight.run_all(tmp_path, spec, visible_gpus=None)
    assert problem.startswith(f"spec.data.eval[0].path: {dev.path} line 25: not JSON")


def test_a_broken_eval_file_names_its_first_bad_rows_then_counts(tmp_path: Path) -> None:
    touch(tmp_path, "/e.jsonl", "[]\n" * 30)
    problems = preflight.check_jsonl(tmp_path, "spec.data.eval[0].path", "/e.jsonl", rows=None)
    assert len(problems) == 21 and "line 20: not a JSON object" in problems[19]
    assert problems[20] == "spec.data.eval[0].path: /e.jsonl: 10 more bad row(s)"
