"""slime's own argument parser, built as its parse_args builds it (test support).

Megatron-LM's arguments, then slime's, then SGLang's (behind slime's `--sglang-` prefix), with
the row's own code served by `sitecustomize` (AGENTRL_UPSTREAM_ROOTS). Shared by the scripts
here that parse an argv the way slime would.
"""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    import megatron.training.arguments as margs
    from slime.backends.sglang_utils.arguments import add_sglang_arguments
    from slime.utils.arguments import get_slime_extra_args_provider

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, conflict_handler="resolve")
    parser = margs.add_megatron_arguments(parser) or parser
    get_slime_extra_args_provider()(parser)
    add_sglang_arguments(parser)
    return parser
