"""Preflight checks on temporary trees: every problem reported, each naming its field."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from launch_trees import EXAMPLE_C, example_doc, experiment, touch
from tests.support.slime_data import data_module
from tests.support.upstream import slime_rows

from agentrl import slimecmd
from agentrl.api.models import RLExperimentSpec
from agentrl.bundle.launch import preflight
from agentrl.bundle.rollout.inputs import inputs_from_slime, load_eval_groups
from agentrl.slimecmd import CheckpointDir, PodFacts, Start
from agentrl.slimecmd.checkpoint import RUN_MARK, TRACKER

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
    _checkpoint_with_template(root, "/models/Qwen2.5-7B-Instruct")
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


def _slime_dataset(commit: str, path: Path) -> list[Any]:
    """slime's own Dataset at `commit` on `path`, with the data flags agentrl renders."""
    dataset = data_module(commit).Dataset(
        str(path), tokenizer=None, processor=None, max_length=None, prompt_key="prompt",
        metadata_key="metadata", label_key=None, tool_key="tools",
    )  # fmt: skip
    return list(dataset.samples)


def _task(i: int) -> dict[str, Any]:
    return {"prompt": f"task {i}", "metadata": {"task_id": i}}


@pytest.mark.parametrize("commit", slime_rows())
@pytest.mark.parametrize(
    ("line", "bad", "says"),
    [
        (1, {**_task(0), "tools": {"click": {}}}, "'tools' must be a list of tool schemas"),
        (1, {**_task(0), "tools": "click, type"}, "'tools' is a string that is not JSON"),
        (25, ["task 24"], "not a JSON object"),
        (25, {"prompt": "task 24", "metadata": "task 24"}, '"metadata" is missing or not an'),
    ],
)
def test_a_row_the_run_stops_on_is_refused_wherever_it_is(
    tmp_path: Path, commit: str, line: int, bad: Any, says: str
) -> None:
    """slime's Dataset reads every row of the train file when its RolloutManager starts (the
    SGLang engines already launching) and stops the job on a row that is no object or whose
    `tools` is no list; a row whose metadata is no object loads, and the rollout stops the
    run at whichever step draws it. The preflight read only the first 20 rows, and never
    `tools`: each of these files passed it."""
    rows = [_task(i) for i in range(30)]
    rows[line - 1] = bad
    touch(tmp_path, "/d.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    try:
        samples = _slime_dataset(commit, tmp_path / "d.jsonl")
    except (AssertionError, AttributeError, json.JSONDecodeError):
        pass  # in the pods: the job stops at its first data load
    else:
        with pytest.raises(TypeError, match="metadata must be a JSON object"):
            inputs_from_slime([[samples[line - 1]]])  # the train step that draws it
    (problem,) = preflight.check_jsonl(tmp_path, "spec.data.train", "/d.jsonl")
    assert problem.startswith(f"spec.data.train: /d.jsonl line {line}: {says}")


@pytest.mark.parametrize("commit", slime_rows())
def test_a_row_that_is_not_utf8_is_named(tmp_path: Path, commit: str) -> None:
    """slime reads the train file as UTF-8 and stops the job at a Latin-1 row; the
    preflight stopped the launcher with a UnicodeDecodeError traceback instead of naming
    the file, the row and the fix (and reported none of the launch's other problems)."""
    latin1 = json.dumps(_task(2), ensure_ascii=False).replace("task", "t\u00e2che")
    data = f"{ROW}\n{ROW}\n".encode() + latin1.encode("latin-1") + f"\n{ROW}\n".encode()
    (tmp_path / "d.jsonl").write_bytes(data)
    with pytest.raises(UnicodeDecodeError):
        _slime_dataset(commit, tmp_path / "d.jsonl")
    (problem,) = preflight.check_jsonl(tmp_path, "spec.data.train", "/d.jsonl")
    assert problem.startswith("spec.data.train: /d.jsonl line 3: not UTF-8 text (byte 0xe2)")
    assert "re-encode the file as UTF-8" in problem


def test_a_file_of_bad_rows_lists_five_and_counts_the_rest(tmp_path: Path) -> None:
    touch(tmp_path, "/d.jsonl", f"{ROW}\n" + '{"prompt": "q"}\n' * 8)
    problems = preflight.check_jsonl(tmp_path, "spec.data.train", "/d.jsonl")
    assert [p.split(":", 2)[1] for p in problems[:5]] == [
        f" /d.jsonl line {n}" for n in range(2, 7)
    ]
    assert problems[5].startswith("spec.data.train: /d.jsonl: 3 more bad row(s) after these")
    assert len(problems) == 6


def _checkpoint_with_template(root: Path, where: str) -> Path:
    """A Qwen-style HF checkpoint directory: config.json, tokenizer.json and a
    tokenizer_config.json holding its chat template."""
    from tests.support.tiny_tokenizer import write_checkpoint

    directory = write_checkpoint(root / where.lstrip("/"))
    (directory / "config.json").write_text("{}", encoding="utf-8")
    return directory


@pytest.mark.parametrize("where", ["tokenizer_config.json", "chat_template.jinja", "none"])
def test_the_default_family_needs_the_checkpoint_s_chat_template(
    tmp_path: Path, where: str
) -> None:
    """rendererFamily default: the gateway renders with the checkpoint's chat template and
    refuses to start without one (its own load_renderer, on transformers), at the first
    rollout, after the engines and the trainer are up. The preflight passed a checkpoint
    without one; it now refuses exactly what the gateway refuses."""
    from agentrl.bundle.gateway.tokenizer import load_renderer

    _good_tree(tmp_path)
    model = _checkpoint_with_template(tmp_path, "/models/Qwen2.5-7B-Instruct")
    config = model / "tokenizer_config.json"
    body = json.loads(config.read_text(encoding="utf-8"))
    template = body.pop("chat_template")
    if where != "tokenizer_config.json":
        config.write_text(json.dumps(body), encoding="utf-8")
    if where == "chat_template.jinja":
        (model / where).write_text(template, encoding="utf-8")
    spec = _spec(model={**_spec().model.model_dump(by_alias=True, exclude_none=True),
                        "rendererFamily": "default"})  # fmt: skip
    problems = preflight.run_all(tmp_path, spec, visible_gpus=None)
    if where != "none":
        load_renderer(str(model), "default", "qwen25")  # the gateway starts
        assert problems == []
        return
    with pytest.raises(ValueError, match="has no chat template"):
        load_renderer(str(model), "default", "qwen25")
    (problem,) = problems
    assert problem.startswith(
        "spec.model.rendererFamily: default renders prompts with the chat template of "
        "/models/Qwen2.5-7B-Instruct, which has none (no `chat_template` in its "
        "tokenizer_config.json, no chat_template.jinja, no additional_chat_templates/)"
    )
    assert "set spec.model.rendererFamily to the model's family" in problem
    named = spec.model.model_copy(update={"renderer_family": "qwen2.5"})
    assert preflight.check_chat_template(tmp_path, spec.model_copy(update={"model": named})) == []


@pytest.mark.parametrize("family", ["qwen3", "default"])
def test_a_checkpoint_without_its_tokenizer_is_refused(tmp_path: Path, family: str) -> None:
    """The weights and config.json copied without the tokenizer files: the gateway cannot
    start on it (its own load_renderer, at the first rollout), and transformers'
    AutoTokenizer, which slime's data source and SGLang load it with, gives no vocabulary
    (transformers 5) or raises. The preflight passed it."""
    from transformers import AutoTokenizer

    from agentrl.bundle.gateway.tokenizer import load_renderer

    _good_tree(tmp_path)
    model = tmp_path / "models/Qwen2.5-7B-Instruct"
    qwen2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
    (model / "config.json").write_text(json.dumps(qwen2), encoding="utf-8")
    spec = _spec(model={**_spec().model.model_dump(by_alias=True, exclude_none=True),
                        "rendererFamily": family})  # fmt: skip
    assert preflight.run_all(tmp_path, spec, visible_gpus=None) == []
    load_renderer(str(model), family, "qwen25")  # the gateway starts
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).unlink()
    with pytest.raises((AssertionError, ValueError, OSError)):
        load_renderer(str(model), family, "qwen25")
    try:
        tok = AutoTokenizer.from_pretrained(str(model), trust_remote_code=True)
    except (OSError, ValueError, TypeError):
        pass  # transformers 4 raises
    else:
        assert tok.encode("What is 6*7?", add_special_tokens=False) == []
    problem, *template = preflight.run_all(tmp_path, spec, visible_gpus=None)
    assert [t.split(":")[0] for t in template] == ["spec.model.rendererFamily"] * (
        family == "default"
    )
    assert problem.startswith(
        "spec.model.path: /models/Qwen2.5-7B-Instruct holds no tokenizer vocabulary (no "
        "tokenizer.json, vocab.json, vocab.txt, *.model or *.tiktoken file)"
    )
    assert "copy the checkpoint's tokenizer files" in problem


