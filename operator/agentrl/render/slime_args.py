"""slime's command-line flags that follow from an RLExperiment spec.

The spec is the only input, so the operator can render the flags into the runtime-config
ConfigMap and `agentrl render --show-command` can show them without a cluster. Recipe
defaults follow agentcore-rl-toolkit's SlimeRunner (the flags it always sets, its
optimizer and SGLang settings), with two deliberate differences: the removed
`--use-dynamic-global-batch-size` is never passed (slime would ignore it silently), and
the spec's reward-std choice is passed explicitly. The launcher in the pod adds what only
the pod knows (MODEL_ARGS, `--train-env-vars`, wandb flags when the key is present) and
appends `runtime.extraArgs` last; `preview_command` shows that whole command with
placeholders.
"""

from __future__ import annotations

from typing import Final

from agentrl.api.models import EvalSet, RLExperiment, RLExperimentSpec

ROLLOUT_FUNCTION: Final = "agentrl.bundle.rollout.generate_rollout"
REWARD_POST_PROCESS: Final = "agentrl.bundle.rewards.post_process_rewards"
# The launcher writes these files before it execs slime; it finds their paths here, in
# the rendered flags, so render and launcher never disagree on where they are.
CUSTOM_CONFIG_PATH: Final = "/tmp/agentrl/slime-custom-config.yaml"
EVAL_CONFIG_PATH: Final = "/tmp/agentrl/slime-eval-config.yaml"

# The spec names Schulman's k1 estimator "kl"; slime's --kl-loss-type calls it "k1".
_KL_LOSS_TYPE: Final = {"kl": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "low_var_kl"}

# SlimeRunner's fixed recipe: Megatron numerics and memory, SGLang engine settings.
_RECIPE_FLAGS: Final = (
    "--lr-decay-style", "constant",
    "--weight-decay", "0.1",
    "--adam-beta2", "0.98",
    "--optimizer-cpu-offload",
    "--overlap-cpu-optimizer-d2h-h2d",
    "--use-precision-aware-optimizer",
    "--attention-dropout", "0.0",
    "--hidden-dropout", "0.0",
    "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32",
    "--attention-backend", "flash",
    "--sglang-mem-fraction-static", "0.7",
    "--sglang-cuda-graph-max-bs", "32",
    "--sglang-data-parallel-size", "1",
    "--sglang-log-level", "warning",
    "--sglang-log-level-http", "warning",
)  # fmt: skip


def _num(value: float) -> str:
    """A float as slime's argparse reads it back exactly (1e-06, 0.2)."""
    return repr(float(value))


def _actor_layout(spec: RLExperimentSpec) -> tuple[int, int]:
    """(actor nodes, actor GPUs per node): every GPU when colocated, else what the engines leave."""
    res = spec.resources
    actor_gpus = res.actor_gpus
    if actor_gpus <= 0:
        raise ValueError(
            f"spec.resources.rolloutGpus ({res.rollout_gpus}) leaves no GPU for training out of "
            f"{res.total_gpus}; lower rolloutGpus or add nodes"
        )
    if actor_gpus % res.gpus_per_node == 0:
        return actor_gpus // res.gpus_per_node, res.gpus_per_node
    if actor_gpus < res.gpus_per_node:
        return 1, actor_gpus
    raise ValueError(
        f"spec.resources.rolloutGpus ({res.rollout_gpus}) must leave whole nodes for training "
        f"({res.gpus_per_node} GPUs each); make it a multiple of gpusPerNode"
    )


def cluster_args(spec: RLExperimentSpec) -> list[str]:
    """GPU allocation and model parallelism."""
    res, par = spec.resources, spec.resources.parallelism
    nodes, gpus = _actor_layout(spec)
    args = [
        "--actor-num-nodes", str(nodes),
        "--actor-num-gpus-per-node", str(gpus),
        "--num-gpus-per-node", str(res.gpus_per_node),
        "--rollout-num-gpus-per-engine", str(res.rollout_gpus_per_engine),
    ]  # fmt: skip
    if res.colocate:
        args.append("--colocate")
    else:
        args += ["--rollout-num-gpus", str(res.engine_gpus)]
    args += [
        "--tensor-model-parallel-size", str(par.tensor),
        "--pipeline-model-parallel-size", str(par.pipeline),
        "--context-parallel-size", str(par.context),
        "--expert-model-parallel-size", str(par.expert),
    ]  # fmt: skip
    if par.tensor > 1:
        args.append("--sequence-parallel")
    return args


def model_args(spec: RLExperimentSpec) -> list[str]:
    """Checkpoints in, checkpoints out, and the SGLang parsers of the served model."""
    model, ckpt = spec.model, spec.checkpoint
    args = [
        "--megatron-to-hf-mode", "bridge",
        "--hf-checkpoint", model.path,
        "--ref-load", model.ref_load or model.path,
    ]  # fmt: skip
    if ckpt.path:
        args += ["--save", ckpt.path]
        if ckpt.save_interval:
            args += ["--save-interval", str(ckpt.save_interval)]
        if ckpt.resume:
            # slime loads --load when it holds a Megatron checkpoint and falls back to
            # --ref-load otherwise, so a first run and a restarted one share this command.
            args += ["--load", ckpt.path]
    if model.context_length:
        args += ["--sglang-context-length", str(model.context_length)]
    if model.tool_call_parser:
        args += ["--sglang-tool-call-parser", model.tool_call_parser]
    if model.reasoning_parser:
        args += ["--sglang-reasoning-parser", model.reasoning_parser]
    return args


