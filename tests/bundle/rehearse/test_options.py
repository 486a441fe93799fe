"""The rows a rehearsal runs are the rows the pods run: the train set as slime's Dataset reads it.

In the pods slime reads `spec.data.train` (`slime/utils/data.py` `Dataset`, with the flags
agentrl renders: `--input-key prompt --metadata-key metadata`, no `--label-key`, `--tool-key`
at slime's default) and the rollout hands each sample's metadata to the agent. Here slime's
own `data.py` at each pinned commit runs on the same file as `plan_inputs`; only its
GPU-stack imports (`torch` through `slime.utils.types` and the timer, `ray`) are stood in for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.slime_data import data_module
from tests.support.upstream import slime_rows

from agentrl.api.models import RLExperimentSpec
from agentrl.bundle.launch.preflight import check_jsonl
from agentrl.bundle.rehearse.options import Options, plan_inputs
from agentrl.bundle.rehearse.report import RehearsalError

from .rig import http_agent, row, spec

TOOLS = [{"type": "function", "function": {"name": "click", "parameters": {}}}]
ROWS = [
    {**row("t-1"), "label": "cart-ok", "tools": TOOLS},  # tools join the metadata
    {**row("t-2", tools=["old"]), "tools": json.dumps(TOOLS)},  # a JSON string, over metadata's
    {**row("t-3"), "label": "no-tools"},
    {"prompt": "empty metadata", "metadata": {}, "tools": TOOLS},
]


def slime_dataset(commit: str, path: Path) -> list[Any]:
    """slime's `Dataset(path)` at `commit`, with the data flags agentrl renders."""
    dataset = data_module(commit).Dataset(
        str(path), tokenizer=None, processor=None, max_length=None, prompt_key="prompt",
        metadata_key="metadata", label_key=None, tool_key="tools",
    )  # fmt: skip
    return list(dataset.samples)


def experiment() -> RLExperimentSpec:
    return RLExperimentSpec.model_validate(spec(http_agent("http://agent:8000/run"))["spec"])


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("commit", slime_rows())
def test_the_train_rows_are_what_slime_s_dataset_gives_the_pods(
    tmp_path: Path, commit: str
) -> None:
    data = write_rows(tmp_path / "train.jsonl", ROWS)
    expected = slime_dataset(commit, data)
    plan = plan_inputs(
        experiment(), Options(engine="", out=tmp_path, prompts=9, samples=2, data=data)
    )
    assert len(plan.groups) == len(expected)
    for group, sample in zip(plan.groups, expected, strict=True):
        for inp in group:
            # The agent payload is the metadata: the pods' agent gets the row's tools.
            assert dict(inp.metadata) == sample.metadata
            assert inp.prompt == sample.prompt and inp.label == sample.label
    assert plan.groups[1][0].metadata["tools"] == TOOLS


@pytest.mark.parametrize("commit", slime_rows())
@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ({"click": {}}, "must be a list of tool schemas, got dict"),
        ("click, type", "is a string that is not JSON"),
    ],
)
def test_tools_slime_s_dataset_fails_on_are_refused_before_any_gpu(
    tmp_path: Path, commit: str, tools: Any, says: str
) -> None:
    data = write_rows(tmp_path / "train.jsonl", [{**row("t-1"), "tools": tools}])
    with pytest.raises((AssertionError, json.JSONDecodeError)):
        slime_dataset(commit, data)  # in the pods: the job stops at its first data load
    with pytest.raises(RehearsalError, match=f"train.jsonl:1: 'tools' {says}"):
        plan_inputs(experiment(), Options(engine="", out=tmp_path, data=data))


@pytest.mark.parametrize("commit", slime_rows())
def test_a_bad_row_past_the_rehearsed_prompts_is_refused_too(tmp_path: Path, commit: str) -> None:
    rows = [row("t-1"), {**row("t-2"), "tools": {"click": {}}}]
    data = write_rows(tmp_path / "train.jsonl", rows)
    with pytest.raises(AssertionError, match="tools must be a list"):
        slime_dataset(commit, data)  # slime reads every row when the job starts
    with pytest.raises(RehearsalError, match=r"train\.jsonl:2: 'tools' must be a list"):
        plan_inputs(experiment(), Options(engine="", out=tmp_path, prompts=1, data=data))
    # A metadata that is no object fails the rollout at whichever step draws its row.
    write_rows(data, [row("t-1"), {"prompt": "p", "metadata": "task t-2"}])
    with pytest.raises(RehearsalError, match=r"train\.jsonl:2: 'metadata' must be an object"):
        plan_inputs(experiment(), Options(engine="", out=tmp_path, prompts=1, data=data))


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"question": "task t-2", "metadata": {"task_id": "t-2"}}, 'no "prompt" key'),
        ({"prompt": "task t-2", "metdata": {"task_id": "t-2"}}, '"metadata" is missing'),
    ],
)
def test_a_row_the_pods_launcher_refuses_is_refused_by_the_rehearsal(
    tmp_path: Path, bad: Any, says: str
) -> None:
    """The launcher's preflight refuses these files in the pods, after the GPUs are
    scheduled; a rehearsal passed with them (an agent given no metadata has no task)."""
    data = tmp_path / "train.jsonl"
    write_rows(data, [row("t-1"), bad])
    (problem,) = check_jsonl(Path("/"), "spec.data.train", str(data))  # the pods' check
    assert f"line 2: {says}" in problem
    with pytest.raises(RehearsalError) as refused:
        plan_inputs(experiment(), Options(engine="", out=tmp_path, prompts=1, data=data))
    message = str(refused.value)
    assert message.startswith("spec.data.train: ") and f"train.jsonl:2: {says}" in message
    assert '"prompt": ..., "metadata": {...}' in message  # the shape to fix it to


def test_a_bad_row_anywhere_in_an_eval_file_is_refused_as_the_pods_refuse_it(
    tmp_path: Path,
) -> None:
    """The launcher checks every row of an eval file (the rollout reads it whole at the first
    eval, and a bad row there ends the run); the rehearsal of an eval split does the same."""
    data = write_rows(tmp_path / "e.jsonl", [row(f"t-{i}") for i in range(24)])
    with data.open("a", encoding="utf-8") as out:
        out.write('{"prompt": "t-24", "metadata": []}\n')
    doc = spec(http_agent("http://agent:8000/run"))["spec"]
    doc["data"]["eval"] = [{"name": "e", "path": "/data/e.jsonl"}]
    experiment = RLExperimentSpec.model_validate(doc)
    (problem,) = check_jsonl(Path("/"), "spec.data.eval[0].path", str(data), rows=None)
    assert "line 25: " in problem
    with pytest.raises(RehearsalError) as refused:
        plan_inputs(experiment, Options(engine="", out=tmp_path, split="eval:e", data=data))
    message = str(refused.value)
    assert message.startswith("spec.data.eval[0].path: ") and "e.jsonl:25: " in message
    assert "refuses a file with such a row anywhere" in message
