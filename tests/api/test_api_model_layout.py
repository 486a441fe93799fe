"""spec.resources.parallelism against the layers and experts of model.type
(agentrl.api.model_layout): what Megatron's validate_args asserts when slime starts, refused
at admission. slime's own parse_args agrees case by case in
tests/bundle/launch/test_model_layout.py (upstream tier)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from tests.conftest import ROOT, minimal_body

from agentrl.api import model_layout
from agentrl.api.upstream_names import MODEL_LAYOUT_ARGS
from agentrl.api.validation import parse_experiment

GENERATOR = ROOT / "hack" / "gen-upstream-names.py"


def _problems(model_type: str, parallelism: dict[str, int], extra_args: list[str] | None = None,
              slime_dir: str | None = None) -> list[str]:  # fmt: skip
    parallelism = dict(parallelism)
    nodes = parallelism.pop("nodes", 4)
    runtime: dict[str, Any] = {"extraArgs": extra_args or []}
    if slime_dir:
        runtime["slimeDir"] = slime_dir
    body = minimal_body(
        model={"path": "Qwen/Q", "refLoad": "/models/q", "type": model_type},
        resources={"nodes": nodes, "gpusPerNode": 8, "parallelism": {"tensor": 1, **parallelism}},
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
    assert MODEL_LAYOUT_ARGS["qwen2.5-3B"] == ("--num-layers", "36")
    assert MODEL_LAYOUT_ARGS["qwen3-30B-A3B"] == ("--num-layers", "48", "--num-experts", "128")
    assert all("--num-layers" in args for args in MODEL_LAYOUT_ARGS.values())


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
    )
    assert model_layout.judge(runs, spec["model"]["type"]) == []
