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
from agentrl.bundle.launch.preflight import check_context_length, check_jsonl, check_model
from agentrl.bundle.rehearse.options import Options, plan_inputs
from agentrl.bundle.rehearse.report import RehearsalError
from agentrl.bundle.rollout.inputs import load_eval_groups

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


def test_a_file_of_many_bad_rows_names_the_rows_the_pods_launcher_names(tmp_path: Path) -> None:
    """Both list the first bad rows and count the rest; the rehearsal listed 3 of the 5 the
    launcher names."""
    data = tmp_path / "train.jsonl"
    bad = {"question": "task", "metadata": {"task_id": "t"}}
    write_rows(data, [row("t-1"), *[bad] * 7])
    problems = check_jsonl(Path("/"), "spec.data.train", str(data))  # the pods' check
    assert len(problems) == 6 and "2 more bad row(s)" in problems[5], problems
    assert all(f"line {n}: " in p for n, p in zip(range(2, 7), problems, strict=False))
    with pytest.raises(RehearsalError) as refused:
        plan_inputs(experiment(), Options(engine="", out=tmp_path, prompts=1, data=data))
    message = str(refused.value)
    assert all(f"train.jsonl:{n}: " in message for n in range(2, 7))
    assert "train.jsonl:7: " not in message
    assert "(and 2 more)" in message


def test_a_context_longer_than_the_checkpoint_s_is_refused_as_the_pods_launcher_does(
    tmp_path: Path,
) -> None:
    """SGLang refuses to start its engines with a contextLength above the checkpoint's, and
    the launcher's preflight says so in the pods, after the GPUs are scheduled. A rehearsal
    against an engine started without --context-length (as docs/rehearse.md starts one)
    passed with it."""
    local = tmp_path / "models" / "qwen3-8b"
    local.mkdir(parents=True)
    (local / "tokenizer.json").write_text("{}")
    (local / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    data = write_rows(tmp_path / "train.jsonl", [row("t-1")])
    body = spec(http_agent("http://agent:8000/run"), context_length=65536)
    body["spec"]["model"].update(path=str(local), rendererFamily="qwen3")
    exp = RLExperimentSpec.model_validate(body["spec"])
    (pods,) = check_context_length(Path("/"), exp, {})  # the launcher's check, in the pods
    fix = pods.split("config.json, ", 1)[1]  # "and SGLang refuses ...: set it to 32768 ..."
    for model_dir in (None, local):  # the spec's path readable here, or its local copy
        with pytest.raises(RehearsalError) as refused:
            plan_inputs(exp, Options(engine="", out=tmp_path, data=data, model_dir=model_dir))
        said = str(refused.value)
        assert said.startswith("spec.model.contextLength: 65536 is more than the 32768 tokens")
        assert fix in said and "set it to 32768 or less" in fix
    allowed = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}  # spec.runtime.env, in the pods
    assert check_context_length(Path("/"), exp, allowed) == []
    assert plan_inputs(exp, Options(engine="", out=tmp_path, data=data, pod_env=allowed)).groups


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"prompt": "p", "metadata": "task e-25"}, "'metadata' must be an object"),
        ({**row("e-25"), "tools": {"click": {}}}, "'tools' must be a list"),
        ("not json", "not valid JSON"),
    ],
)
def test_a_bad_eval_row_past_the_rehearsed_prompts_is_refused_too(
    tmp_path: Path, bad: Any, says: str
) -> None:
    """The rollout reads every row of an eval set at the first evaluation (after
    evalInterval train steps) and stops the job on a bad one; the launcher's preflight
    judges every row as well, and so does a rehearsal of the eval split, past its prompts."""
    lines = [json.dumps(row(f"e-{i}")) for i in range(24)] + [
        bad if isinstance(bad, str) else json.dumps(bad)
    ]
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    body = spec(http_agent("http://agent:8000/run"))
    body["spec"]["data"]["eval"] = [{"name": "dev", "path": "/data/web/dev.jsonl"}]
    exp = RLExperimentSpec.model_validate(body["spec"])
    (pods_said,) = check_jsonl(Path("/"), "spec.data.eval[0].path", str(data))  # the preflight
    assert "dev.jsonl line 25: " in pods_said
    pods = exp.data.eval[0].model_copy(update={"path": str(data)})
    with pytest.raises(ValueError, match=f"dev.jsonl:25: {says}"):
        load_eval_groups(pods, "spec.data.eval[0]")  # the rollout, at the first evaluation
    options = Options(engine="", out=tmp_path, prompts=1, split="eval:dev", data=data)
    with pytest.raises(RehearsalError, match=f"dev.jsonl:25: {says}"):
        plan_inputs(exp, options)


