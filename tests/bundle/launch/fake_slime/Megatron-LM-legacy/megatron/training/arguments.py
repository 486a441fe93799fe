"""A stand-in for an older megatron.training.arguments: parse_args only, no
add_megatron_arguments, so the launcher must capture the parser parse_args builds."""

import argparse

FLAGS = [
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


def parse_args(extra_args_provider=None, ignore_unknown_args=False):
    parser = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
    for flag in FLAGS:
        parser.add_argument(flag)
    for flag in SWITCHES:
        parser.add_argument(flag, action="store_true")
    if extra_args_provider is not None:
        parser = extra_args_provider(parser)
    if ignore_unknown_args:
        args, _ = parser.parse_known_args()
    else:
        args = parser.parse_args()
    return args
