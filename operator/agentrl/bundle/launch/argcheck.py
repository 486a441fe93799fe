"""Refuse flags the image's slime does not define (pure logic).

slime hands the flags it does not know to Megatron with `ignore_unknown_args=True`, so a
typo or a flag a release removed is dropped without a word. The launcher therefore checks
every `--flag` of the composed argv against the option strings of slime's own parser, built
in the image (`probe.slime_parser`), and names the part of the spec each bad flag came from.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Final

from agentrl.slimecmd import Part

# Parsed by slime before its main parser (slime.utils.arguments._pre_parse_mode).
PRE_PARSED_FLAGS: Final = frozenset(
    {"--train-backend", "--debug-rollout-only", "--debug-train-only", "--load-debug-rollout-data"}
)
# A whole option name: argparse does not fold `_` into `-`, so `--save_interval` is not
# `--save-interval` (and must not be read as the known prefix `--save`).
_FLAG = re.compile(r"^--[A-Za-z][A-Za-z0-9_-]*")


def unknown_flags(parts: Sequence[Part], known: frozenset[str]) -> list[tuple[str, str]]:
    """(flag, origin) for every `--flag` slime's parser does not define."""
    allowed = known | PRE_PARSED_FLAGS
    bad: list[tuple[str, str]] = []
    for part in parts[1:]:  # python3 and train.py are not flags
        for arg in part.args:
            m = _FLAG.match(arg)
            if m and m.group(0) not in allowed and (m.group(0), part.origin) not in bad:
                bad.append((m.group(0), part.origin))
    return bad


def unknown_flags_message(bad: Sequence[tuple[str, str]], known: frozenset[str]) -> str:
    lines = []
    for flag, origin in bad:
        close = difflib.get_close_matches(flag, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"  {flag}{hint}  from {origin}")
    return (
        "slime's parser does not know these flags, and slime would ignore them silently:\n"
        + "\n".join(lines)
        + "\nRemove or correct them (spec.runtime.extraArgs is the usual source)."
    )


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value argparse ends up with for `flag`: the one after its last occurrence."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value