def data_args(spec: RLExperimentSpec) -> list[str]:
    """The train set and the rollout shape."""
    data, grpo = spec.data, spec.grpo
    args = [
        "--prompt-data", data.train,
        "--input-key", "prompt",
        "--metadata-key", "metadata",
        "--num-rollout", str(grpo.num_rollouts),
        "--rollout-batch-size", str(grpo.rollout_batch_size),
        "--n-samples-per-prompt", str(grpo.samples_per_prompt),
        "--global-batch-size", str(grpo.effective_global_batch_size),
        "--rollout-max-response-len", str(grpo.max_response_length),
        "--rollout-temperature", _num(grpo.temperature),
    ]  # fmt: skip
    if data.shuffle:
        args.append("--rollout-shuffle")
    return args


def algorithm_args(spec: RLExperimentSpec) -> list[str]:
    """GRPO loss, KL, optimizer and dynamic batching."""
    grpo = spec.grpo
    args = [
        "--advantage-estimator", "grpo",
        "--use-kl-loss",
        "--kl-loss-coef", _num(grpo.kl_loss_coef),
        "--kl-loss-type", _KL_LOSS_TYPE[grpo.kl_loss_type],
        "--eps-clip", _num(grpo.eps_clip),
        "--eps-clip-high", _num(grpo.eps_clip_high),
        "--lr", _num(grpo.learning_rate),
        *_RECIPE_FLAGS,
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu", str(grpo.max_tokens_per_gpu),
    ]  # fmt: skip
    if not grpo.reward_normalization.std:
        # slime's default divides by the group std; agentrl's reward post-process reads
        # the same switch, so the spec's choice holds whichever normaliser runs.
        args.append("--disable-grpo-std-normalization")
    return args


def _uniform(sets: list[EvalSet]) -> bool:
    first = sets[0]
    return all(
        (s.samples_per_prompt, s.temperature, s.max_response_length)
        == (first.samples_per_prompt, first.temperature, first.max_response_length)
        for s in sets
    )


def eval_args(spec: RLExperimentSpec) -> list[str]:
    """Evaluation sets: slime's global eval flags, or a per-set eval config when they differ."""
    sets = spec.data.eval
    if not sets:
        return []
    args = ["--eval-interval", str(spec.data.eval_interval)]
    if not _uniform(sets):
        # slime's eval flags are global; per-set settings need --eval-config, which the
        # launcher writes from the same spec (agentrl.bundle.launch.command.eval_config).
        return [*args, "--eval-config", EVAL_CONFIG_PATH]
    first = sets[0]
    args.append("--eval-prompt-data")
    for s in sets:
        args += [s.name, s.path]
    args += [
        "--n-samples-per-eval-prompt", str(first.samples_per_prompt),
        "--eval-temperature", _num(first.temperature),
    ]  # fmt: skip
    if first.max_response_length:
        args += ["--eval-max-response-len", str(first.max_response_length)]
    return args


def hook_args() -> list[str]:
    """agentrl's own code inside slime: rollout, reward post-process, custom config."""
    return [
        "--rollout-function-path", ROLLOUT_FUNCTION,
        "--custom-reward-post-process-path", REWARD_POST_PROCESS,
        "--custom-config-path", CUSTOM_CONFIG_PATH,
    ]  # fmt: skip


def build_slime_args(exp: RLExperiment) -> list[str]:
    """The spec-derived part of slime's argv, in a stable order (golden-tested)."""
    spec = exp.spec
    return [
        *cluster_args(spec),
        *model_args(spec),
        *data_args(spec),
        *algorithm_args(spec),
        *eval_args(spec),
        *hook_args(),
    ]


def preview_command(exp: RLExperiment) -> list[str]:
    """The whole command the launcher will exec, with placeholders for what only the pod knows."""
    spec = exp.spec
    runtime = spec.runtime
    cmd = [
        "python3",
        f"{runtime.slime_dir}/train.py",
        f"<MODEL_ARGS from {runtime.slime_dir}/scripts/models/{spec.model.type}.sh>",
        *build_slime_args(exp),
        "--train-env-vars",
        "<JSON: CUDA_HOME, LD_LIBRARY_PATH, PATH, PYTHONPATH, CUDA_DEVICE_MAX_CONNECTIONS>",
    ]
    wandb = spec.tracking.wandb
    if wandb is not None:
        cmd += [
            "<only when WANDB_API_KEY is set:>",
            "--use-wandb",
            "--wandb-project",
            wandb.project,
        ]
        if wandb.group:
            cmd += ["--wandb-group", wandb.group]
        if wandb.host:
            cmd += ["--wandb-host", wandb.host]
    return [*cmd, *runtime.extra_args]
