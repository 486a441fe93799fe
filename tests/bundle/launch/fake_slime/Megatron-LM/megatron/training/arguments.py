"""A tiny stand-in for megatron.training.arguments.add_megatron_arguments."""

import argparse

SWITCHES = [
    "--sequence-parallel",
    "--optimizer-cpu-offload",
    "--overlap-cpu-optimizer-d2h-h2d",
    "--use-precision-aware-optimizer",
    "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32",
    "--swiglu",
    "--group-query-attention",
    "--use-rotary-position-embeddings",
    "--disable-bias-linear",
    "--add-qkv-bias",
]
VALUED = [
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--expert-model-parallel-size",
    "--lr-decay-style",
    "--weight-decay",
    "--adam-beta2",
    "--attention-dropout",
    "--hidden-dropout",
    "--attention-backend",
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--num-query-groups",
    "--normalization",
    "--norm-epsilon",
    "--rotary-base",
    "--vocab-size",
]


def add_megatron_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for flag in SWITCHES:
        parser.add_argument(flag, action="store_true")
    for flag in VALUED:
        parser.add_argument(flag)
    return parser
