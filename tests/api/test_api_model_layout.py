"""spec.resources.parallelism against the layers and experts of model.type
(agentrl.api.model_layout): what Megatron's validate_args asserts when slime starts, refused
at admission. slime's own parse_args agrees case by case in
tests/bundle/launch/test_model_layout.py (upstream tier)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from tests.conftest import ROOT, minimal_body
from tests.support import slime_upstream
from tests.support.shared import require

from agentrl.api import model_layout
from agentrl.api.upstream_names import MODEL_LAYOUT_ARGS
from agentrl.api.validation import parse_experiment

GENERATOR = ROOT / "hack" / "gen-upstream-names.py"


def _problems(model_type: str, parallelism: dict[str, int], extra_args: list[str] | None = None,
              slime_dir: str | None = None, **resources: Any) -> list[str]:  # fmt: skip
    parallelism = dict(parallelism)
    nodes = parallelism.pop("nodes", 4)
    runtime: dict[str, Any] = {"extraArgs": extra_args or []}
    if slime_dir:
        runtime["slimeDir"] = slime_dir
    body = minimal_body(
        model={"path": "Qwen/Q", "refLoad": "/models/q", "type": model_type},
        resources={"nodes": nodes, "gpusPerNode": 8, "parallelism": {"tensor": 1, **parallelism},
                   **resources},
        grpo={"numRollouts": 10, "rolloutBatchSize": 32, "samplesPerPrompt": 8,
              "globalBatchSize": 64},
        runtime=runtime,
    )  # fmt: skip
    return [str(p) for p in parse_experiment(body)[1]]


def _layout(found: list[str]) -> list[str]:
    paths = [p.removeprefix("warning: ").split(":")[0] for p in found]
    return [p for p, at in zip(found, paths, strict=True) if "parallel" in at or "extraArgs" in at]


def test_the_generator_reads_the_flags_the_rule_judges() -> None:
    spec = importlib.util.spec_from_file_location("gen_upstream_names", GENERATOR)
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert set(gen.LAYOUT_VALUE_FLAGS + gen.LAYOUT_SWITCHES) == set(model_layout.SCRIPT_FLAGS)


def test_every_supported_model_type_has_its_layers() -> None:
    assert MODEL_LAYOUT_ARGS["qwen2.5-3B"] == (
        "--num-layers", "36", "--num-attention-heads", "16", "--disable-bias-linear",
        "--group-query-attention", "--num-query-groups", "2",
    )  # fmt: skip
    assert MODEL_LAYOUT_ARGS["qwen3-30B-A3B"] == (
        "--disable-bias-linear", "--group-query-attention", "--num-attention-heads", "32",
        "--num-query-groups", "4", "--num-layers", "48", "--num-experts", "128",
    )  # fmt: skip
    # the one mixture-of-experts script whose experts have biases
    assert "--disable-bias-linear" not in MODEL_LAYOUT_ARGS["gpt-oss-20B"]
    # Latent attention (no query groups): its key/value heads are not the rule's business.
    assert "--num-query-groups" not in MODEL_LAYOUT_ARGS["deepseek-v3"]
    assert all("--num-layers" in args for args in MODEL_LAYOUT_ARGS.values())
    assert all("--num-attention-heads" in args for args in MODEL_LAYOUT_ARGS.values())


@pytest.mark.parametrize(
    ("model_type", "parallelism", "words"),
    [
        ("qwen2.5-3B", {"pipeline": 8}, "spec.resources.parallelism.pipeline: pipeline "
         "parallelism 8 does not divide the 36 layers of model.type 'qwen2.5-3B'"),
        ("deepseek-v3", {"pipeline": 2}, "spec.resources.parallelism.pipeline: pipeline "
         "parallelism 2 does not divide the 61 layers"),
        ("qwen2.5-7B", {"expert": 2}, "spec.resources.parallelism.expert: expert parallelism 2 "
         "needs a mixture-of-experts model, and model.type 'qwen2.5-7B' has no experts"),
        ("glm4.5-355B-A32B", {"expert": 64, "nodes": 8}, "spec.resources.parallelism.expert: "
         "expert parallelism 64 does not divide the 160 experts"),
        # 8 GPUs divide by tensor 8: only the model's 28 heads do not.
        ("qwen2.5-7B", {"tensor": 8}, "spec.resources.parallelism.tensor: tensor parallelism 8 "
         "does not divide the 28 attention heads of model.type 'qwen2.5-7B'"),
        ("glm4.7-30B-A3B", {"tensor": 8}, "spec.resources.parallelism.tensor: tensor "
         "parallelism 8 does not divide the 20 attention heads"),
    ],
)  # fmt: skip
def test_a_layout_megatron_stops_on_is_refused(
    model_type: str, parallelism: dict[str, int], words: str
) -> None:
    found = _layout(_problems(model_type, parallelism))
    assert [p for p in found if p.startswith(words)], found
    assert all(not p.startswith("warning") for p in found)


@pytest.mark.parametrize(
    ("model_type", "parallelism"),
    [
        ("qwen2.5-3B", {"pipeline": 4}),
        ("qwen3-32B", {"pipeline": 8}),
        ("qwen3-30B-A3B", {"expert": 8}),
        ("qwen2.5-7B", {}),
        ("qwen2.5-7B", {"tensor": 4}),
        ("qwen2.5-7B", {"tensor": 2}),
        ("qwen3-32B", {"tensor": 8}),
        ("deepseek-v3", {}),
    ],
)
def test_a_layout_megatron_takes_passes(model_type: str, parallelism: dict[str, int]) -> None:
    assert _layout(_problems(model_type, parallelism)) == []


def test_an_uneven_split_in_extra_args_is_left_to_megatron() -> None:
    uneven = ["--decoder-first-pipeline-num-layers", "1", "--decoder-last-pipeline-num-layers",
              "3"]  # fmt: skip
    assert _layout(_problems("qwen2.5-7B", {"pipeline": 8}, uneven)) == []


def test_extra_args_count_as_slime_reads_them() -> None:
    """The last occurrence wins, as in argparse; the message names where it came from."""
    over = _problems("qwen2.5-7B", {"pipeline": 2}, ["--pipeline-model-parallel-size", "3"])
    assert any(p.startswith("spec.runtime.extraArgs: pipeline parallelism 3") for p in over), over
    fixed = _problems("qwen2.5-7B", {"pipeline": 8}, ["--pipeline-model-parallel-size=4"])
    assert _layout(fixed) == []
    embedding = _problems("qwen2.5-7B", {"pipeline": 4},
                          ["--account-for-embedding-in-pipeline-split"])  # fmt: skip
    assert any("28 layers (+1: --account-for-embedding" in p for p in embedding), embedding


def test_tensor_parallelism_in_extra_args_is_judged_as_slime_reads_it() -> None:
    over = _problems("qwen2.5-7B", {"tensor": 4}, ["--tensor-model-parallel-size", "8"])
    assert any(
        p.startswith("spec.runtime.extraArgs: tensor parallelism 8 does not divide the 28")
        for p in over
    ), over
    assert _layout(_problems("qwen2.5-7B", {"tensor": 8}, ["--tensor-model-parallel-size=4"])) == []


def test_the_heads_rule_quotes_megatron_s_own_check() -> None:
    """Megatron's TransformerConfig raises it when slime builds the model on the GPU workers,
    after validate_args let the command line through (upstream tier: the pinned snapshot)."""
    source = require(
        slime_upstream.MEGATRON / "megatron/core/transformer/transformer_config.py",
        "Megatron-LM's snapshot",
    )
    text = source.read_text(encoding="utf-8")
    assert "if self.num_attention_heads % self.tensor_model_parallel_size != 0:" in text
    assert "must be a multiple of " in text and "tensor_model_parallel_size (" in text
    (problem,) = _layout(_problems("qwen2.5-7B", {"tensor": 8}))
    assert "'num_attention_heads (28) must be a multiple of tensor_model_parallel_size (8)'" in (
        problem
    )


# One node of 8, two GPUs kept for SGLang: training has 6, and tensor 6 divides them and the
# model's attention heads, but not its key/value heads, nor they it.
SPLIT_6 = {"nodes": 1, "colocate": False, "rolloutGpus": 2}


@pytest.mark.parametrize(
    ("model_type", "tensor", "groups"),
    [("qwen3.5-27B", 6, 4), ("glm4-32B", 6, 8), ("llama3.2-3B-Instruct", 3, 8)],
)
def test_a_tensor_size_the_key_value_heads_do_not_take_is_refused(
    model_type: str, tensor: int, groups: int
) -> None:
    found = _layout(_problems(model_type, {"tensor": tensor}, **SPLIT_6))
    assert len(found) == 1, found
    assert found[0].startswith(
        f"spec.resources.parallelism.tensor: tensor parallelism {tensor} neither divides nor is "
        f"a multiple of the {groups} key/value heads (query groups) of model.type "
        f"{model_type!r}; Megatron stops on it when slime builds the model ('num_query_groups "
        f"({groups}) must be a multiple or divisor of tensor_model_parallel_size ({tensor})') "
        "(use a tensor size of 1, 2, 4, 8"
    ), found


def test_a_tensor_size_that_replicates_the_key_value_heads_passes() -> None:
    """Qwen3.5-27B has 24 attention heads and 4 key/value heads: tensor 8 and 12 give each
    rank 3 or 2 attention heads and share each key/value head among 2 or 3 ranks, which
    Megatron takes (12 spans two nodes of 8: a warning, not an error)."""
    assert _layout(_problems("qwen3.5-27B", {"tensor": 8}, nodes=1)) == []
    twelve = _layout(_problems("qwen3.5-27B", {"tensor": 12}, nodes=3))
    assert twelve and all(p.startswith("warning: ") for p in twelve), twelve


def test_the_query_groups_rule_quotes_megatron_s_own_check() -> None:
    """Megatron's TransformerConfig raises it right after the heads check (upstream tier)."""
    source = require(
        slime_upstream.MEGATRON / "megatron/core/transformer/transformer_config.py",
        "Megatron-LM's snapshot",
    )
    text = source.read_text(encoding="utf-8")
    assert "self.num_query_groups % self.tensor_model_parallel_size != 0" in text
    assert "and self.tensor_model_parallel_size % self.num_query_groups != 0" in text
    assert "must be a multiple or divisor of " in text


