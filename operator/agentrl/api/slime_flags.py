"""slime flags agentrl's rollout cannot honour: the one table, used before and after GPUs.

agentrl replaces slime's rollout (`--rollout-function-path`): agents play episodes through
agentrl's gateway, which returns token ids and log-probs, and a reward per episode. Some of
slime's flags need more than that from each sample, and slime then stops at the first
training step, after the whole cluster is up: those are refused (`REFUSALS`). Others are
read only by slime's own rollout, reward models or eval path, so with agentrl they do
nothing while slime logs them as set: the ones a `spec.grpo` field replaces are refused
(`REPLACED`), the rest warned about (`UNHONOURED`), naming the part of the spec that does
the job. The hooks through which agentrl's own code runs inside slime (its rollout, its
reward post-process, its custom config) and the one that would bypass them are refused in
extraArgs too (`HOOKS`): a value there would silently replace agentrl's.

Validation judges `spec.runtime.extraArgs` with this table (`judge_extra_args`), so a spec
that carries such a flag is refused before any GPU is scheduled; the launcher judges the
whole composed command with the same table (`agentrl.slimecmd.policy`).

Each entry names what the slime code it is about does, at the supported commits
(https://github.com/THUDM/slime/tree/fa3c990af and .../624b824a8); the tests check the flags
against each row's own parser and where each is read in its source. argparse keeps the last
value of a repeated flag, so each rule looks at the last occurrence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol


class ArgRun(Protocol):
    """A run of argv and where it came from (`agentrl.slimecmd.compose.Part` is one)."""

    @property
    def origin(self) -> str: ...

    @property
    def args(self) -> tuple[str, ...]: ...


# A whole option name, as argparse matches it (no `_`/`-` folding, no abbreviations).
_FLAG = re.compile(r"^--[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Seen:
    """A flag's last occurrence: its value (None for a switch) and the part it came from."""

    value: str | None
    origin: str


def option_name(arg: str) -> str | None:
    """The option `arg` names, as argparse reads it: `--flag` or `--flag=value`; None for a
    value or anything else."""
    m = _FLAG.match(arg)
    if not m or (len(arg) > m.end() and arg[m.end()] != "="):
        return None
    return m.group(0)


def last_seen(parts: Sequence[ArgRun], takes_value: bool) -> Callable[[str], Seen | None]:
    """Lookup of each flag's last occurrence in `parts` (argparse keeps the last one)."""
    seen: dict[str, Seen] = {}
    for part in parts:
        args = part.args
        for i, arg in enumerate(args):
            name = option_name(arg)
            if name is None:
                continue
            if len(arg) > len(name):  # --flag=value
                seen[name] = Seen(arg[len(name) + 1 :], part.origin)
            else:
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