@pytest.mark.parametrize(
    ("files", "taken"),
    [
        (["tokenizer_config.json"], False),  # a config, no vocabulary
        (["tokenizer_config.json", "tokenizer.json"], True),
        (["vocab.json", "merges.txt"], True),
        (["tokenizer.model"], True),
        (["qwen.tiktoken"], True),
    ],
)
def test_the_rehearsal_takes_the_tokenizer_files_the_pods_preflight_takes(
    tmp_path: Path, files: list[str], taken: bool
) -> None:
    """One rule for both: a model directory the rehearsal runs with is one the launcher's
    preflight lets through in the pods (the rehearsal used to take tokenizer_config.json
    alone, which holds no vocabulary)."""
    model = tmp_path / "models" / "qwen2.5-7b"
    model.mkdir(parents=True)
    for name in ["config.json", *files]:
        (model / name).write_text("{}")
    data = write_rows(tmp_path / "train.jsonl", [row("t-1")])
    body = spec(http_agent("http://agent:8000/run"))
    body["spec"]["model"].update(path=str(model), refLoad=str(model))
    exp = RLExperimentSpec.model_validate(body["spec"])
    pods = [p for p in check_model(Path("/"), exp) if "tokenizer vocabulary" in p]
    assert len(pods) == (0 if taken else 1)  # the launcher's check, in the pods
    options = Options(engine="", out=tmp_path, data=data)
    if taken:
        assert plan_inputs(exp, options).groups
    else:
        with pytest.raises(RehearsalError, match="holds no tokenizer files"):
            plan_inputs(exp, options)


@pytest.mark.parametrize("commit", slime_rows())
def test_the_rows_slime_drops_for_a_long_prompt_are_not_rehearsed(
    tmp_path: Path, commit: str
) -> None:
    """slime's Dataset drops the train rows whose prompt is longer than
    --rollout-max-prompt-len (in spec.runtime.extraArgs) when the job starts; the rehearsal
    ran the file's first rows whatever their length, rows the pods never train on. It now
    runs the rows slime's own Dataset keeps, counted with the checkpoint's tokenizer."""
    from tests.support.tiny_tokenizer import write_checkpoint
    from transformers import AutoTokenizer

    checkpoint = write_checkpoint(tmp_path / "ckpt")
    rows = [row(f"t-{i}") | {"prompt": "word " * n} for i, n in enumerate([9, 2, 1, 30, 3])]
    data = write_rows(tmp_path / "train.jsonl", rows)
    kept = data_module(commit).Dataset(
        str(data), tokenizer=AutoTokenizer.from_pretrained(str(checkpoint)), processor=None,
        max_length=12, prompt_key="prompt", metadata_key="metadata", label_key=None,
        tool_key="tools",
    ).samples  # fmt: skip
    exp = experiment()
    runtime = exp.runtime.model_copy(update={"extra_args": ["--rollout-max-prompt-len", "12"]})
    exp = exp.model_copy(update={"runtime": runtime})
    options = Options(engine="", out=tmp_path, prompts=2, samples=1, data=data,
                      model_dir=checkpoint)  # fmt: skip
    plan = plan_inputs(exp, options)
    assert [g[0].prompt for g in plan.groups] == [s.prompt for s in kept[:2]]
    assert [(g[0].group_index, g[0].index) for g in plan.groups] == [(0, 0), (1, 1)]
    assert any("2 row(s) of" in n and "slime's Dataset drops them" in n for n in plan.notes)
    # A file slime would empty is refused, as the launcher refuses it in the pods.
    write_rows(data, rows[3:4])
    with pytest.raises(RehearsalError, match=r"drops every row of spec\.data\.train"):
        plan_inputs(exp, options)


