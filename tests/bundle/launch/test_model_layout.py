"""Layers and experts against the parallelism, proved with slime's own parse_args at each row.

The launcher runs in a temporary pod (launch_pod, the Qwen2.5-7B example: 28 layers, no
experts) and records the argv it execs train.py with; each case adds parallelism flags the
way spec.runtime.extraArgs does (last, so they win) and hands the argv to slime's own
`parse_args` (tests/support/upstream_site/slime_run.py), which runs Megatron's
`validate_args`. agentrl's rule (agentrl.api.model_layout), on the admission table and on the
row's own script, refuses exactly the cases slime stops on; the launcher refuses them before
slime starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_pod import Pod, slime_upstream

from agentrl.api import model_layout
from agentrl.api.slime_flags import EXTRA_ARGS_ORIGIN
from agentrl.api.upstream_names import MODEL_LAYOUT_ARGS
from agentrl.bundle.launch import probe

ROWS = slime_upstream.ROWS
pytestmark = pytest.mark.slow  # launches the launcher and runs slime's parser

TP1 = ["--tensor-model-parallel-size", "1"]
# (extraArgs, what Megatron stops with; None: it takes them)
CASES: list[tuple[list[str], str | None]] = [
    ([], None),
    (["--pipeline-model-parallel-size", "2"], None),
    ([*TP1, "--pipeline-model-parallel-size", "4"], None),
    ([*TP1, "--pipeline-model-parallel-size", "8"], "Number of layers should be divisible"),
    ([*TP1, "--pipeline-model-parallel-size", "8", "--decoder-first-pipeline-num-layers", "1",
      "--decoder-last-pipeline-num-layers", "3"], None),
    (["--expert-model-parallel-size", "2"], "num_experts must be non None"),
    # slime's placeholder --seq-length 4096 does not split into 2 x 3 chunks; 6144 does
    (["--actor-num-gpus-per-node", "6", "--tensor-model-parallel-size", "2",
      "--context-parallel-size", "3"], "seq-length should be a multiple of 2 * context"),
    (["--actor-num-gpus-per-node", "6", "--tensor-model-parallel-size", "2",
      "--context-parallel-size", "3", "--seq-length", "6144"], None),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS)
def test_the_rule_refuses_what_megatron_stops_on(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    results = slime_upstream.run_slime(row, [{"argv": [*argv, *x], "env": env} for x, _ in CASES])

    spec = pod.exp.spec
    model_type, par = spec.model.type, spec.resources.parallelism
    script = probe.model_args(str(slime_upstream.slime_dir(row)), model_type)
    for (extra, stops), result in zip(CASES, results, strict=True):
        error = result.get("parse_error")
        if stops is None:
            assert error is None, (extra, result.get("trace"))
        else:
            assert error and stops in error, (extra, result)
        for model_args in (script, MODEL_LAYOUT_ARGS[model_type]):
            runs = model_layout.spec_runs(model_type, model_args, par.pipeline, par.expert, extra)
            found = model_layout.judge(runs, model_type)
            assert bool(found) == (stops is not None), (extra, found)
            assert all(p.path == EXTRA_ARGS_ORIGIN for p in found)


# (extraArgs, what Megatron's TransformerConfig raises when slime builds the model; None: it
# builds). Qwen2.5-7B: 28 attention heads, 4 key/value heads; validate_args takes all three.
CONFIG_CASES: list[tuple[list[str], str | None]] = [
    ([], None),
    (["--tensor-model-parallel-size", "8"],
     "num_attention_heads (28) must be a multiple of tensor_model_parallel_size (8)"),
    (["--actor-num-gpus-per-node", "7", "--tensor-model-parallel-size", "7"],
     "num_query_groups (4) must be a multiple or divisor of tensor_model_parallel_size (7)"),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS)
def test_the_rule_refuses_what_transformer_config_raises(row: str, tmp_path: Path) -> None:
    """slime's parse_args, then Megatron's own core_transformer_config_from_args on its args
    (what slime's model provider runs on every Megatron actor once the gang is up)."""
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    cases = [{"argv": [*argv, *x], "env": env, "config": True} for x, _ in CONFIG_CASES]
    results = slime_upstream.run_slime(row, cases)

    spec = pod.exp.spec
    model_type, par = spec.model.type, spec.resources.parallelism
    script = probe.model_args(str(slime_upstream.slime_dir(row)), model_type)
    for (extra, raises), result in zip(CONFIG_CASES, results, strict=True):
        assert result.get("parse_error") is None, (extra, result.get("trace"))
        error = result["config_error"]
        assert (error is None) if raises is None else (error and raises in error), (extra, error)
        for model_args in (script, MODEL_LAYOUT_ARGS[model_type]):
            runs = model_layout.spec_runs(
                model_type, model_args, par.pipeline, par.expert, extra, tensor=par.tensor
            )
            found = model_layout.judge(runs, model_type)
            assert [p.path for p in found] == ([] if raises is None else [EXTRA_ARGS_ORIGIN])
            assert all(raises in p.message for p in found), (extra, found)


# (extraArgs, the tensor size slime starts each SGLang engine with, whether SGLang's attention
# layer asserts on it for Qwen2.5-7B: 28 heads, 4 key/value heads; sglang/srt/models/qwen2.py
# at v0.5.13 L128-L138, v0.5.15.post1 L127-L137)
ENGINE_CASES: list[tuple[list[str], int, bool]] = [
    ([], 2, False),
    (["--rollout-num-gpus-per-engine", "8"], 8, True),
    (["--rollout-num-gpus-per-engine", "8", "--sglang-pipeline-parallel-size", "2"], 4, False),
]


@pytest.mark.parametrize("row", ROWS)
def test_the_engine_rule_judges_the_tensor_size_slime_gives_sglang(
    row: str, tmp_path: Path
) -> None:
    """slime's parse_args takes rolloutGpusPerEngine 8 for a 28-head model, and its own
    `_compute_server_args` starts every engine with tp_size 8, which SGLang's attention layer
    refuses when the engine loads the model (that model code needs the GPU stack, so here it
    is its assertion, cited above). The rule judges the same tensor size."""
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    cases = [{"argv": [*argv, *x], "env": env, "engine": True} for x, _, _ in ENGINE_CASES]
    results = slime_upstream.run_slime(row, cases)

    spec = pod.exp.spec
    model_type, res = spec.model.type, spec.resources
    par = res.parallelism
    script = probe.model_args(str(slime_upstream.slime_dir(row)), model_type)
    for (extra, tp, fails), result in zip(ENGINE_CASES, results, strict=True):
        assert result.get("parse_error") is None, (extra, result.get("trace"))
        assert result["engine"]["tp_size"] == tp, (extra, result["engine"])
        for model_args in (script, MODEL_LAYOUT_ARGS[model_type]):
            runs = model_layout.spec_runs(
                model_type, model_args, par.pipeline, par.expert, extra, tensor=par.tensor,
                rollout_gpus_per_engine=res.rollout_gpus_per_engine,
            )  # fmt: skip
            found = model_layout.judge(runs, model_type)
            assert [p.path for p in found] == ([EXTRA_ARGS_ORIGIN] if fails else []), found
            assert all(f"SGLang tensor parallelism {tp} " in p.message for p in found), found


# The Hugging Face config slime checks gpt-oss-20B's MODEL_ARGS against (openai/gpt-oss-20b's
# numbers that slime's _hf_validate_args reads).
GPT_OSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "num_attention_heads": 64, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
    "num_experts_per_tok": 4, "tie_word_embeddings": False, "rms_norm_eps": 1e-05,
    "rope_theta": 150000, "vocab_size": 201088, "sliding_window": 128,
    "max_position_embeddings": 131072,
}  # fmt: skip
# (extraArgs after the example's tensor 4, what TransformerConfig raises; None: it builds)
BIAS_CASES: list[tuple[list[str], str | None]] = [
    ([], "Bias in Moe is only supported when ETP==1"),
    (["--expert-tensor-parallel-size", "1"], None),
    (["--tensor-model-parallel-size", "1"], None),
]