def _reinforce_plus_plus(seen: Seen, _: Callable[[str], Seen | None]) -> bool:
    return seen.value == "reinforce_plus_plus"


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
        "--log-passrate",
        False,
        _always,
        "slime's train-side pass@k reshapes the step's per-sample raw rewards into "
        "rollout_batch_size x n_samples_per_prompt and asserts their count "
        "(compute_pass_rate); agentrl returns one sample per sequence, so the first step "
        "with an episode whose trace broke into several sequences stops training there",
        "drop it: agentrl_episode_reward and agentrl/episode_reward_mean are per episode, "
        "eval/<name> is slime's per-episode eval mean and eval/<name>/pass@<k> agentrl's "
        "eval pass@k",
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
    # https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/ppo_utils.py#L412
    # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/utils/ppo_utils.py#L415
    Refusal(
        "--advantage-estimator",
        True,
        _reinforce_plus_plus,
        "slime's REINFORCE++ returns assert that no sample is fully masked, and agentrl hands "
        "slime such samples by design: every failed episode (one masked slot, so that it "
        "trains nothing), a carried-over episode under spec.grpo.offPolicyTokens: mask, a "
        "sequence whose turns came without usable logprobs; the first training step with "
        "one stops with 'Sequence at index N is fully masked'",
        "remove it (agentrl renders grpo; spec.grpo.rewardNormalization sets the group "
        "normalisation), or use gspo, cispo, or reinforce_plus_plus_baseline with "
        "--normalize-advantages, which weigh a masked sample at zero",
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


# slime flags whose value names a key of the data rows (a JSON field name, never a secret), so
# the plain-text secret warning on extraArgs passes them by although their names end in -key.
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/data.py#L202-L262
DATA_KEY_FLAGS: Final = frozenset(
    {
        "--input-key",
        "--label-key",
        "--tool-key",
        "--metadata-key",
        "--reward-key",
        "--eval-input-key",
        "--eval-label-key",
        "--eval-tool-key",
        "--eval-reward-key",
    }
)


# slime flags in extraArgs that take the start over from agentrl. `--finetune` decides every
# attempt's (with `--load` of the run Megatron would load its weights as iteration 0, and
# slime would go on at rollout 1). `--load` decides a first run's: once
# spec.checkpoint.path holds the run's own saves, a restart loads them (`restart_load`).
# `--no-load-optim` and `--no-load-rng` only say what a load leaves out: a restart still
# loads the run, or slime takes `--ref-load` at rollout 0 and its saves overwrite the run's
# checkpoints.
START_FLAGS: Final = frozenset({"--load", "--finetune"})


def user_decides_start(extra_args: Iterable[str]) -> bool:
    """extraArgs that set `--load` or `--finetune`: the launcher adds no first-run flags."""
    return any(option_name(a) in START_FLAGS for a in extra_args)


def user_load(extra_args: Sequence[str]) -> str | None:
    """The last `--load` of extraArgs (argparse keeps it), None without one."""
    seen = last_seen([_Run(EXTRA_ARGS_ORIGIN, tuple(extra_args))], takes_value=True)("--load")
    return None if seen is None else seen.value


# slime's Dataset drops, when the job starts, every train row whose `prompt` (the text as it
# is: agentrl renders no --apply-chat-template) is longer than `--rollout-max-prompt-len`
# tokens, and logs only a count at info level; `--rollout-max-context-len` sets that limit to
# its own value less one when the first is unset. A first prompt that is not text skips it.
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/data.py#L81-L127
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/arguments.py#L1997-L2005
PROMPT_LEN_FLAG: Final = "--rollout-max-prompt-len"
CONTEXT_LEN_FLAG: Final = "--rollout-max-context-len"


def prompt_limit(extra_args: Sequence[str]) -> tuple[int, str] | None:
    """(the prompt length slime's Dataset filters the train rows by, the extraArgs flag that
    sets it), None when nothing does (or the value is no integer: slime's parser says so)."""
    lookup = last_seen([_Run(EXTRA_ARGS_ORIGIN, tuple(extra_args))], takes_value=True)
    for flag, less in ((PROMPT_LEN_FLAG, 0), (CONTEXT_LEN_FLAG, 1)):
        seen = lookup(flag)
        if seen is not None and seen.value is not None:
            try:
                return int(seen.value) - less, f"{flag} {seen.value}"
            except ValueError:
                return None
    return None


# slime counts rollouts from `--start-rollout-id` when it is set, also when `--load` names a
# saved run: only a None lets it take the next rollout from the checkpoint's iteration
# (create_training_models in slime/ray/placement_group.py at both supported commits). So a
# restart with it set loads the saved weights and optimizer, then trains from that rollout
# again, with the data position of the rollout before it, and saves over the run's checkpoints.
START_ROLLOUT_FLAG: Final = "--start-rollout-id"
START_ROLLOUT_WHY: Final = (
    "slime takes the next rollout from the checkpoint's iteration only when this flag is "
    "unset: a retry (backoffLimit) or a resume would load the saved weights and optimizer, "
    "then train again from this rollout (and the data position before it), saving over the "
    "run's checkpoints"
)
START_ROLLOUT_FIX: Final = (
    "remove it: a restart goes on after the saved iteration by itself (or set "
    "spec.checkpoint.resume: false to start every attempt over from the model)"
)


def last_index(extra_args: Sequence[str], flag: str) -> int | None:
    """Index of the last occurrence of `flag` in extraArgs, None without one."""
    hits = [i for i, a in enumerate(extra_args) if option_name(a) == flag]
    return hits[-1] if hits else None


def fixed_start_rollout(extra_args: Sequence[str]) -> int | None:
    """Index of the last `--start-rollout-id` in extraArgs, None without one."""
    return last_index(extra_args, START_ROLLOUT_FLAG)


# slime's slime_validate_args asserts "'--save' is required when save_interval is set" (both
# supported commits); agentrl renders --save only from spec.checkpoint.path.
SAVE_INTERVAL_FLAG: Final = "--save-interval"
SAVE_INTERVAL_WITHOUT_PATH: Final = (
    "--save-interval without spec.checkpoint.path: agentrl renders --save only from "
    "checkpoint.path, and slime stops at start (\"'--save' is required when save_interval "
    'is set"), after the cluster is up'
)
SAVE_INTERVAL_FIX: Final = (
    "set spec.checkpoint.path (on a volume every Ray pod mounts) and "
    "spec.checkpoint.saveInterval, and remove --save-interval"
)


def save_interval(extra_args: Sequence[str]) -> int | None:
    """The last `--save-interval` of extraArgs (argparse keeps it, and it comes after the one
    agentrl renders from spec.checkpoint.saveInterval); None without one, or when it is no
    integer (slime's parser says so)."""
    seen = last_seen([_Run(EXTRA_ARGS_ORIGIN, tuple(extra_args))], takes_value=True)(
        SAVE_INTERVAL_FLAG
    )
    try:
        return None if seen is None or seen.value is None else int(seen.value)
    except ValueError:
        return None


def restart_load(extra_args: Sequence[str], checkpoint_path: str | None) -> bool:
    """Whether a restart must pass `--load <checkpoint_path>` after extraArgs: they load
    another directory (a first run's start, e.g. another run's checkpoint) and do not
    `--finetune`. Without it every retry loaded that directory again, redid each rollout
    since, and saved over the run's own checkpoints."""
    if checkpoint_path is None or any(option_name(a) == "--finetune" for a in extra_args):
        return False
    load = user_load(extra_args)
    return load is not None and load.rstrip("/") != checkpoint_path.rstrip("/")


# What makes slime's policy loss use the logprobs a token was sampled with: `--use-tis`
# weighs each token by exp(old - rollout logprob) (so does `--get-mismatch-metrics`, which
# runs the same TIS function on the loss), `--use-rollout-logprobs` takes them as the PPO
# ratio's old logprobs. Without any of them, the trainer recomputes the old logprobs with its
# current weights before the step and `rollout_log_probs` reach only metrics, so a token an
# older policy sampled trains with ratio 1, as if on-policy.
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/backends/megatron_utils/actor.py#L464-L491
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/backends/megatron_utils/loss.py#L912
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/backends/megatron_utils/loss.py#L987
# https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/backends/megatron_utils/loss.py#L965
OFF_POLICY_CORRECTIONS: Final = ("--use-tis", "--get-mismatch-metrics", "--use-rollout-logprobs")


def corrects_off_policy(extra_args: Sequence[str]) -> bool:
    """Whether extraArgs turn on a slime loss that uses the sampling policy's logprobs."""
    return any(last_index(extra_args, flag) is not None for flag in OFF_POLICY_CORRECTIONS)


# Where the spec's own slime flags come from in the composed command (only these are judged
# against REPLACED and UNHONOURED: agentrl renders some of those flags itself, from spec.grpo).
EXTRA_ARGS_ORIGIN: Final = "spec.runtime.extraArgs"
# slime flags a spec field replaces: refused in extraArgs, with the field to use.
REPLACED: Final = {
    "--over-sampling-batch-size": "spec.grpo.overSamplingBatchSize",
    "--dynamic-sampling-filter-path": "spec.grpo.dynamicSamplingFilter",
    "--partial-rollout": "spec.grpo.stragglerPolicy",
    "--mask-offpolicy-in-partial-rollout": "spec.grpo.offPolicyTokens",
    "--disable-rewards-normalization": "spec.grpo.rewardNormalization.mode",
    "--disable-grpo-std-normalization": "spec.grpo.rewardNormalization.std",
    "--n-samples-per-eval-prompt": "spec.data.eval[].samplesPerPrompt",
    # Rendered by agentrl from the spec (`agentrl.slimecmd.flags.data_args`); a later value in
    # extraArgs wins in slime's argparse, behind validation's and `agentrl rehearse`'s backs.
    "--prompt-data": "spec.data.train",
    "--num-rollout": "spec.grpo.numRollouts",
    "--rollout-batch-size": "spec.grpo.rolloutBatchSize",
    "--n-samples-per-prompt": "spec.grpo.samplesPerPrompt",
    "--global-batch-size": "spec.grpo.globalBatchSize",
    "--rollout-max-response-len": "spec.grpo.maxResponseLength",
    "--rollout-temperature": "spec.grpo.temperature",
    "--num-epoch": "spec.grpo.numRollouts",
    "--num-steps-per-rollout": "spec.grpo.globalBatchSize",
    "--save": "spec.checkpoint.path",
    "--sglang-context-length": "spec.model.contextLength",
}
# How slime's Dataset turns a train row into the sample agentrl's rollout hands to the agent;
# agentrl fixes it (`--input-key prompt --metadata-key metadata`, no chat template), and
# `agentrl rehearse` reads the rows the same way: refused in extraArgs.
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/data.py#L202-L262
DATA_CONTRACT: Final = {
    "--input-key": "slime's Dataset would take each train row's prompt from another key",
    "--metadata-key": "slime's Dataset would take each train row's agent payload from another key",
    "--tool-key": "slime's Dataset would add another key of each train row to the agent payload "
    "as `metadata.tools` (the rows' `tools`, which `agentrl rehearse` and eval sets use, "
    "would no longer reach it)",
    "--apply-chat-template": "slime's Dataset would hand the agent the chat-template text of "
    "the prompt (<|im_start|>user ... <|im_start|>assistant), which the gateway templates "
    "again as the agent's user message",
}
_DATA_CONTRACT_FIX: Final = (
    "remove it: the train rows' contract is fixed, each row's `prompt` (the agent's input as "
    "it is) and `metadata` (the agent payload), as `agentrl rehearse` and the validation of "
    "spec.data.train read them; the gateway applies the model's chat template"
)
# agentrl's own code inside slime (`agentrl.slimecmd.flags.hook_args`), and slime's hook that
# would bypass it: argparse keeps the extraArgs value, so one there would silently replace
# agentrl's part, and with it what agentrl guarantees. Refused in extraArgs: (why, fix).
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/ray/rollout.py#L686-L719
# https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/ray/rollout.py#L608-L642
HOOKS: Final = {
    "--custom-reward-post-process-path": (
        "slime normalises the step's rewards with the function its args name, in place of "
        "agentrl's, which weighs each episode once in its group and leaves failed episodes "
        "out of its statistics (spec.grpo.rewardNormalization, spec.grpo.failedEpisodes): a "
        "failed episode's stand-in reward 0 would move its siblings' advantages",
        "remove it: spec.grpo.rewardNormalization (mode, std) and spec.grpo.failedEpisodes "
        "set agentrl's normalisation",
    ),
    "--custom-convert-samples-to-train-data-path": (
        "slime's RolloutManager hands the samples to that function in place of its own "
        "conversion, which runs agentrl's reward post-process and zeroes the loss mask of "
        "every sample marked remove_sample (failed episodes): neither would run",
        "remove it: spec.grpo sets how agentrl's rewards are normalised",
    ),
    "--rollout-function-path": (
        "it replaces agentrl's rollout (spec.agent's episodes through the gateway, "
        "spec.grpo's dynamic sampling and failure handling) with another rollout function",
        "remove it: agentrl renders its own rollout function",
    ),
    "--custom-config-path": (
        "agentrl renders it: the file names agentrl's runtime config to the reward "
        "post-process, which stops at the first training step without it",
        "remove it: agentrl's settings come from the spec",
    ),
}
# Why a REPLACED flag is refused, where it is not only read by what agentrl replaces.
_REPLACED_WHY: Final = {
    # slime's eval logging (RolloutManager.eval, which runs on agentrl's eval output) groups
    # the per-episode eval rewards by it for pass@k (--log-passrate): a value other than the
    # sets' samplesPerPrompt fails its assert, or pairs episodes of different prompts.
    # https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/ray/rollout.py#L1273-L1279
    # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/observability/rollout_metrics.py#L238-L245
    "--n-samples-per-eval-prompt": (
        "slime's eval logging groups agentrl's per-episode eval rewards by it for pass@k "
        "(--log-passrate), while agentrl runs each eval set's samplesPerPrompt (and renders "
        "this flag from it): another value fails slime's pass@k assert at the eval, or "
        "groups episodes of different prompts together"
    ),
    # slime trains `--global-batch-size` rollouts per optimizer step and drops the rollouts
    # past the last whole step, or asserts at the first step when a rollout has fewer
    # (build_dp_schedule, the same at both commits):
    # https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/dp_schedule.py#L135-L150
    **dict.fromkeys(
        ("--rollout-batch-size", "--n-samples-per-prompt", "--global-batch-size"),
        "slime splits each rollout's rolloutBatchSize x samplesPerPrompt episodes into optimizer "
        "steps of globalBatchSize, dropping the episodes past the last whole step or stopping "
        "at the first step when there are fewer (agentrl renders all three from spec.grpo and "
        "validates that they divide; a value here skips that check, and GRPO's group-size "
        "checks and `agentrl rehearse` keep the spec's)",
    ),
    "--num-rollout": (
        "slime's train loop stops after it, while agentrl's progress metric "
        "(agentrl_rollout_total_steps) and the evalInterval check use spec.grpo.numRollouts"
    ),
    **dict.fromkeys(
        ("--rollout-max-response-len", "--rollout-temperature"),
        "agentrl renders it from the spec; a value here changes what training samples with, "
        "while `agentrl rehearse` and validation (maxResponseLength below "
        "model.contextLength) keep the spec's",
    ),
    # slime ignores --num-epoch when --num-rollout is set (it logs so), and derives the global
    # batch size from --num-steps-per-rollout, asserting it equals --global-batch-size:
    # https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/arguments.py#L1941-L1966
    "--num-epoch": (
        "slime ignores it, since agentrl always renders --num-rollout (from "
        "spec.grpo.numRollouts): the run would train numRollouts steps, not the epochs asked for"
    ),
    "--num-steps-per-rollout": (
        "slime derives a global batch size from it and stops at start unless it equals the "
        "--global-batch-size agentrl renders from spec.grpo (globalBatchSize, or "
        "rolloutBatchSize x samplesPerPrompt)"
    ),
    "--prompt-data": (
        "agentrl renders it from spec.data.train; a value here trains on another file than "
        "the one `agentrl rehearse` runs and validation checks"
    ),
    # The launcher passes `--load` only when spec.checkpoint.path holds a saved run
    # (agentrl.slimecmd.checkpoint), and keeps the rollout's state and the logs there; slime
    # saves where argparse's last --save says.
    "--save": (
        "slime would save the run there while agentrl judges spec.checkpoint.path at each "
        "pod start: a retry (backoffLimit) or a resume finds no saved run in it, starts over "
        "from the model at rollout 0, and saves over the checkpoints of the attempt before"
    ),
    # slime starts every SGLang engine with it (a flag built from SGLang's ServerArgs), while
    # the gateway caps each call by the spec's context, the one the launcher's preflight and
    # `agentrl rehearse` judge against the checkpoint.
    "--sglang-context-length": (
        "slime starts the SGLang engines with it, while agentrl's gateway caps every model "
        "call at the room left in spec.model.contextLength (else the checkpoint's "
        "config.json), the context the launcher and `agentrl rehearse` check: a shorter value "
        "here has the engines refuse the long calls of a conversation the gateway let through "
        "(HTTP 400 to the agent), a longer one has them refuse to start"
    ),
}


@dataclass(frozen=True)
class _Run:
    origin: str
    args: tuple[str, ...]


def refused(parts: Sequence[ArgRun]) -> list[tuple[str, Seen, str]]:
    """(flag, its last occurrence, why and fix) for each flag slime cannot run with."""
    out = []
    for rule in REFUSALS:
        lookup = last_seen(parts, rule.takes_value)
        seen = lookup(rule.flag)
        if seen is not None and rule.applies(seen, lookup):
            out.append((rule.flag, seen, f"{rule.why}. Fix: {rule.fix}"))
    lookup = last_seen([p for p in parts if p.origin == EXTRA_ARGS_ORIGIN], takes_value=False)
    for flag, field in REPLACED.items():
        seen = lookup(flag)
        if seen is not None:
            reason = _REPLACED_WHY.get(
                flag,
                "only slime's default rollout and reward normaliser read it, and agentrl "
                "replaces them",
            )
            why = f"{reason}. Fix: remove it and set {field}"
            out.append((flag, seen, why))
    for flag, reason in DATA_CONTRACT.items():
        seen = lookup(flag)
        if seen is not None:
            out.append((flag, seen, f"{reason}. Fix: {_DATA_CONTRACT_FIX}"))
    for flag, (reason, fix) in HOOKS.items():
        seen = lookup(flag)
        if seen is not None:
            out.append((flag, seen, f"{reason}. Fix: {fix}"))
    return out


def unhonoured(parts: Sequence[ArgRun]) -> list[tuple[str, str]]:
    """(flag, what to use instead) for each flag of extraArgs only slime's own code reads."""
    lookup = last_seen([p for p in parts if p.origin == EXTRA_ARGS_ORIGIN], takes_value=False)
    return [(u.flag, u.instead) for u in UNHONOURED if lookup(u.flag) is not None]


def judge_extra_args(extra_args: Sequence[str]) -> list[tuple[int, bool, str]]:
    """(index of the flag's last occurrence, is an error, message) for each flag of
    `spec.runtime.extraArgs` the table names."""
    run = [_Run(EXTRA_ARGS_ORIGIN, tuple(extra_args))]

    def where(flag: str) -> int:
        hits = [i for i, a in enumerate(extra_args) if a == flag or a.startswith(flag + "=")]
        return hits[-1]

    found = [
        (where(flag), True, f"{flag} cannot work with agentrl's rollout: {why}")
        for flag, _, why in refused(run)
    ]
    found += [
        (where(flag), False, f"{flag} has no effect with agentrl's rollout (only slime's own "
         f"rollout reads it, though slime logs it as set): {instead}")
        for flag, instead in unhonoured(run)
    ]  # fmt: skip
    return sorted(found)
