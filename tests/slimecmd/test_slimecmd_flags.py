"""slime's flags from the spec: golden previews per example, SlimeRunner parity, layouts, eval."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentrl import slimecmd
from agentrl.api.models import RLExperiment, RLExperimentSpec
from agentrl.slimecmd import files, flags
from conftest import example_paths, load_example

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = {p.stem: p.name for p in example_paths()}
EXAMPLE_A = "qwen2.5-3b-gsm8k-agentcore"  # 1x8 GPUs, AgentCore, SlimeRunner defaults
EXAMPLE_B = "qwen3-32b-swe-4node-tp-pp"  # 4x8, tp+pp, rollout on separate nodes
EXAMPLE_C = "qwen2.5-7b-http-agent-two-evals"  # HTTP agent, two eval sets that differ


def spec_of(body: dict[str, Any]) -> RLExperimentSpec:
    return RLExperiment.model_validate(body).spec


def _pairs(argv: list[str]) -> dict[str, str | None]:
    """flag -> value (None for switches); later flags win, like argparse."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def _resolved(spec: RLExperimentSpec, **facts: Any) -> list[str]:
    pod = {"model_args": [], "train_env": {}, "wandb_key": False, "hf_mode_flag": True}
    return slimecmd.compose(spec, slimecmd.PodFacts(**{**pod, **facts})).argv()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_preview_golden(name: str) -> None:
    body = load_example(name)
    meta = body["metadata"]
    got = slimecmd.preview(spec_of(body), slimecmd.wandb_run_name(meta["namespace"], meta["name"]))
    path = GOLDEN / f"{name}.argv.json"
    if os.environ.get("AGENTRL_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert path.exists(), f"no golden for {name}: run AGENTRL_UPDATE_GOLDEN=1 pytest tests/slimecmd"
    assert got == json.loads(path.read_text())


# SlimeRunner(...) defaults as train.sh and runner.py pass them (agentcore-rl-toolkit #101).
SLIME_RUNNER = {
    "--tensor-model-parallel-size": "2",
    "--rollout-num-gpus-per-engine": "2",
    "--input-key": "prompt",
    "--rollout-batch-size": "32",
    "--n-samples-per-prompt": "8",
    "--rollout-max-response-len": "1024",
    "--rollout-temperature": "1.0",
    "--advantage-estimator": "grpo",
    "--use-kl-loss": None,
    "--kl-loss-type": "low_var_kl",
    "--eps-clip": "0.2",
    "--eps-clip-high": "0.28",
    "--lr": "1e-06",
    "--lr-decay-style": "constant",
    "--weight-decay": "0.1",
    "--adam-beta2": "0.98",
    "--optimizer-cpu-offload": None,
    "--overlap-cpu-optimizer-d2h-h2d": None,
    "--use-precision-aware-optimizer": None,
    "--sequence-parallel": None,
    "--sglang-mem-fraction-static": "0.7",
    "--sglang-cuda-graph-max-bs": "32",
    "--sglang-log-level": "warning",
    "--sglang-log-level-http": "warning",
    "--attention-dropout": "0.0",
    "--hidden-dropout": "0.0",
    "--accumulate-allreduce-grads-in-fp32": None,
    "--attention-softmax-in-fp32": None,
    "--attention-backend": "flash",
    "--actor-num-gpus-per-node": "8",
    "--colocate": None,
    "--megatron-to-hf-mode": "bridge",
    "--use-dynamic-batch-size": None,
    "--max-tokens-per-gpu": "9216",
    "--sglang-data-parallel-size": "1",
}


def test_one_node_defaults_match_slime_runner() -> None:
    spec = spec_of(load_example(EXAMPLE_A))
    ours = _pairs(_resolved(spec))  # an image whose slime has --megatron-to-hf-mode
    for flag, value in SLIME_RUNNER.items():
        assert flag in ours, f"SlimeRunner sets {flag}"
        if value is not None:
            assert (
                float(ours[flag]) == float(value) if flag in ("--lr",) else ours[flag] == value
            ), flag
    assert ours["--hf-checkpoint"] == ours["--ref-load"] == spec.model.path
    assert ours["--rollout-function-path"] == "agentrl.bundle.rollout.generate_rollout"
    assert (
        ours["--custom-reward-post-process-path"] == "agentrl.bundle.rewards.post_process_rewards"
    )
    # Removed from slime in #1933; SlimeRunner still passes it and slime ignores it silently.
    assert "--use-dynamic-global-batch-size" not in ours
    # Deliberate: the spec's reward std choice (off by default) is passed explicitly.
    assert "--disable-grpo-std-normalization" in ours
    assert "--megatron-to-hf-mode" not in _resolved(spec, hf_mode_flag=False)


def test_disaggregated_tp_pp_layout() -> None:
    spec = spec_of(load_example(EXAMPLE_B))
    ckpt = spec.checkpoint.path
    ours = _pairs(_resolved(spec, start=slimecmd.Start.RESUME))
    # 4 nodes x 8 GPUs, 16 for SGLang: training gets the other two whole nodes.
    assert (ours["--actor-num-nodes"], ours["--actor-num-gpus-per-node"]) == ("2", "8")
    assert ours["--rollout-num-gpus"] == "16" and "--colocate" not in ours
    assert ours["--rollout-num-gpus-per-engine"] == "4"
    tp_pp = (ours["--tensor-model-parallel-size"], ours["--pipeline-model-parallel-size"])
    assert tp_pp == ("4", "2")
    assert (ours["--save"], ours["--load"], ours["--save-interval"]) == (ckpt, ckpt, "10")
    # a single eval set is expressed with slime's own eval flags
    assert ours["--eval-prompt-data"] == "swe-verified-mini"


def test_eval_sets_that_differ_use_eval_config() -> None:
    spec = spec_of(load_example(EXAMPLE_C))
    cmd = slimecmd.compose(spec, slimecmd.PodFacts(files_dir="/f"))
    ours = _pairs(cmd.argv())
    assert ours["--eval-interval"] == "5" and "--eval-prompt-data" not in ours
    assert ours["--eval-config"] == cmd.eval_config_path == "/f/slime-eval-config.yaml"
    doc = files.eval_config(spec)["eval"]["datasets"]
    got = [
        (d["name"], d["n_samples_per_eval_prompt"], d["temperature"], d.get("max_response_len"))
        for d in doc
    ]
    assert got == [("web-dev", 1, 0.0, None), ("web-hard", 4, 0.7, 2048)]


def test_uniform_eval_sets_use_slime_eval_flags() -> None:
    body = load_example(EXAMPLE_C)
    body["spec"]["data"]["eval"] = [
        {"name": "a", "path": "/a.jsonl"},
        {"name": "b", "path": "/b.jsonl"},
    ]
    cmd = slimecmd.compose(spec_of(body), slimecmd.PodFacts())
    argv = cmd.argv()
    i = argv.index("--eval-prompt-data")
    assert argv[i + 1 : i + 5] == ["a", "/a.jsonl", "b", "/b.jsonl"]
    assert _pairs(argv)["--n-samples-per-eval-prompt"] == "1"
    assert cmd.eval_config_path is None
    body["spec"]["data"]["eval"] = []
    assert "--eval-interval" not in slimecmd.preview(spec_of(body))


def test_layout_that_leaves_no_whole_training_nodes_is_refused() -> None:
    body = load_example(EXAMPLE_B)
    body["spec"]["resources"]["rolloutGpus"] = 12  # 20 training GPUs on 8-GPU nodes
    with pytest.raises(ValueError, match=r"spec\.resources\.rolloutGpus .* whole nodes"):
        flags.cluster_args(spec_of(body))
    body["spec"]["resources"]["rolloutGpus"] = 32
    with pytest.raises(ValueError, match="leaves no GPU for training"):
        flags.cluster_args(spec_of(body))
    body["spec"]["resources"].update(nodes=1, rolloutGpus=4)  # under one node: 4 + 4 split
    ours = _pairs(flags.cluster_args(spec_of(body)))
    assert (ours["--actor-num-nodes"], ours["--actor-num-gpus-per-node"]) == ("1", "4")
    assert ours["--rollout-num-gpus"] == "4"
