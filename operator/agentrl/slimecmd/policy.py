"""slime flags agentrl's rollout cannot honour, judged on the composed command (pure).

The table lives in `agentrl.api.slime_flags`, where validation uses it on
`spec.runtime.extraArgs` before any GPU is scheduled; here the launcher applies it once more
to the whole command it is about to run, naming the part each flag came from.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrl.api.slime_flags import (
    DATA_CONTRACT,
    EXTRA_ARGS_ORIGIN,
    HOOKS,
    REFUSALS,
    REPLACED,
    UNHONOURED,
    last_seen,
)
from agentrl.api.slime_flags import refused as _refused
from agentrl.api.slime_flags import unhonoured as _unhonoured
from agentrl.slimecmd.compose import Part

__all__ = [
    "DATA_CONTRACT",
    "HOOKS",
    "REFUSALS",
    "REPLACED",
    "UNHONOURED",
    "last_seen",
    "refusals",
    "unhonoured",
]


def refusals(parts: Sequence[Part]) -> list[str]:
    """One message per refused flag in the command line: the flag, where it came from, why
    slime would stop or ignore it, and the fix."""
    out = []
    for flag, seen, why in _refused(parts):
        shown = flag if seen.value is None else f"{flag} {seen.value}"
        out.append(f"{shown} (from {seen.origin}) cannot work with agentrl's rollout: {why}")
    return out


def unhonoured(parts: Sequence[Part]) -> list[str]:
    """One message per flag of `spec.runtime.extraArgs` that only slime's own rollout reads
    (agentrl renders some of them itself, from the spec, which is what its rollout uses)."""
    return [
        f"{flag} in {EXTRA_ARGS_ORIGIN} has no effect with agentrl's rollout (only "
        f"slime's own rollout reads it, though slime logs it as set): {instead}"
        for flag, instead in _unhonoured(parts)
    ]
