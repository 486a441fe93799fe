"""slime's argv: golden per example, SlimeRunner parity, and the pure composition rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from launch_trees import EXAMPLE_A, EXAMPLE_B, EXAMPLE_C, example_doc, example_docs, experiment

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.launch import command
from agentrl.render.slime_args import build_slime_args, preview_command

GOLDEN = Path(__file__).parent / "golden"
DOCS = example_docs()


def _pairs(argv: list[str]) -> dict[str, str | None]:
    """flag -> value (None for switches); later flags win, like argparse."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("name", sorted(DOCS))
def test_preview_command_golden(name: str) -> None:
    got = preview_command(experiment(DOCS[name]))
    path = GOLDEN / f"{name}.argv.json"
    if os.environ.get("AGENTRL_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert path.exists(), (
        f"no golden for {name}: run AGENTRL_UPDATE_GOLDEN=1 pytest tests/bundle/launch"
    )
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


def test_every_design_example_is_present() -> None:
    assert {EXAMPLE_A, EXAMPLE_B, EXAMPLE_C} <= set(DOCS)


def test_one_node_defaults_match_slime_runner() -> None:
    exp = experiment(DOCS[EXAMPLE_A])
    ours = _pairs(build_slime_args(exp))
    for flag, value in SLIME_RUNNER.items():
        assert flag in ours, f"SlimeRunner sets {flag}"
        if value is not None:
            assert (
                float(ours[flag]) == float(value) if flag in ("--lr",) else ours[flag] == value
            ), flag
    path = exp.spec.model.path
    assert ours["--hf-checkpoint"] == ours["--ref-load"] == path
    assert ours["--rollout-function-path"] == "agentrl.bundle.rollout.generate_rollout"
    assert (
        ours["--custom-reward-post-process-path"] == "agentrl.bundle.rewards.post_process_rewards"
    )
    # Removed from slime in #1933; SlimeRunner still passes it and slime ignores it silently.
    assert "--use-dynamic-global-batch-size" not in ours
    # Deliberate: the spec's reward std choice (off by default) is passed explicitly.
    assert "--disable-grpo-std-normalization" in ours


def test_disaggregated_tp_pp_layout() -> None:
    exp = experiment(DOCS[EXAMPLE_B])
    ours = _pairs(build_slime_args(exp))
    # 4 nodes x 8 GPUs, 16 for SGLang: training gets the other two whole nodes.
    assert (ours["--actor-num-nodes"], ours["--actor-num-gpus-per-node"]) == ("2", "8")
    assert ours["--rollout-num-gpus"] == "16" and "--colocate" not in ours
    assert ours["--rollout-num-gpus-per-engine"] == "4"
    tp_pp = (ours["--tensor-model-parallel-size"], ours["--pipeline-model-parallel-size"])
    assert tp_pp == ("4", "2")
    ckpt = exp.spec.checkpoint.path
    assert (ours["--save"], ours["--load"], ours["--save-interval"]) == (ckpt, ckpt, "10")
    # a single eval set is expressed with slime's own eval flags
    assert ours["--eval-prompt-data"] == "swe-verified-mini"


def test_eval_sets_that_differ_use_eval_config() -> None:
    exp = experiment(DOCS[EXAMPLE_C])
    ours = _pairs(build_slime_args(exp))
    assert ours["--eval-interval"] == "5" and "--eval-prompt-data" not in ours
    doc = command.eval_config(exp.spec)["eval"]["datasets"]
    got = [
        (d["name"], d["n_samples_per_eval_prompt"], d["temperature"], d.get("max_response_len"))
        for d in doc
    ]
    assert got == [("web-dev", 1, 0.0, None), ("web-hard", 4, 0.7, 2048)]
    # slime builds EvalDatasetConfig(**entry): a key one release lacks is a TypeError at
    # start-up. These fields exist in every release we know (prompt_key became input_key).
    portable = {"name", "path", "n_samples_per_eval_prompt", "temperature", "max_response_len",
                "top_p", "top_k", "min_new_tokens", "stop", "stop_token_ids", "metadata_key",
                "label_key", "tool_key", "rm_type", "metadata_overrides"}  # fmt: skip
    assert all(set(entry) <= portable for entry in doc), doc


def test_uniform_eval_sets_use_slime_eval_flags() -> None:
    doc = example_doc(EXAMPLE_C)
    doc["spec"]["data"]["eval"] = [
        {"name": "a", "path": "/a.jsonl"},
        {"name": "b", "path": "/b.jsonl"},
    ]
    argv = build_slime_args(experiment(doc))
    i = argv.index("--eval-prompt-data")
    assert argv[i + 1 : i + 5] == ["a", "/a.jsonl", "b", "/b.jsonl"]
    assert _pairs(argv)["--n-samples-per-eval-prompt"] == "1"
    doc["spec"]["data"]["eval"] = []
    assert "--eval-interval" not in build_slime_args(experiment(doc))