@pytest.mark.parametrize("commit", slime_rows())
def test_a_prompt_after_the_first_that_is_not_text_is_judged_as_slime_judges_it(
    tmp_path: Path, commit: str
) -> None:
    """With a prompt length set and a first prompt that is text, slime's Dataset hands every
    prompt to the tokenizer in one batch: a list of messages (or an object, or null) later in
    the file stops the job with a TypeError, and a list of two texts is counted as a text
    pair. The launcher only warned that it could not count, and the rehearsal ran such rows
    as if slime kept them; both now apply one rule (`agentrl.api.prompt_lengths`)."""
    from tests.support.tiny_tokenizer import write_checkpoint
    from transformers import AutoTokenizer

    from agentrl.bundle.launch import preflight

    checkpoint = write_checkpoint(tmp_path / "ckpt")
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))

    def slime_keeps(path: Path) -> list[Any]:
        return [s.prompt for s in data_module(commit).Dataset(
            str(path), tokenizer=tokenizer, processor=None, max_length=12, prompt_key="prompt",
            metadata_key="metadata", label_key=None, tool_key="tools",
        ).samples]  # fmt: skip

    exp = experiment()
    runtime = exp.runtime.model_copy(update={"extra_args": ["--rollout-max-prompt-len", "12"]})
    data = tmp_path / "train.jsonl"
    exp = exp.model_copy(update={"runtime": runtime, "data": exp.data.model_copy(
        update={"train": str(data)})})  # fmt: skip
    options = Options(engine="", out=tmp_path, prompts=10, samples=1, data=data,
                      model_dir=checkpoint)  # fmt: skip

    def launcher(path: Path) -> tuple[list[str], list[str]]:
        prompts: list[tuple[int, Any]] = []
        assert check_jsonl(Path("/"), "spec.data.train", str(path), prompts) == []
        lengths = preflight.slime_prompt_lengths(Path("/"), str(checkpoint))
        return preflight.check_prompt_lengths(exp, prompts, lengths)

    # Text pairs: slime keeps the short one and drops the long one (both texts counted).
    pairs = [row("t-0") | {"prompt": "word"}, row("t-1") | {"prompt": ["word " * 2, "word"]},
             row("t-2") | {"prompt": ["word " * 2, "word " * 3]}]  # fmt: skip
    write_rows(data, pairs)
    kept = slime_keeps(data)
    assert kept == ["word", ["word " * 2, "word"]]  # slime's own verdict
    assert [g[0].prompt for g in plan_inputs(exp, options).groups] == kept
    problems, (warning,) = launcher(data)
    assert problems == [] and "at lines 3 (17 tokens): 1 of 3 rows" in warning

    # A list of messages after a text prompt: slime's Dataset stops the job.
    messages = [*pairs[:2], row("t-3") | {"prompt": [{"role": "user", "content": "hi"}]}]
    write_rows(data, messages)
    with pytest.raises(TypeError):
        slime_keeps(data)
    (problem,), warnings = launcher(data)
    assert warnings == []
    assert problem.startswith(f"spec.data.train: {data} has prompts that are not text at lines "
                              "3 (list), and spec.runtime.extraArgs: --rollout-max-prompt-len "
                              "12 is set: slime's Dataset counts")  # fmt: skip
    assert "TypeError" in problem and "make every prompt text" in problem
    with pytest.raises(RehearsalError) as refused:
        plan_inputs(exp, options)
    assert str(refused.value) == problem  # the launcher's words, the same rows

    # More such rows than are listed, after a blank line (no row): both name the same lines,
    # the same number of them (the rehearsal counted rows, not lines, and listed 3).
    listed = [pairs[0], *[row(f"t-{i}") | {"prompt": [{"role": "user"}]} for i in range(7)]]
    data.write_text("\n".join(json.dumps(r) for r in listed[:1]) + "\n\n"
                    + "".join(json.dumps(r) + "\n" for r in listed[1:]))  # fmt: skip
    (problem,), _ = launcher(data)
    assert "not text at lines 3 (list), 4 (list), 5 (list), 6 (list), 7 (list) and 2 more" in (
        problem
    )
    with pytest.raises(RehearsalError) as refused:
        plan_inputs(exp, options)
    assert str(refused.value) == problem

    # The first prompt not text: slime counts nothing, and neither judge does.
    write_rows(data, [messages[2], *pairs])
    assert len(slime_keeps(data)) == 4
    assert launcher(data) == ([], [])
    assert len(plan_inputs(exp, options).groups) == 4


def test_counting_prompts_of_a_hub_id_the_cache_lacks_offline_names_model_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt length in extraArgs has the rehearsal count the train prompts with the
    model's tokenizer; for a hub id kept off the hub and not in the cache, that load raised
    out of the rehearsal (a traceback, after huggingface_hub's retries where the hub was
    merely out of reach). It is refused, naming --model-dir."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    exp = experiment()
    runtime = exp.runtime.model_copy(update={"extra_args": ["--rollout-max-prompt-len", "12"]})
    exp = exp.model_copy(update={"runtime": runtime})
    data = write_rows(tmp_path / "train.jsonl", [row("t-0")])
    options = Options(engine="", out=tmp_path, data=data)
    with pytest.raises(RehearsalError, match=r"HF_HUB_OFFLINE is set.*Or pass --model-dir"):
        plan_inputs(exp, options)


