"""A tiny stand-in for slime.utils.arguments: the same provider API, a subset of the flags.

Flag names are copied from slime's parser; the launcher's check must accept every flag
agentrl renders and refuse anything else.
"""

import argparse

SWITCHES = [
    "--colocate",
    "--offload",
    "--rollout-shuffle",
    "--use-kl-loss",
    "--use-dynamic-batch-size",
    "--disable-grpo-std-normalization",
    "--use-wandb",
    "--skip-eval-before-train",
]
VALUED = [
    "--actor-num-nodes",
    "--actor-num-gpus-per-node",
    "--rollout-num-gpus",
    "--rollout-num-gpus-per-engine",
    "--num-gpus-per-node",
    "--train-env-vars",
    "--megatron-to-hf-mode",
    "--hf-checkpoint",
    "--rollout-function-path",
    "--rollout-temperature",
    "--rollout-top-p",
    "--rollout-max-response-len",
    "--num-rollout",
    "--prompt-data",
    "--input-key",
    "--metadata-key",
    "--rollout-batch-size",
    "--n-samples-per-prompt",
    "--global-batch-size",
    "--max-tokens-per-gpu",
    "--eval-interval",
    "--eval-config",
    "--n-samples-per-eval-prompt",
    "--eval-temperature",
    "--eval-max-response-len",
    "--ref-load",
    "--load",
    "--save",
    "--save-interval",
    "--lr",
    "--eps-clip",
    "--eps-clip-high",
    "--kl-loss-coef",
    "--kl-loss-type",
    "--advantage-estimator",
    "--wandb-project",
    "--wandb-group",
    "--wandb-host",
    "--custom-reward-post-process-path",
    "--custom-config-path",
]


def get_slime_extra_args_provider(add_custom_arguments=None):
    def add_slime_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        for flag in SWITCHES:
            parser.add_argument(flag, action="store_true")
        for flag in VALUED:
            parser.add_argument(flag)
        parser.add_argument("--eval-prompt-data", nargs="+")
        return parser

    return add_slime_arguments