_HUB_LOAD = """
import json, sys
from huggingface_hub import snapshot_download
try:
    print(json.dumps(snapshot_download(sys.argv[1], local_files_only=True)))
except Exception as e:
    print(json.dumps(f"{type(e).__name__}: {e}"))
"""
HUB_ID = "Qwen/Qwen2.5-7B-Instruct"


def _hub_load(env: dict[str, str]) -> str:
    """huggingface_hub's own resolution of HUB_ID in a process with `env` (the hub cache
    only, as SGLang and transformers read it offline)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _HUB_LOAD, HUB_ID], env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return str(json.loads(done.stdout.splitlines()[-1]))


def _fill_cache(cache: Path, commit: str = "1" * 40) -> None:
    """huggingface_hub's cache layout for HUB_ID: refs/main names a snapshot folder."""
    repo = cache / f"models--{HUB_ID.replace('/', '--')}"
    touch(repo, "/refs/main", commit)
    touch(repo, f"/snapshots/{commit}/config.json", "{}")


@pytest.mark.parametrize(
    "pod_env",
    [
        {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": "{root}/hub-cache"},
        {"TRANSFORMERS_OFFLINE": "yes", "HF_HOME": "{root}/hf"},
        {"HF_HUB_OFFLINE": "True", "HOME": "{root}/home"},
    ],
)
def test_a_hub_id_in_pods_kept_off_the_hub_needs_the_cache(
    tmp_path: Path, pod_env: dict[str, str]
) -> None:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) in the pods: huggingface_hub reads the model
    from its cache only, and without a snapshot there SGLang's engines and the gateway fail
    to load it once the gang is up. The preflight passed it (a warning that every pod
    downloads it); it now refuses exactly what huggingface_hub cannot resolve."""
    env = {k: v.format(root=tmp_path) for k, v in pod_env.items()}
    env.setdefault("HOME", str(tmp_path / "nobody"))
    spec = experiment(example_doc(EXAMPLE_C)).spec  # path: the hub id, refLoad: a directory
    assert spec.model.path == HUB_ID
    assert "LocalEntryNotFoundError" in _hub_load(env)
    (problem,) = preflight.check_offline_hub(Path("/"), spec, env)
    cache = preflight.hub_cache(env)
    assert problem.startswith(f"spec.model.path: {HUB_ID!r} is a Hugging Face id, and ")
    assert f"the hub cache {cache} holds no snapshot of it" in problem
    _fill_cache(Path(cache))
    assert _hub_load(env).startswith(f"{cache}/models--Qwen--Qwen2.5-7B-Instruct/snapshots/")
    assert preflight.check_offline_hub(Path("/"), spec, env) == []
    online = {k: v for k, v in env.items() if not k.endswith("OFFLINE")}
    (Path(cache) / "models--Qwen--Qwen2.5-7B-Instruct/refs/main").unlink()
    assert preflight.check_offline_hub(Path("/"), spec, online) == []  # it downloads


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"HF_HUB_OFFLINE": "1"},
        {"HF_HUB_OFFLINE": "on"},
        {"HF_HUB_OFFLINE": "0"},
        {"HF_HUB_OFFLINE": " 1"},
        {"TRANSFORMERS_OFFLINE": "Yes"},
        {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "true"},
        {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"},
    ],
)
def test_offline_is_read_as_huggingface_hub_reads_it(env: dict[str, str]) -> None:
    import subprocess
    import sys

    code = "from huggingface_hub import constants; print(constants.HF_HUB_OFFLINE)"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"HOME": "/nonexistent", **env},
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert (preflight.hub_offline(env) is not None) == (done.stdout.strip() == "True")


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
    assert found is not None and found.tracker_mtime_ns is not None and found.mark is None
    assert (found.tracker, found.entries) == ("10\n", ("iter_0000010", TRACKER))
    assert preflight.read_checkpoint(tmp_path, _spec(checkpoint={})) == (None, [])


def _save(root: Path, iteration: int, mtime_ns: int) -> None:
    """What a Megatron save leaves: the iteration's directory, then the tracker naming it."""
    touch(root, f"/ckpt/run/iter_{iteration:07d}/common.pt")
    tracker = touch(root, f"/ckpt/run/{TRACKER}", f"{iteration}\n")
    os.utime(tracker, ns=(mtime_ns, mtime_ns))