@pytest.mark.parametrize("row", slime_rows())
def test_the_rollout_s_slime_args_are_the_pods_command_line_under_slime_s_names(row: str) -> None:
    """`slime_args` reads the launcher's own argv; the rollout shape and sampling flags (what
    `train_spec` and a dynamic-sampling filter read) land under the attribute slime's parser
    gives each, with the spec's values, and extraArgs' flags reach them too."""
    from tests.support.slime_upstream import parser_dests

    from agentrl.bundle.rehearse.options import slime_args
    from agentrl.bundle.rollout.inputs import train_spec
    from agentrl.slimecmd.flags import data_args

    body = spec(http_agent("http://agent:8000/run"))["spec"]
    body["runtime"] = {"extraArgs": ["--rollout-top-k", "20"]}
    exp = RLExperimentSpec.model_validate(body)
    args, dests = vars(slime_args(exp)), parser_dests(row)
    shape = [a for a in data_args(exp) if a.startswith("--")]
    assert {dests[f] for f in shape} <= set(args)
    assert (args["rollout_batch_size"], args["n_samples_per_prompt"]) == (2, 4)
    assert (args["rollout_max_response_len"], args["rollout_temperature"]) == (64, 1.0)
    assert args[dests["--rollout-top-k"]] == 20 and args["reward_key"] is None
    sampling = train_spec(exp, slime_args(exp)).sampling_params
    assert sampling == {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64}


def _emitting() -> list[RLExperimentSpec]:
    """Specs whose composed argv between them carry every kind of flag agentrl emits: wandb
    names that read as numbers, an eval set, extraArgs' sampling flags with one value each
    (one as `--flag=value`, which argparse reads as `--flag value`)."""
    plain = spec(http_agent("http://agent:8000/run"))["spec"]
    full = spec(http_agent("http://agent:8000/run"))["spec"]
    full["tracking"] = {
        "wandb": {
            "project": "2024", "group": "7", "team": "42",
            "apiKeySecret": {"name": "w", "key": "k"},
        }
    }  # fmt: skip
    full["data"]["eval"] = [{"name": "dev", "path": "/data/web/dev.jsonl"}]
    full["runtime"] = {
        "extraArgs": ["--rollout-stop", "</done>", "--rollout-stop-token-ids", "151645",
                      "--rollout-top-p", "1", "--rollout-top-k=20",
                      "--rollout-max-prompt-len", "512"],
    }  # fmt: skip
    return [RLExperimentSpec.model_validate(s) for s in (plain, full)]


def _options(exp: RLExperimentSpec) -> list[str]:
    from agentrl.slimecmd import PodFacts, Start, compose

    facts = PodFacts(model_args=(), train_env={}, wandb_key=False, start=Start.FIRST_RUN,
                     hf_mode_flag=False, experiment=None)  # fmt: skip
    argv = compose(exp, facts).argv()
    return argv[next(i for i, a in enumerate(argv) if a.startswith("--")) :]


@pytest.mark.parametrize("row", slime_rows())
def test_the_flag_table_is_slime_s_parser_s(row: str) -> None:
    """Each flag of `slime_argv.FLAGS` sets the attribute, and a value of the kind, that the
    row's own parser gives it (a store_false flag its attribute's False, an nargs "+" flag a
    list); every flag agentrl composes is in the table."""
    from tests.support.slime_upstream import flag_kinds

    from agentrl.bundle.rehearse.slime_argv import FLAGS

    theirs = flag_kinds(row, sorted(FLAGS))
    for flag, (dests, kind) in FLAGS.items():
        if theirs[flag] is not None:  # --megatron-to-hf-mode: at one row only
            assert theirs[flag][0] in dests and theirs[flag][1] == kind, flag
    assert any(known is not None for known in theirs.values())
    emitted = {a.split("=")[0] for exp in _emitting() for a in _options(exp) if a.startswith("--")}
    assert emitted <= set(FLAGS), emitted - set(FLAGS)


@pytest.mark.parametrize("row", slime_rows())
def test_slime_args_are_what_slime_s_parser_reads_from_the_pods_argv(row: str) -> None:
    """Every attribute `slime_args` sets holds what the row's own parser sets from the same
    argv, of the same type: wandb names that read as numbers stay text, `--train-env-vars` is
    a dict, `--disable-*` flags are their attribute's False, one `--rollout-stop` a list.
    Megatron's `attention_backend` alone differs: an enum member there, its text here."""
    from tests.support.slime_upstream import slime_parse

    from agentrl.bundle.rehearse.options import slime_args

    for exp in _emitting():
        parsed = slime_parse(row, _options(exp))
        assert parsed["rest"] == []
        theirs = parsed["args"]
        ours = {k: v for k, v in vars(slime_args(exp)).items() if k in theirs}
        assert set(vars(slime_args(exp))) - set(ours) <= {
            "sglang_cuda_graph_max_bs", "sglang_cuda_graph_max_bs_decode",
            "sglang_data_parallel_size", "sglang_dp_size",
        }  # fmt: skip  # each row has one of the two names
        assert ours["attention_backend"] == "flash"  # Megatron's enum is stood in here
        del ours["attention_backend"]
        assert {k: (v, type(v)) for k, v in ours.items()} == {
            k: (theirs[k], type(theirs[k])) for k in ours
        }
