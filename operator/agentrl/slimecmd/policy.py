"""slime flags agentrl's rollout cannot honour (pure): refused, or warned about.

agentrl replaces slime's rollout (`--rollout-function-path`): agents play episodes through
agentrl's gateway, which returns token ids and log-probs, and a reward per episode. Some of
slime's flags need more than that from each sample, and slime then stops at the first
training step, after the whole cluster is up; those are refused (`refusals`). Others are
read only by slime's own rollout, reward models or eval path, so with agentrl they do
nothing while slime logs them as set; those are warned about (`unhonoured`), naming the part
of the spec that does the job.

Each entry names what the slime code it is about does, at the supported commits
(https://github.com/THUDM/slime/tree/fa3c990af and .../624b824a8); the tests check the flags
against each row's own parser and where each is read in its source.

argparse keeps the last value of a repeated flag, so each rule looks at the last occurrence
and names the part of the command line it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from agentrl.slimecmd.compose import EXTRA_ARGS_ORIGIN, Part

# A whole option name, as argparse matches it (no `_`/`-` folding, no abbreviations).
_FLAG = re.compile(r"^--[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Seen:
    """A flag's last occurrence: its value (None for a switch) and the part it came from."""

    value: str | None
    origin: str


def last_seen(parts: Sequence[Part], takes_value: bool) -> Callable[[str], Seen | None]:
    """Lookup of each flag's last occurrence in `parts` (argparse keeps the last one)."""
    seen: dict[str, Seen] = {}
    for part in parts:
        args = part.args
        for i, arg in enumerate(args):
            m = _FLAG.match(arg)
            if not m:
                continue
            name = m.group(0)
            if len(arg) > len(name) and arg[len(name)] == "=":
                seen[name] = Seen(arg[len(name) + 1 :], part.origin)
            elif len(arg) == len(name):
                value = args[i + 1] if takes_value and i + 1 < len(args) else None
                seen[name] = Seen(value, part.origin)
    return seen.get


@dataclass(frozen=True)
class Refusal:
    """A flag slime cannot run with under agentrl's rollout."""

    flag: str
    takes_value: bool
    applies: Callable[[Seen, Callable[[str], Seen | None]], bool]
    why: str
    fix: str


def _not_one(seen: Seen, _: Callable[[str], Seen | None]) -> bool:
    try:
        return float(seen.value or "1") != 1.0
    except ValueError:
        return False  # slime's own parser reports a malformed number


def _always(seen: Seen, _: Callable[[str], Seen | None]) -> bool:
    return True


def _with_use_opd(seen: Seen, lookup: Callable[[str], Seen | None]) -> bool:
    return seen.value == "sglang" and lookup("--use-opd") is not None


REFUSALS: Final = (
    Refusal(
        "--rollout-top-p",
        True,
        _not_one,
        "below 1.0, slime trains on the nucleus of token ids the rollout engine sampled from "
        "(Sample.rollout_top_p_token_ids); agentrl's gateway does not record them, so slime "
        "stops at the first training step (fa3c990: its policy loss raises; 624b824: its "
        "RolloutManager asserts every sample has them)",
        "drop it: agentrl's rollout samples from the full distribution (spec.grpo.temperature "
        "sets the temperature)",
    ),
    Refusal(
        "--use-rollout-routing-replay",
        False,
        _always,
        "replays the experts SGLang routed each token to (Sample.rollout_routed_experts), "
        "which agentrl's gateway does not record; slime's actor raises 'rollout_routed_experts "
        "is required' at the first training step",
        "drop it; --use-routing-replay replays the routing of the trainer's own forward pass "
        "and needs nothing from the rollout",
    ),
    Refusal(
        "--reward-key",
        True,
        _always,
        "agentrl's reward is one number per episode, and slime reads reward[--reward-key] "
        "(Sample.get_reward_value) when it logs a step: a TypeError at the first step",
        "drop it: the agent's reward is used as it is (spec.agent)",
    ),
    Refusal(
        "--opd-type",
        True,
        _with_use_opd,
        "on-policy distillation of type sglang trains on teacher log-probs that slime's own "
        "rollout stores on each sample (slime.rollout.on_policy_distillation); agentrl's "
        "rollout has none, and slime's loss raises 'requires teacher_log_probs'",
        "use --opd-type megatron with --opd-teacher-load (the teacher runs in the trainer)",
    ),
)

# Where in the spec to look instead, for flags only slime's own rollout reads.
_SAMPLING = (
    "agentrl's rollout decides which episodes train (spec.grpo; over-sampling, dynamic "
    "sampling and stragglers are agentrl settings there)"
)
_GENERATION = (
    "agentrl's gateway generates for the agents: sampling from spec.grpo.temperature and "
    "spec.grpo.maxResponseLength, stopping at the chat template's end of turn"
)
_REWARD = "rewards come from the agent (spec.agent) and are normalised per group (spec.grpo)"
_EVAL = (
    "agentrl evaluates the sets in spec.data.eval, each with its own samplesPerPrompt, "
    "temperature and maxResponseLength"
)


@dataclass(frozen=True)
class Unhonoured:
    """A flag only slime's own rollout, reward or eval code reads."""

    flag: str
    instead: str


UNHONOURED: Final = tuple(
    Unhonoured(flag, instead)
    for flags, instead in (
        (
            (
                "--over-sampling-batch-size",
                "--dynamic-sampling-filter-path",
                "--partial-rollout",
                "--mask-offpolicy-in-partial-rollout",
                "--rollout-sample-filter-path",
                "--rollout-all-samples-process-path",
                "--custom-generate-function-path",
            ),
            _SAMPLING,
        ),
        (
            (
                "--rollout-stop",
                "--rollout-stop-token-ids",
                "--rollout-top-k",
                "--rollout-skip-special-tokens",
            ),
            _GENERATION,
        ),
        (("--rm-type", "--custom-rm-path", "--group-rm"), _REWARD),
        (
            (
                "--eval-prompt-data",
                "--n-samples-per-eval-prompt",
                "--eval-temperature",
                "--eval-top-p",
                "--eval-top-k",
                "--eval-max-response-len",
                "--eval-max-prompt-len",
                "--eval-min-new-tokens",
                "--eval-input-key",
                "--eval-label-key",
                "--eval-tool-key",
                "--eval-reward-key",
            ),
            _EVAL,
        ),
    )
    for flag in flags
)


def refusals(parts: Sequence[Part]) -> list[str]:
    """One message per refused flag in the command line: the flag, where it came from, why
    slime would stop, and the fix."""
    out = []
    for rule in REFUSALS:
        lookup = last_seen(parts, rule.takes_value)
        seen = lookup(rule.flag)
        if seen is not None and rule.applies(seen, lookup):
            shown = rule.flag if seen.value is None else f"{rule.flag} {seen.value}"
            out.append(
                f"{shown} (from {seen.origin}) cannot work with agentrl's rollout: {rule.why}. "
                f"Fix: {rule.fix}"
            )
    return out


def unhonoured(parts: Sequence[Part]) -> list[str]:
    """One message per flag of `spec.runtime.extraArgs` that only slime's own rollout reads
    (agentrl renders some of them itself, from the spec, which is what its rollout uses)."""
    extra = [p for p in parts if p.origin == EXTRA_ARGS_ORIGIN]
    lookup = last_seen(extra, takes_value=False)
    return [
        f"{rule.flag} in {EXTRA_ARGS_ORIGIN} has no effect with agentrl's rollout (only "
        f"slime's own rollout reads it, though slime logs it as set): {rule.instead}"
        for rule in UNHONOURED
        if lookup(rule.flag) is not None
    ]
