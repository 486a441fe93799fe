"""A tiny stand-in for slime's SGLang arguments: ServerArgs flags behind a --sglang- prefix."""

import argparse

SERVER_ARGS = [
    "mem-fraction-static",
    "cuda-graph-max-bs",
    "data-parallel-size",
    "log-level",
    "log-level-http",
    "tool-call-parser",
    "reasoning-parser",
    "context-length",
]


def add_sglang_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for name in SERVER_ARGS:
        parser.add_argument(f"--sglang-{name}")
    return parser