def test_resume_false_leaves_another_run_s_saves_out_but_a_retry_resumes_its_own(
    tmp_path: Path,
) -> None:
    """checkpoint.resume: false made every start a first run: a KubeRay retry (backoffLimit)
    or a resume after a suspend of the same experiment started from the model at rollout 0
    and saved over the checkpoints its earlier attempts had made. The launcher now marks the
    directory at the experiment's first start and resumes a save made since; another
    experiment's saves are still left out, as resume: false says."""
    spec = _spec(checkpoint={"path": "/ckpt/run", "saveInterval": 5, "resume": False})
    _save(tmp_path, 20, 1_000)  # an earlier experiment's run

    def start(uid: str) -> slimecmd.Decision:
        found, problems = preflight.read_checkpoint(tmp_path, spec)
        assert problems == []
        decision = slimecmd.decide(spec, found, uid)
        if decision.mark is not None:  # as the launcher does before slime starts
            preflight.write_run_mark(tmp_path, spec, decision.mark)
        return decision

    first = start("uid-a")
    assert first.start is Start.FIRST_RUN and first.warning and "did not make" in first.warning
    assert (tmp_path / "ckpt/run" / RUN_MARK).is_file()
    assert start("uid-a").start is Start.FIRST_RUN  # attempt 1 died before its first save
    _save(tmp_path, 5, 2_000)
    retry = start("uid-a")
    assert (retry.start, retry.iteration, retry.problem) == (Start.RESUME, "5", None)
    facts = PodFacts(model_args=[], train_env={}, start=retry.start, hf_mode_flag=False)
    argv = slimecmd.compose(spec, facts).argv()
    assert argv[argv.index("--load") + 1] == "/ckpt/run" and "--finetune" not in argv
    _save(tmp_path, 20, 3_000)  # its own save at the iteration the other run's tracker named
    assert start("uid-a").iteration == "20"
    # Another experiment on the directory: resume: false leaves uid-a's run out.
    other = start("uid-b")
    assert other.start is Start.FIRST_RUN and other.mark is not None
    assert start("uid-b").start is Start.FIRST_RUN


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
    the preflight used to look at the first 20 rows only."""
    _good_tree(tmp_path)
    spec = _spec()
    dev = spec.data.eval[0]
    touch(tmp_path, dev.path, "\n".join([ROW] * 24 + ["{not json", ROW]) + "\n")
    with pytest.raises(ValueError, match=r"dev.jsonl:25: not valid JSON"):  # the rollout's reader
        load_eval_groups(dev.model_copy(update={"path": str(tmp_path) + dev.path}), "eval")
    (problem,) = preflight.run_all(tmp_path, spec, visible_gpus=None)
    assert problem.startswith(f"spec.data.eval[0].path: {dev.path} line 25: not JSON")


def _train_prompts(root: Path, spec: RLExperimentSpec) -> list[tuple[int, Any]]:
    """The train rows' (line, prompt), read in the row check's one pass, as the launcher does."""
    prompts: list[tuple[int, Any]] = []
    assert preflight.check_data(root, spec, prompts) == []
    return prompts


@pytest.mark.parametrize("commit", slime_rows())
@pytest.mark.parametrize(("flag", "value"), [("--rollout-max-prompt-len", 12),
                                             ("--rollout-max-context-len", 13)])  # fmt: skip
def test_train_rows_slime_drops_for_a_long_prompt_are_counted_and_all_dropped_refused(
    tmp_path: Path, commit: str, flag: str, value: int
) -> None:
    """slime's Dataset drops, when the job starts, every train row whose prompt is longer
    than --rollout-max-prompt-len tokens (--rollout-max-context-len less one when that is
    unset), and logs the count at info level: the run trained on fewer rows than the user
    gave, without a word. The preflight now counts them as slime's own Dataset does, with
    the checkpoint's tokenizer, and refuses a file slime would empty."""
    from transformers import AutoTokenizer

    _good_tree(tmp_path)
    words = [1, 9, 2, 30, 3]  # "word " x n: 3 tokens a word, 1 the last space
    rows = [{"prompt": "word " * n, "metadata": {"i": i}} for i, n in enumerate(words)]
    train = touch(tmp_path, "/data/web/train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    spec = _spec()
    extra = [*spec.runtime.extra_args, flag, str(value)]
    spec = spec.model_copy(update={"runtime": spec.runtime.model_copy(
        update={"extra_args": extra})})  # fmt: skip
    checkpoint = tmp_path / "models/Qwen2.5-7B-Instruct"
    kept = data_module(commit).Dataset(
        str(train), tokenizer=AutoTokenizer.from_pretrained(str(checkpoint)), processor=None,
        max_length=12, prompt_key="prompt", metadata_key="metadata", label_key=None,
        tool_key="tools",
    ).samples  # fmt: skip
    dropped = [i + 1 for i, r in enumerate(rows) if r["metadata"] not in
               [s.metadata for s in kept]]  # fmt: skip
    assert dropped == [2, 4]  # slime's own verdict on this file
    lengths = preflight.slime_prompt_lengths(tmp_path, "/models/Qwen2.5-7B-Instruct")
    problems, warnings = preflight.check_prompt_lengths(spec, _train_prompts(tmp_path, spec),
                                                        lengths)  # fmt: skip
    assert problems == []
    (warning,) = warnings
    assert warning.startswith(f"spec.runtime.extraArgs: {flag} {value}: slime's Dataset drops")
    assert "longer than 12 tokens" in warning and "2 of 5 rows" in warning
    assert "at lines 2 (28 tokens), 4 (91 tokens):" in warning

    touch(tmp_path, "/data/web/train.jsonl", "".join(json.dumps(r) + "\n" for r in rows[3:4]))
    problems, warnings = preflight.check_prompt_lengths(spec, _train_prompts(tmp_path, spec),
                                                        lengths)  # fmt: skip
    assert warnings == [] and len(problems) == 1
    assert "every row, nothing is left to train on; raise or remove the flag" in problems[0]
