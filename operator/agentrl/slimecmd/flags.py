"""slime's flags that follow from the spec alone, in groups (pure).

Recipe defaults follow agentcore-rl-toolkit's SlimeRunner (the flags it always sets, its
optimizer and SGLang settings), with three deliberate differences: the removed
`--use-dynamic-global-batch-size` is never passed (slime would ignore it silently), the
spec's reward-std choice is passed explicitly, and SGLang streams incrementally (for the
gateway's streamed answers). What depends on the pod (the checkpoint
directory's state, the slime version in the image) is decided in `compose`, not here.
"""

from __future__ import annotations

from typing import Final

from agentrl.api.models import EvalSet, RLExperimentSpec

ROLLOUT_FUNCTION: Final = "agentrl.bundle.rollout.generate_rollout"
REWARD_POST_PROCESS: Final = "agentrl.bundle.rewards.post_process_rewards"

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
    # The gateway streams agents' answers from /generate. By default SGLang repeats every
    # token so far in every stream chunk (quadratic on the wire and in SGLang's own front
    # end); this sends each token once. slime's own rollout does not stream.
    "--sglang-incremental-streaming-output",
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


def trainer_weights(spec: RLExperimentSpec) -> str:
    """The directory the trainer starts from (`--ref-load`): refLoad, else the model path."""
    return spec.model.ref_load or spec.model.path


def model_args(spec: RLExperimentSpec) -> list[str]:
    """The served model and the trainer's starting weights."""
    return ["--hf-checkpoint", spec.model.path, "--ref-load", trainer_weights(spec)]


def save_args(spec: RLExperimentSpec) -> list[str]:
    """Where checkpoints go. Whether a start loads one is decided in the pod (`compose`)."""
    ckpt = spec.checkpoint
    if not ckpt.path:
        return []
    args = ["--save", ckpt.path]
    if ckpt.save_interval:
        args += ["--save-interval", str(ckpt.save_interval)]
    return args


def sglang_model_args(spec: RLExperimentSpec) -> list[str]:
    """SGLang settings of the served model: context length and output parsers."""
    model = spec.model
    args: list[str] = []
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


def eval_sets_differ(sets: list[EvalSet]) -> bool:
    """slime's eval flags are global: sets that differ need a per-set --eval-config file."""
    first = sets[0]
    return any(
        (s.samples_per_prompt, s.temperature, s.max_response_length)
        != (first.samples_per_prompt, first.temperature, first.max_response_length)
        for s in sets
    )


def eval_args(spec: RLExperimentSpec, eval_config_path: str) -> list[str]:
    """Evaluation sets: slime's global eval flags, or `--eval-config` when the sets differ."""
    sets = spec.data.eval
    if not sets:
        return []
    args = ["--eval-interval", str(spec.data.eval_interval)]
    if eval_sets_differ(sets):
        args += ["--eval-config", eval_config_path]
        sizes = {s.samples_per_prompt for s in sets}
        if len(sizes) == 1:
            # slime's eval logging groups every set's rewards for pass@k by this one global
            # flag, never by the eval config's per-set value (left at 1, it logs no pass@k):
            # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/observability/rollout_metrics.py#L238-L245
            args += ["--n-samples-per-eval-prompt", str(sizes.pop())]
        return args
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


def hook_args(custom_config_path: str) -> list[str]:
    """agentrl's own code inside slime: rollout, reward post-process, custom config."""
    return [
        "--rollout-function-path", ROLLOUT_FUNCTION,
        "--custom-reward-post-process-path", REWARD_POST_PROCESS,
        "--custom-config-path", custom_config_path,
    ]  # fmt: skip