def _config(name: str, extra_args: list[str] | None = None) -> RuntimeConfig:
    doc = example_doc(name)
    doc["spec"].setdefault("runtime", {})["extraArgs"] = extra_args or []
    exp = experiment(doc)
    return RuntimeConfig(
        experiment=exp.metadata.name,
        namespace=exp.metadata.namespace,
        bundle_version="test",
        spec=exp.spec,
        gateway_url="http://gw:9090",
        slime_args=build_slime_args(exp),
    )


def test_compose_order_wandb_gate_and_extra_args_last() -> None:
    cfg = _config(EXAMPLE_C, extra_args=["--rollout-top-p", "0.95"])
    parts = command.compose(cfg, ["--num-layers", "36"], {"CUDA_HOME": "/usr/local/cuda"}, [])
    argv = command.flatten(parts)
    assert argv[:4] == ["python3", "/root/slime/train.py", "--num-layers", "36"]
    assert argv[-2:] == ["--rollout-top-p", "0.95"]
    i = argv.index("--train-env-vars")
    assert json.loads(argv[i + 1]) == {"CUDA_HOME": "/usr/local/cuda"}


def test_wandb_only_with_key() -> None:
    spec = _config(EXAMPLE_A).spec
    assert spec.tracking.wandb is not None  # example (a) configures wandb
    assert command.wandb_args(spec, {}, "WANDB_API_KEY") == []
    assert command.wandb_args(spec, {"WANDB_API_KEY": ""}, "WANDB_API_KEY") == []
    args = command.wandb_args(spec, {"WANDB_API_KEY": "k"}, "WANDB_API_KEY")
    assert args[:3] == ["--use-wandb", "--wandb-project", spec.tracking.wandb.project]
    assert "k" not in args


def test_unknown_flags_are_named_with_origin_and_suggestion() -> None:
    parts = [
        command.Part("launcher", ["python3", "train.py"]),
        command.Part("rendered", ["--lr", "1e-6", "--use-dynamic-batch-size"]),
        command.Part(
            "spec.runtime.extraArgs", ["--use-dynamic-global-batch-size", "--lr=2e-6", "-5"]
        ),
    ]
    known = frozenset({"--lr", "--use-dynamic-batch-size"})
    bad = command.unknown_flags(parts, known)
    assert bad == [("--use-dynamic-global-batch-size", "spec.runtime.extraArgs")]
    message = command.unknown_flags_message(bad, known)
    assert "did you mean --use-dynamic-batch-size?" in message
    assert "from spec.runtime.extraArgs" in message
    assert command.unknown_flags(parts[:2], known) == []


def test_an_underscored_flag_is_not_read_as_a_known_prefix() -> None:
    known = frozenset({"--save", "--save-interval", "--eval-interval"})
    parts = [
        command.Part("launcher", ["python3", "train.py"]),
        command.Part("spec.runtime.extraArgs", ["--save_interval", "5", "--eval_interval=2"]),
    ]
    bad = command.unknown_flags(parts, known)
    assert [flag for flag, _ in bad] == ["--save_interval", "--eval_interval"]
    assert "did you mean --save-interval?" in command.unknown_flags_message(bad, known)


def test_redact_and_flag_value() -> None:
    env = {"WANDB_API_KEY": "s3cret", "AGENTRL_HTTP_HEADER_0": "Bearer x", "CUDA_HOME": "/c"}
    shown = command.redact(env, ["AGENTRL_HTTP_HEADER_0"])
    assert shown == {
        "AGENTRL_HTTP_HEADER_0": "<redacted>",
        "CUDA_HOME": "/c",
        "WANDB_API_KEY": "<redacted>",
    }
    assert command.flag_value(["--a", "1", "--a=2"], "--a") == "2"
    assert command.flag_value(["--a"], "--a") is None


def test_layout_that_leaves_no_whole_training_nodes_is_refused() -> None:
    doc = example_doc(EXAMPLE_B)
    doc["spec"]["resources"]["rolloutGpus"] = 12  # 20 training GPUs on 8-GPU nodes
    with pytest.raises(ValueError, match=r"spec\.resources\.rolloutGpus .* whole nodes"):
        build_slime_args(experiment(doc))
    doc["spec"]["resources"]["rolloutGpus"] = 32
    with pytest.raises(ValueError, match="leaves no GPU for training"):
        build_slime_args(experiment(doc))
    doc["spec"]["resources"].update(nodes=1, rolloutGpus=4)  # under one node: 4 + 4 split
    ours = _pairs(build_slime_args(experiment(doc)))
    assert (ours["--actor-num-nodes"], ours["--actor-num-gpus-per-node"]) == ("1", "4")
    assert ours["--rollout-num-gpus"] == "4"