def test_the_rule_refuses_experts_with_biases_as_transformer_config_does(tmp_path: Path) -> None:
    """gpt-oss-20B (slime fa3c990 only): its own MODEL_ARGS in place of the example's, through
    slime's parse_args and Megatron's core_transformer_config_from_args."""
    row = "fa3c990"
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    hf = tmp_path / "gpt-oss"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps(GPT_OSS_CONFIG))
    rest = argv[argv.index("--actor-num-nodes") :]
    for flag in ("--hf-checkpoint", "--ref-load"):
        rest[rest.index(flag) + 1] = str(hf)
    script = probe.model_args(str(slime_upstream.slime_dir(row)), "gpt-oss-20B")
    cases = [{"argv": [*script, *rest, *x], "env": env, "config": True} for x, _ in BIAS_CASES]
    results = slime_upstream.run_slime(row, cases)

    par = pod.exp.spec.resources.parallelism
    for (extra, raises), result in zip(BIAS_CASES, results, strict=True):
        assert result.get("parse_error") is None, (extra, result.get("trace"))
        error = result["config_error"]
        assert (error is None) if raises is None else (error and raises in error), (extra, error)
        for model_args in (script, MODEL_LAYOUT_ARGS["gpt-oss-20B"]):
            runs = model_layout.spec_runs(
                "gpt-oss-20B", model_args, par.pipeline, par.expert, extra, tensor=par.tensor
            )
            found = model_layout.judge(runs, "gpt-oss-20B")
            assert bool(found) == (raises is not None), (extra, found)
            assert all(raises and raises in p.message for p in found), found


def test_the_launcher_refuses_before_slime_starts(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=[*TP1, "--pipeline-model-parallel-size", "8"])
    done = pod.launch()
    assert done.returncode == 2
    assert (
        "spec.runtime.extraArgs: pipeline parallelism 8 does not divide the 28 layers of "
        "model.type 'qwen2.5-7B'" in done.stderr
    )
    assert not pod.record.exists()  # slime never started


def test_the_launcher_refuses_an_engine_size_sglang_cannot_load_the_model_with(
    tmp_path: Path,
) -> None:
    pod = Pod(tmp_path, extra_args=["--rollout-num-gpus-per-engine", "8"])
    done = pod.launch()
    assert done.returncode == 2
    assert (
        "spec.runtime.extraArgs: SGLang tensor parallelism 8 (rolloutGpusPerEngine 8) does not "
        "divide the 28 attention heads of model.type 'qwen2.5-7B'" in done.stderr
    )
    assert not pod.record.exists()  # slime never started
