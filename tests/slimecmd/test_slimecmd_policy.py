"""The flag policy's own rules: argparse's last value, the part a flag came from, and which
flags are judged where (tests/bundle/launch/test_launch_policy.py checks the rules against
slime's own parser and code at each row)."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl import slimecmd
from agentrl.api.models import RLExperiment
from agentrl.api.slime_flags import EXTRA_ARGS_ORIGIN
from agentrl.api.validation import errors, parse_experiment
from agentrl.slimecmd import Part, policy
from conftest import ROOT, load_example, minimal_body

LAUNCHER = Part("launcher", ("python3", "train.py"))


def extra(*args: str) -> list[Part]:
    return [LAUNCHER, Part(EXTRA_ARGS_ORIGIN, args)]


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (("--rollout-top-p", "0.95"), "--rollout-top-p 0.95"),
        (("--rollout-top-p=0.9",), "--rollout-top-p 0.9"),
        (("--rollout-top-p", "0.9", "--rollout-top-p", "1.0"), None),  # argparse keeps 1.0
        (("--rollout-top-p", "1"), None),
        (("--rollout-top-p", "one"), None),  # slime's own parser reports it
        (("--use-rollout-routing-replay",), "--use-rollout-routing-replay"),
        (("--use-routing-replay",), None),
        (("--reward-key", "score"), "--reward-key score"),
        (("--reward-key=score",), "--reward-key score"),
        (("--use-opd", "--opd-type", "sglang"), "--opd-type sglang"),
        (("--opd-type", "sglang", "--use-opd"), "--opd-type sglang"),
        (("--use-opd", "--opd-type", "megatron"), None),
        (("--opd-type", "sglang"), None),  # slime ignores the type without --use-opd
        (("--rollout-top-p_x", "0.5"), None),  # not the flag (argparse does not fold names)
    ],
)
def test_refusals_follow_argparse(args: tuple[str, ...], refused: str | None) -> None:
    messages = policy.refusals(extra(*args))
    if refused is None:
        assert messages == []
    else:
        (message,) = messages
        assert message.startswith(f"{refused} (from {EXTRA_ARGS_ORIGIN}) cannot work")
        assert "Fix: " in message


def test_a_refusal_names_the_part_the_last_value_came_from() -> None:
    parts = [
        LAUNCHER,
        Part("slime's scripts/models/x.sh", ("--rollout-top-p", "0.8")),
        Part(EXTRA_ARGS_ORIGIN, ("--lr", "1e-6")),
    ]
    (message,) = policy.refusals(parts)
    assert message.startswith("--rollout-top-p 0.8 (from slime's scripts/models/x.sh)")
    parts.append(Part(EXTRA_ARGS_ORIGIN, ("--rollout-top-p", "1.0")))
    assert policy.refusals(parts) == []


def test_unhonoured_flags_are_judged_only_in_extra_args() -> None:
    rendered = Part("spec", ("--eval-temperature", "0.0", "--n-samples-per-eval-prompt", "4"))
    assert policy.unhonoured([LAUNCHER, rendered]) == []
    parts = [
        LAUNCHER,
        rendered,
        Part(EXTRA_ARGS_ORIGIN, ("--eval-temperature=0.6", "--over-sampling-batch-size", "64")),
    ]
    warnings = policy.unhonoured(parts)
    assert [w.split()[0] for w in warnings] == ["--eval-temperature"]
    assert (
        "spec.data.eval" in warnings[0] and f"in {EXTRA_ARGS_ORIGIN} has no effect" in warnings[0]
    )
    # A flag a spec.grpo field replaces is refused in extraArgs (validation refuses it first).
    (refused,) = policy.refusals(parts)
    assert refused.startswith(f"--over-sampling-batch-size (from {EXTRA_ARGS_ORIGIN})")
    assert "spec.grpo.overSamplingBatchSize" in refused


def test_every_flag_is_judged_once() -> None:
    refused = [r.flag for r in policy.REFUSALS]
    warned = [u.flag for u in policy.UNHONOURED]
    assert len(set(refused)) == len(refused) and len(set(warned)) == len(warned)
    assert not set(refused) & set(warned)


@pytest.mark.parametrize("name", ["qwen2.5-3b-gsm8k-agentcore", "qwen2.5-7b-http-agent-two-evals",
                                  "qwen3-32b-swe-4node-tp-pp"])  # fmt: skip
def test_the_examples_pass(name: str) -> None:
    exp, problems = parse_experiment(load_example(name))
    assert exp is not None, problems
    parts = slimecmd.compose(exp.spec, slimecmd.PodFacts()).parts
    assert policy.refusals(parts) == []
    assert policy.unhonoured(parts) == []


def test_extra_args_of_a_spec_reach_the_policy() -> None:
    body: dict[str, Any] = minimal_body()
    body["spec"].setdefault("runtime", {})["extraArgs"] = ["--use-rollout-routing-replay"]
    # Validation refuses it before any GPU is scheduled, from the same table...
    _, problems = parse_experiment(body)
    (problem,) = errors(problems)
    assert problem.path == "spec.runtime.extraArgs[0]"
    assert "--use-rollout-routing-replay" in problem.message and problem.hint
    # ...and the launcher, judging the composed command, again (a spec that skipped it).
    exp = RLExperiment.model_validate(body)
    (message,) = policy.refusals(slimecmd.compose(exp.spec, slimecmd.PodFacts()).parts)
    assert message.startswith(f"--use-rollout-routing-replay (from {EXTRA_ARGS_ORIGIN})")


def test_docs_list_every_flag_of_the_one_table() -> None:
    """docs/launcher.md's tables are the user's view of agentrl.api.slime_flags: no flag of
    the table may be missing from them."""
    text = (ROOT / "docs" / "launcher.md").read_text(encoding="utf-8")
    flags = [r.flag for r in policy.REFUSALS] + [u.flag for u in policy.UNHONOURED]
    flags += list(policy.REPLACED) + list(policy.DATA_CONTRACT) + list(policy.HOOKS)
    assert [f for f in flags if f"`{f}" not in text] == []


def test_a_flag_has_one_verdict() -> None:
    """Refused, replaced or unhonoured: never two of them."""
    groups = [{r.flag for r in policy.REFUSALS}, set(policy.REPLACED),
              {u.flag for u in policy.UNHONOURED}, set(policy.DATA_CONTRACT),
              set(policy.HOOKS)]  # fmt: skip
    assert all(not (a & b) for i, a in enumerate(groups) for b in groups[i + 1 :])


# What agentrl renders from the spec (or fixes for the data rows), set again in extraArgs.
# argparse keeps the extraArgs value, behind validation's and `agentrl rehearse`'s backs
# (tests/bundle/launch/test_launch_policy.py runs slime's own code on each).
OVERRIDES = {
    ("--n-samples-per-prompt", "4"): "spec.grpo.samplesPerPrompt",
    ("--rollout-batch-size", "3"): "spec.grpo.rolloutBatchSize",
    ("--global-batch-size", "16"): "spec.grpo.globalBatchSize",
    ("--num-rollout", "5"): "spec.grpo.numRollouts",
    ("--rollout-temperature", "0.2"): "spec.grpo.temperature",
    ("--rollout-max-response-len", "99"): "spec.grpo.maxResponseLength",
    ("--prompt-data", "/x.jsonl"): "spec.data.train",
    ("--save", "/ckpt/elsewhere"): "spec.checkpoint.path",
    ("--sglang-context-length", "16384"): "spec.model.contextLength",
    ("--input-key", "question"): "`prompt`",
    ("--metadata-key", "meta"): "`metadata`",
    ("--tool-key", "fns"): "`metadata`",
    ("--apply-chat-template",): "chat template",
}


@pytest.mark.parametrize(("args", "instead"), list(OVERRIDES.items()))
def test_a_spec_value_set_again_in_extra_args_is_refused(
    args: tuple[str, ...], instead: str
) -> None:
    body: dict[str, Any] = load_example("qwen2.5-3b-gsm8k-agentcore")
    body["spec"].setdefault("runtime", {})["extraArgs"] = ["--lr", "1e-6", *args]
    _, problems = parse_experiment(body)
    (problem,) = [p for p in errors(problems) if args[0] in p.message]
    assert problem.path == "spec.runtime.extraArgs[2]"
    assert instead in problem.hint
    # The launcher judges the composed command with the same table (the spec renders the
    # same flag earlier, which is not judged: only the extraArgs occurrence is).
    exp = RLExperiment.model_validate(body)
    (message,) = policy.refusals(slimecmd.compose(exp.spec, slimecmd.PodFacts()).parts)
    assert message.startswith(f"{args[0]}") and f"(from {EXTRA_ARGS_ORIGIN})" in message


@pytest.mark.parametrize("flag", ["--input-key", "--label-key", "--tool-key", "--metadata-key",
                                  "--eval-input-key", "--eval-label-key"])  # fmt: skip
def test_a_flag_naming_a_data_key_is_not_called_a_secret(flag: str) -> None:
    body: dict[str, Any] = minimal_body()
    body["spec"].setdefault("runtime", {})["extraArgs"] = [flag, "answer"]
    _, problems = parse_experiment(body)
    assert [p.message for p in problems if "takes a secret" in p.message] == []


@pytest.mark.parametrize("flag", ["--wandb-key", "--sglang-api-key", "--sglang-admin-api-key"])
def test_a_flag_taking_a_secret_still_warns(flag: str) -> None:
    body: dict[str, Any] = minimal_body()
    body["spec"].setdefault("runtime", {})["extraArgs"] = [f"{flag}=s3cr3t"]
    _, problems = parse_experiment(body)
    assert [p.path for p in problems if "takes a secret" in p.message] == [
        "spec.runtime.extraArgs[0]"
    ]


@pytest.mark.parametrize(
    "args",
    [("--rollout-stop-token-ids", "151645"), ("--rl-skip-bos-token",),
     ("--calculate-per-token-loss",), ("--moe-token-dispatcher-type", "alltoall")],
)  # fmt: skip
def test_a_flag_with_token_in_its_name_but_no_secret_is_not_called_a_secret(
    args: tuple[str, ...],
) -> None:
    """slime's token-id, per-token and switch flags carry no secret: only a flag whose last
    word names one, and that is given a value, is warned about."""
    body: dict[str, Any] = minimal_body()
    body["spec"].setdefault("runtime", {})["extraArgs"] = [*args, "--lr", "1e-6"]
    _, problems = parse_experiment(body)
    assert [p.message for p in problems if "takes a secret" in p.message] == []


@pytest.mark.parametrize("args", [("--wandb-key", "s3cr3t"), ("--hf-token", "hf_x")])
def test_a_secret_flag_given_its_value_apart_still_warns(args: tuple[str, ...]) -> None:
    body: dict[str, Any] = minimal_body()
    body["spec"].setdefault("runtime", {})["extraArgs"] = ["--lr", "1e-6", *args]
    _, problems = parse_experiment(body)
    assert [p.path for p in problems if "takes a secret" in p.message] == [
        "spec.runtime.extraArgs[2]"
    ]
