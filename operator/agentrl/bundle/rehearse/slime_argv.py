"""slime's args from an argv, without slime: a table of the flags agentrl's compose emits.

slime is not installed where `agentrl rehearse` runs, so its argparse cannot read the pods'
command line here. `FLAGS` says, for every flag `slimecmd.compose` can emit (and the
sampling flags a user adds in extraArgs that the rollout or a filter reads), the attribute of
`args` slime's parser sets and the kind of its value; a test holds it to slime's own parser
at each pinned commit. A flag outside the table is read by shape: alone True, one value a
number where it reads as one (else the text), more a list, under its name with `-` as `_`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# flag: (attributes of args it sets, kind). Kinds: true/false (store_true/store_false),
# int, float, str, json (json.loads), enum (Megatron's AttnBackend: kept as its text here,
# a member of the enum in slime), list:<scalar> (nargs "+": a list even of one value).
# Two attributes: the SGLang release each pinned slime commit builds on names the attribute
# differently (slime at
# https://github.com/THUDM/slime/tree/624b824a898ab0ec1fcb4d373004c7f3852bf515 gets
# sglang_dp_size and sglang_cuda_graph_max_bs_decode); both are set, each holding the value.
FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "--accumulate-allreduce-grads-in-fp32": (("accumulate_allreduce_grads_in_fp32",), "true"),
    "--actor-num-gpus-per-node": (("actor_num_gpus_per_node",), "int"),
    "--actor-num-nodes": (("actor_num_nodes",), "int"),
    "--adam-beta2": (("adam_beta2",), "float"),
    "--advantage-estimator": (("advantage_estimator",), "str"),
    "--attention-backend": (("attention_backend",), "enum"),
    "--attention-dropout": (("attention_dropout",), "float"),
    "--attention-softmax-in-fp32": (("attention_softmax_in_fp32",), "true"),
    "--colocate": (("colocate",), "true"),
    "--context-parallel-size": (("context_parallel_size",), "int"),
    "--custom-config-path": (("custom_config_path",), "str"),
    "--custom-reward-post-process-path": (("custom_reward_post_process_path",), "str"),
    "--disable-grpo-std-normalization": (("grpo_std_normalization",), "false"),
    "--disable-wandb-random-suffix": (("wandb_random_suffix",), "false"),
    "--dynamic-sampling-filter-path": (("dynamic_sampling_filter_path",), "str"),
    "--eps-clip": (("eps_clip",), "float"),
    "--eps-clip-high": (("eps_clip_high",), "float"),
    "--eval-config": (("eval_config",), "str"),
    "--eval-interval": (("eval_interval",), "int"),
    "--eval-max-response-len": (("eval_max_response_len",), "int"),
    "--eval-prompt-data": (("eval_prompt_data",), "list:str"),
    "--eval-temperature": (("eval_temperature",), "float"),
    "--expert-model-parallel-size": (("expert_model_parallel_size",), "int"),
    "--finetune": (("finetune",), "true"),
    "--global-batch-size": (("global_batch_size",), "int"),
    "--hf-checkpoint": (("hf_checkpoint",), "str"),
    "--hidden-dropout": (("hidden_dropout",), "float"),
    "--input-key": (("input_key",), "str"),
    "--kl-loss-coef": (("kl_loss_coef",), "float"),
    "--kl-loss-type": (("kl_loss_type",), "str"),
    "--load": (("load",), "str"),
    "--lr": (("lr",), "float"),
    "--lr-decay-style": (("lr_decay_style",), "str"),
    "--max-tokens-per-gpu": (("max_tokens_per_gpu",), "int"),
    "--megatron-to-hf-mode": (("megatron_to_hf_mode",), "str"),
    "--metadata-key": (("metadata_key",), "str"),
    "--n-samples-per-eval-prompt": (("n_samples_per_eval_prompt",), "int"),
    "--n-samples-per-prompt": (("n_samples_per_prompt",), "int"),
    "--no-load-optim": (("no_load_optim",), "true"),
    "--no-load-rng": (("no_load_rng",), "true"),
    "--num-gpus-per-node": (("num_gpus_per_node",), "int"),
    "--num-rollout": (("num_rollout",), "int"),
    "--optimizer-cpu-offload": (("optimizer_cpu_offload",), "true"),
    "--over-sampling-batch-size": (("over_sampling_batch_size",), "int"),
    "--overlap-cpu-optimizer-d2h-h2d": (("overlap_cpu_optimizer_d2h_h2d",), "true"),
    "--pipeline-model-parallel-size": (("pipeline_model_parallel_size",), "int"),
    "--prompt-data": (("prompt_data",), "str"),
    "--ref-load": (("ref_load",), "str"),
    "--rollout-batch-size": (("rollout_batch_size",), "int"),
    "--rollout-function-path": (("rollout_function_path",), "str"),
    "--rollout-max-prompt-len": (("rollout_max_prompt_len",), "int"),
    "--rollout-max-response-len": (("rollout_max_response_len",), "int"),
    "--rollout-num-gpus": (("rollout_num_gpus",), "int"),
    "--rollout-num-gpus-per-engine": (("rollout_num_gpus_per_engine",), "int"),
    "--rollout-shuffle": (("rollout_shuffle",), "true"),
    "--rollout-stop": (("rollout_stop",), "list:str"),
    "--rollout-stop-token-ids": (("rollout_stop_token_ids",), "list:int"),
    "--rollout-temperature": (("rollout_temperature",), "float"),
    "--rollout-top-k": (("rollout_top_k",), "int"),
    "--rollout-top-p": (("rollout_top_p",), "float"),
    "--save": (("save",), "str"),
    "--save-interval": (("save_interval",), "int"),
    "--sequence-parallel": (("sequence_parallel",), "true"),
    "--sglang-context-length": (("sglang_context_length",), "int"),
    "--sglang-cuda-graph-max-bs": (
        ("sglang_cuda_graph_max_bs", "sglang_cuda_graph_max_bs_decode"),
        "int",
    ),
    "--sglang-data-parallel-size": (("sglang_data_parallel_size", "sglang_dp_size"), "int"),
    "--sglang-incremental-streaming-output": (("sglang_incremental_streaming_output",), "true"),
    "--sglang-log-level": (("sglang_log_level",), "str"),
    "--sglang-log-level-http": (("sglang_log_level_http",), "str"),
    "--sglang-mem-fraction-static": (("sglang_mem_fraction_static",), "float"),
    "--sglang-reasoning-parser": (("sglang_reasoning_parser",), "str"),
    "--sglang-tool-call-parser": (("sglang_tool_call_parser",), "str"),
    "--tensor-model-parallel-size": (("tensor_model_parallel_size",), "int"),
    "--train-env-vars": (("train_env_vars",), "json"),
    "--use-dynamic-batch-size": (("use_dynamic_batch_size",), "true"),
    "--use-kl-loss": (("use_kl_loss",), "true"),
    "--use-precision-aware-optimizer": (("use_precision_aware_optimizer",), "true"),
    "--use-wandb": (("use_wandb",), "true"),
    "--wandb-group": (("wandb_group",), "str"),
    "--wandb-host": (("wandb_host",), "str"),
    "--wandb-project": (("wandb_project",), "str"),
    "--wandb-team": (("wandb_team",), "str"),
    "--weight-decay": (("weight_decay",), "float"),
}

_SCALARS: dict[str, Any] = {"int": int, "float": float, "str": str, "enum": str, "json": json.loads}


def read_argv(argv: Sequence[str]) -> dict[str, Any]:
    """slime's args as its parser sets them from `argv` (options only), for the flags in
    `FLAGS`, the last occurrence winning as in argparse; other flags by their shape."""
    values: dict[str, Any] = {}
    args: list[str] = []
    name: str | None = None
    taken: list[str] = []
    for whole in argv:
        # `--flag=value` (extraArgs may say it so) is argparse's `--flag value`.
        flag, eq, value = whole.partition("=") if whole.startswith("--") else (whole, "", "")
        args.extend([flag, value] if eq else [flag])
    for arg in [*args, "--"]:
        if arg.startswith("--"):
            if name is not None:
                values.update(_value(name, taken))
            name, taken = arg if arg != "--" else None, []
        else:
            taken.append(arg)
    return values


def _value(flag: str, taken: list[str]) -> dict[str, Any]:
    known = FLAGS.get(flag)
    if known is None:
        return {flag[2:].replace("-", "_"): _by_shape(taken)}
    dests, kind = known
    if kind in ("true", "false"):
        value: Any = kind == "true"
    elif kind.startswith("list:"):
        value = [_SCALARS[kind[5:]](t) for t in taken]
    elif taken:
        value = _SCALARS[kind](taken[-1])
    else:  # slime's parser would refuse the command line; the pods' launch says so
        value = _by_shape(taken)
    return dict.fromkeys(dests, value)


def _by_shape(taken: list[str]) -> Any:
    """A flag outside the table: alone True, one value a scalar, more a list."""
    if not taken:
        return True
    return _number(taken[0]) if len(taken) == 1 else [_number(t) for t in taken]


def _number(text: str) -> Any:
    """A value outside the table: int, float, or the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