def test_a_context_size_slime_s_sequence_length_does_not_split_into_is_refused() -> None:
    """slime sets --seq-length 4096 when none is given, and Megatron wants 2 x context chunks
    of it: context 3 on 24 GPUs (tensor 2) passes every GPU count and stops slime."""
    found = _layout(_problems("qwen2.5-7B", {"nodes": 3, "tensor": 2, "context": 3}))
    assert len(found) == 1 and found[0].startswith(
        "spec.resources.parallelism.context: context parallelism 3 needs a sequence length "
        "that is a multiple of 2 x 3, and slime's is 4096, slime's placeholder; Megatron stops "
        "on it when slime starts"
    ), found
    over = _layout(_problems("qwen2.5-7B", {"nodes": 3, "tensor": 2},
                             ["--context-parallel-size", "3"]))  # fmt: skip
    assert any(p.startswith("spec.runtime.extraArgs: context parallelism 3") for p in over), over


@pytest.mark.parametrize(
    ("parallelism", "extra_args"),
    [({"nodes": 3, "tensor": 2, "context": 3}, ["--seq-length", "6144"]),
     ({"nodes": 4, "tensor": 2, "context": 4}, []),
     ({"nodes": 4, "tensor": 1, "context": 32}, [])],
)  # fmt: skip
def test_a_context_size_the_sequence_length_splits_into_passes(
    parallelism: dict[str, int], extra_args: list[str]
) -> None:
    assert _layout(_problems("qwen2.5-7B", parallelism, extra_args)) == []


