"""spec.grpo's dynamic-sampling fields: defaults, structure and cross-field rules.

Each bad spec is the smallest valid experiment with one mistake, rejected at the exact wire
path with a hint; warnings never block. Kept apart from the shared bad-spec corpus so the
fields' contract reads in one place (docs/rollout.md explains the fields).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.api.validation import errors, parse_experiment
from conftest import minimal_body


def grpo(**fields: Any) -> dict[str, Any]:
    return minimal_body(grpo={"numRollouts": 1, **fields})


def test_defaults_keep_wait_for_all() -> None:
    exp, problems = parse_experiment(minimal_body())
    assert exp is not None and problems == []
    g = exp.spec.grpo
    assert g.over_sampling_batch_size is None and g.effective_over_sampling_batch_size == 32
    assert g.dynamic_sampling_filter is None
    assert g.straggler_policy == "wait" and g.max_refill_rounds == 3


def test_the_recommended_setting_is_valid() -> None:
    body = grpo(
        rolloutBatchSize=64,
        overSamplingBatchSize=72,
        dynamicSamplingFilter="zeroRewardVariance",
        stragglerPolicy="carryOver",
    )
    exp, problems = parse_experiment(body)
    assert exp is not None and problems == []


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("over-sampling below the batch", grpo(overSamplingBatchSize=16),
     "spec.grpo.overSamplingBatchSize"),
    ("over-sampling while waiting for all", grpo(overSamplingBatchSize=40),
     "spec.grpo.overSamplingBatchSize"),
    ("over-sampling beyond twice the batch",
     grpo(overSamplingBatchSize=65, stragglerPolicy="abort"), "spec.grpo.overSamplingBatchSize"),
    ("unknown straggler policy", grpo(stragglerPolicy="partial"), "spec.grpo.stragglerPolicy"),
    ("filter that is no function path", grpo(dynamicSamplingFilter="zero_std"),
     "spec.grpo.dynamicSamplingFilter"),
    ("filter path with a colon", grpo(dynamicSamplingFilter="pkg.mod:fn"),
     "spec.grpo.dynamicSamplingFilter"),
    ("filter on groups of one",
     minimal_body(grpo={"numRollouts": 1, "samplesPerPrompt": 1, "globalBatchSize": 32,
                        "dynamicSamplingFilter": "zeroRewardVariance",
                        "rewardNormalization": {"mode": "identity"}}),
     "spec.grpo.dynamicSamplingFilter"),
    ("negative refill rounds", grpo(maxRefillRounds=-1), "spec.grpo.maxRefillRounds"),
    ("slime's over-sampling flag", minimal_body(runtime={"extraArgs": [
        "--over-sampling-batch-size", "64"]}), "spec.runtime.extraArgs[0]"),
    ("slime's filter flag as key=value", minimal_body(runtime={"extraArgs": [
        "--seed", "5", "--dynamic-sampling-filter-path=a.b"]}),
     "spec.runtime.extraArgs[2]"),
    ("slime's partial rollout", minimal_body(runtime={"extraArgs": ["--partial-rollout"]}),
     "spec.runtime.extraArgs[0]"),
    ("slime's reward normalisation switch",
     minimal_body(runtime={"extraArgs": ["--disable-rewards-normalization"]}),
     "spec.runtime.extraArgs[0]"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "body", "path"), BAD, ids=[c[0] for c in BAD])
def test_rejected_with_exact_path_and_a_hint(case: str, body: dict[str, Any], path: str) -> None:
    exp, problems = parse_experiment(body)
    assert exp is None, f"{case}: accepted"
    found = errors(problems)
    assert [p.path for p in found] == [path], found
    assert all(p.message for p in found)


def test_the_replaced_slime_flag_names_the_spec_field_to_use() -> None:
    _, problems = parse_experiment(
        minimal_body(runtime={"extraArgs": ["--disable-grpo-std-normalization"]})
    )
    (problem,) = errors(problems)
    assert "spec.grpo.rewardNormalization.std" in problem.hint


@pytest.mark.parametrize(
    ("body", "path", "words"),
    [
        (grpo(stragglerPolicy="carryOver"), "spec.grpo.stragglerPolicy", "no effect"),
        (grpo(dynamicSamplingFilter="my_filters.keep"), "spec.grpo.dynamicSamplingFilter",
         "runtime.extraCode"),
        (grpo(overSamplingBatchSize=36, stragglerPolicy="carryOver", offPolicyTokens="train"),
         "spec.grpo.offPolicyTokens", "--use-tis"),
    ],
)  # fmt: skip
def test_warnings_never_block(body: dict[str, Any], path: str, words: str) -> None:
    exp, problems = parse_experiment(body)
    assert exp is not None
    (warning,) = problems
    assert warning.severity == "warning" and warning.path == path
    assert words in f"{warning.message} {warning.hint}"


def test_a_filter_shipped_in_extra_code_is_not_warned() -> None:
    body = grpo(dynamicSamplingFilter="my_filters.keep")
    body["spec"]["runtime"] = {"extraCode": [{"configMap": "my-filters"}]}
    exp, problems = parse_experiment(body)
    assert exp is not None and problems == []


@pytest.mark.parametrize("flag", ["--use-tis", "--get-mismatch-metrics", "--use-rollout-logprobs"])
def test_stale_tokens_trained_with_a_correcting_loss_are_not_warned(flag: str) -> None:
    body = grpo(overSamplingBatchSize=36, stragglerPolicy="carryOver", offPolicyTokens="train")
    body["spec"]["runtime"] = {"extraArgs": [flag]}
    exp, problems = parse_experiment(body)
    assert exp is not None and problems == []


@pytest.mark.parametrize(
    "fields",
    [
        {"offPolicyTokens": "mask"},
        {"offPolicyTokens": "train", "maxPolicyLag": 0},  # nothing stale is ever reused
    ],
)
def test_masked_or_never_reused_stale_tokens_are_not_warned(fields: dict[str, Any]) -> None:
    exp, problems = parse_experiment(
        grpo(overSamplingBatchSize=36, stragglerPolicy="carryOver", **fields)
    )
    assert exp is not None and problems == []
