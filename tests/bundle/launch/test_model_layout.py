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
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS)
def test_the_rule_refuses_what_megatron_stops_on(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    argv, env = pod.slime_args(), pod.driver_env()
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
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    argv, env = pod.slime_args(), pod.driver_env()
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


def test_the_launcher_refuses_before_slime_starts(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=[*TP1, "--pipeline-model-parallel-size", "8"])
    done = pod.launch()
    assert done.returncode == 2
    assert (
        "spec.runtime.extraArgs: pipeline parallelism 8 does not divide the 28 layers of "
        "model.type 'qwen2.5-7B'" in done.stderr
    )
    assert not pod.record.exists()  # slime never started