def test_experts_with_biases_and_tensor_parallelism_are_refused() -> None:
    """gpt-oss-20B's experts have biases (no --disable-bias-linear), which Megatron's
    TransformerConfig takes only with expert tensor parallelism 1; that follows tensor."""
    (found,) = _layout(_problems("gpt-oss-20B", {"nodes": 1, "tensor": 2}))
    assert found.startswith(
        "spec.resources.parallelism.tensor: model.type 'gpt-oss-20B' is a mixture-of-experts "
        "model whose experts have biases (its script has no --disable-bias-linear), which "
        "Megatron takes only with expert tensor parallelism 1, and expert tensor parallelism "
        "is 2 (it follows tensor parallelism unless set)"
    ), found
    assert "(add --expert-tensor-parallel-size 1 to spec.runtime.extraArgs" in found
    over = _layout(_problems("gpt-oss-20B", {"nodes": 1}, ["--expert-tensor-parallel-size=2"]))
    assert [p.split(":")[0] for p in over] == ["spec.runtime.extraArgs"], over


@pytest.mark.parametrize(
    ("model_type", "tensor", "extra_args"),
    [("gpt-oss-20B", 2, ["--expert-tensor-parallel-size", "1"]),
     ("gpt-oss-20B", 1, []),
     ("qwen3-30B-A3B", 2, [])],  # no biases
)  # fmt: skip
def test_experts_megatron_takes_pass(model_type: str, tensor: int, extra_args: list[str]) -> None:
    assert _layout(_problems(model_type, {"nodes": 1, "tensor": tensor}, extra_args)) == []


