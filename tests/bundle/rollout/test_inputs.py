"""Rollout knobs from the runtime config and slime args; eval rows; errors that name the fix."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentrl.api.models import EvalSet
from agentrl.bundle.rollout.inputs import (
    eval_spec,
    inputs_from_slime,
    load_eval_groups,
    load_runtime_config,
    read_groups,
    train_spec,
    wandb_run_url,
)

from .doubles import runtime_config


def test_runtime_config_from_env_and_a_clear_error_when_missing(tmp_path: Path) -> None:
    config = runtime_config()
    path = tmp_path / "config.json"
    path.write_text(config.to_json())
    assert load_runtime_config({"AGENTRL_CONFIG": str(path)}) == config
    with pytest.raises(FileNotFoundError, match="AGENTRL_CONFIG"):
        load_runtime_config({"AGENTRL_CONFIG": str(tmp_path / "nope.json")})


def test_train_and_eval_sampling() -> None:
    spec = runtime_config(timeout=45).spec
    train = train_spec(spec, SimpleNamespace(rollout_max_response_len=128, rollout_temperature=0.7))
    assert train.sampling_params == {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 128}
    assert train.max_response_len == 128 and train.timeout_s == 45.0
    defaults = train_spec(spec, SimpleNamespace())
    assert defaults.sampling_params["max_new_tokens"] == spec.grpo.max_response_length
    ev = eval_spec(
        spec, EvalSet(name="gsm8k", path="/x.jsonl", temperature=0.0, maxResponseLength=32)
    )
    assert ev.sampling_params == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 32}


def test_eval_rows_become_groups_of_samples_per_prompt(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    rows = [{"prompt": "a", "metadata": {"q": 1}, "label": "x"}, {"prompt": "b"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    groups = load_eval_groups(EvalSet(name="e", path=str(path), samplesPerPrompt=3), "w")
    assert [len(g) for g in groups] == [3, 3]
    assert [i.index for g in groups for i in g] == list(range(6))
    assert groups[0][0].metadata == {"q": 1} and groups[1][0].metadata == {}
    assert {i.group_index for i in groups[1]} == {1}


def test_eval_rows_hand_the_agent_their_tools_as_train_rows_do(tmp_path: Path) -> None:
    """A row's top-level `tools` joins its metadata in the train set (slime's Dataset,
    `--tool-key tools`): an eval row of the same shape must give the agent the same payload."""
    path = tmp_path / "eval.jsonl"
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    rows = [{"prompt": "a", "metadata": {"q": 1, "tools": []}, "tools": tools, "label": "x"},
            {"prompt": "b", "tools": json.dumps(tools)}]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    evals = load_eval_groups(EvalSet(name="e", path=str(path)), "spec.data.eval[0]")
    train = read_groups(path, 1, "spec.data.train", as_train_set=True)
    assert [g[0].metadata for g in evals] == [{"q": 1, "tools": tools}, {"tools": tools}]
    assert [g[0].metadata for g in evals] == [g[0].metadata for g in train]
    assert evals[0][0].label == "x" and train[0][0].label is None  # eval keeps its label
    path.write_text(json.dumps({"prompt": "c", "tools": {"name": "search"}}) + "\n")
    with pytest.raises(ValueError, match=r"eval.jsonl:1: 'tools' must be a list of tool schemas"):
        load_eval_groups(EvalSet(name="e", path=str(path)), "spec.data.eval[0]")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json\n", r"eval\.jsonl:1: not valid JSON"),
        ('{"prompt": "a"}\n[1]\n', r"eval\.jsonl:2: each line must be an object"),
        ('{"prompt": "a", "metadata": "x"}\n', r"'metadata' must be an object"),
        ("\n", "holds no rows"),
    ],
)
def test_bad_eval_files_name_file_line_and_fix(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_eval_groups(EvalSet(name="e", path=str(path)), "spec.data.eval[0]")


def test_eval_uri_is_refused_with_the_fix() -> None:
    # The API refuses it first, with the fix; the rollout keeps its own check for a config
    # built without validation.
    with pytest.raises(ValueError, match=r"s3:// URIs are not read.* volume"):
        EvalSet(name="e", path="s3://b/k.jsonl")
    unchecked = EvalSet.model_construct(name="e", path="s3://b/k.jsonl")
    with pytest.raises(ValueError, match=r"spec\.data\.eval\[1\]\.path: .* mount it"):
        load_eval_groups(unchecked, "spec.data.eval[1]")


def test_slime_samples_to_inputs() -> None:
    s = SimpleNamespace(
        prompt="p", metadata={"a": 1}, label="l", group_index=4, index=9, tokens=[1]
    )
    (group,) = inputs_from_slime([[s]])
    assert group[0].metadata == {"a": 1} and group[0].group_index == 4
    assert list(group[0].prompt_tokens) == [1]
    bad = SimpleNamespace(prompt="p", metadata="oops", index=3)
    with pytest.raises(TypeError, match="metadata must be a JSON object"):
        inputs_from_slime([[bad]])


@pytest.mark.parametrize(
    ("args", "url"),
    [
        pytest.param({"wandb_host": None}, "https://wandb.ai/ml/swe/runs/abc123", id="cloud"),
        pytest.param(
            {"wandb_host": "https://api.wandb.ai"},
            "https://wandb.ai/ml/swe/runs/abc123",
            id="cloud-api-host",
        ),
        pytest.param(
            {"wandb_host": "https://wandb.corp.example/"},
            "https://wandb.corp.example/ml/swe/runs/abc123",
            id="self-hosted",
        ),
        pytest.param({"wandb_team": None}, None, id="no-team"),
        pytest.param({"wandb_run_id": None}, None, id="no-run-yet"),
        pytest.param({"use_wandb": False}, None, id="off"),
    ],
)
def test_the_wandb_run_url_is_built_from_slimes_args(args: dict[str, Any], url: str | None) -> None:
    base = {"use_wandb": True, "wandb_team": "ml", "wandb_project": "swe",
            "wandb_run_id": "abc123", "wandb_host": None}  # fmt: skip
    assert wandb_run_url(SimpleNamespace(**{**base, **args})) == url