def _engine(found: list[str]) -> list[str]:
    return [p for p in found if "SGLang tensor parallelism" in p]


@pytest.mark.parametrize(
    ("model_type", "per_engine", "heads"),
    [("qwen2.5-7B", 8, 28), ("glm4.7-30B-A3B", 8, 20), ("qwen2.5-0.5B", 4, 14)],
)
def test_an_engine_size_sglang_cannot_load_the_model_with_is_refused(
    model_type: str, per_engine: int, heads: int
) -> None:
    """slime starts every SGLang engine with tp_size = rolloutGpusPerEngine, and SGLang's
    attention layer asserts it divides the heads when the engine loads the model."""
    found = _engine(_problems(model_type, {}, rolloutGpusPerEngine=per_engine))
    assert len(found) == 1 and found[0].startswith(
        f"spec.resources.rolloutGpusPerEngine: SGLang tensor parallelism {per_engine} "
        f"(rolloutGpusPerEngine {per_engine}) does not divide the {heads} attention heads of "
        f"model.type {model_type!r}; every rollout engine fails to load the model"
    ), found


def test_an_engine_size_the_key_value_heads_do_not_take_is_refused() -> None:
    # Qwen3.5-27B: 24 heads, 4 key/value heads; engines of 6 on 24 GPUs.
    found = _engine(_problems("qwen3.5-27B", {"nodes": 3}, rolloutGpusPerEngine=6))
    assert len(found) == 1 and found[0].startswith(
        "spec.resources.rolloutGpusPerEngine: SGLang tensor parallelism 6 (rolloutGpusPerEngine "
        "6) neither divides nor is a multiple of the 4 key/value heads of model.type "
        "'qwen3.5-27B'"
    ), found
    assert "gives an SGLang tensor size of 1, 2, 4, 8, 12, 24)" in found[0], found


@pytest.mark.parametrize(
    ("model_type", "per_engine", "extra_args"),
    [
        ("qwen2.5-7B", 4, []),
        ("qwen2.5-7B", 1, []),
        ("qwen3.5-27B", 8, []),  # 4 key/value heads, each over 2 ranks
        ("qwen2.5-7B", 8, ["--sglang-pipeline-parallel-size", "2"]),  # tensor 4
        # SGLang splits attention itself: left to it
        ("qwen2.5-7B", 8, ["--sglang-enable-dp-attention", "--sglang-dp-size", "2"]),
    ],
)
def test_an_engine_size_sglang_takes_passes(
    model_type: str, per_engine: int, extra_args: list[str]
) -> None:
    assert _engine(_problems(model_type, {}, extra_args, rolloutGpusPerEngine=per_engine)) == []


def test_an_engine_size_in_extra_args_is_judged_as_slime_reads_it() -> None:
    over = _engine(_problems("qwen2.5-7B", {}, ["--rollout-num-gpus-per-engine=8"]))
    assert len(over) == 1 and over[0].startswith("spec.runtime.extraArgs: SGLang tensor "), over
    fixed = ["--rollout-num-gpus-per-engine", "4"]
    assert _engine(_problems("qwen2.5-7B", {}, fixed, rolloutGpusPerEngine=8)) == []


def test_an_own_slime_makes_it_a_warning() -> None:
    found = _layout(_problems("qwen2.5-7B", {"expert": 2}, slime_dir="/opt/slime"))
    assert found and all(p.startswith("warning: spec.resources.parallelism.expert") for p in found)


def test_the_examples_pass(example_body: dict[str, Any]) -> None:
    spec = example_body["spec"]
    par = spec["resources"].get("parallelism", {})
    runs = model_layout.spec_runs(
        spec["model"]["type"],
        MODEL_LAYOUT_ARGS[spec["model"]["type"]],
        par.get("pipeline", 1),
        par.get("expert", 1),
        spec.get("runtime", {}).get("extraArgs", []),
        tensor=par.get("tensor", 2),
    )
    assert model_layout.judge(runs, spec["model"]["type"]) == []
