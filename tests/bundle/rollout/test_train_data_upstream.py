"""A train step of agentrl's rollout, as slime's own trainer receives it, at each pinned commit.

tests/support/upstream_site/slime_train_data.py runs `train_batch` on slime's own data source
and `Sample`, then hands what it returns through the row's own code exactly as slime does
after a rollout: the RolloutManager's rollout-id check, flattening, reward post-process (the
one the parsed args name) and conversion to train data, the DP schedule, then on the
trainer's side `compute_advantages_and_returns` (real CPU torch) and `get_batch`'s packed
token and loss-mask layout. The argv is what agentrl renders for the spec, with the case's
`spec.runtime.extraArgs` last, parsed by the row's own parser.

What must hold, for every flag a user may set there:
- an infrastructure failure (here an agent error) trains no token and never moves another
  episode's advantage (`failedEpisodes: exclude`);
- tokens, loss masks and log-probs reach the trainer as sampled: one mask and one log-prob
  per response token, no empty response, none over `--rollout-max-response-len`, and the
  packed mask marks exactly the logits that predict a sampled completion token;
- every prompt's group comes back whole and contiguous, one `rollout_id` per episode.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import pytest
from tests.support import slime_upstream

from agentrl.api.slime_flags import HOOKS, judge_extra_args

ROWS = slime_upstream.ROWS
N = 4
# Per prompt, what its four episodes do. Rows are shuffled by slime's data source
# (--rollout-shuffle), so groups are told apart by their row id.
FAILURE_ROWS = [
    {"behavior": ["ok", "error", "ok", "ok"], "reward": [1, 0, 0, 1]},  # 1, failure, 0, 1
    {"behavior": "ok", "reward": [1, 0, 1, 0]},
    {"behavior": ["error", "ok", "error", "error"], "reward": 1},  # one task outcome
]
COMPLETION_TOKENS = {40, 41, 50, *range(100, 140)}  # what the stub agent's model "sampled"
EPS = 1e-6  # slime's, and agentrl's post-process's

# The flags a user can set in runtime.extraArgs that decide what becomes of the rewards
# (slime's own --disable-rewards-normalization and --disable-grpo-std-normalization are
# refused there: spec.grpo.rewardNormalization replaces them), and the spec's own switch.
SETTINGS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "grpo": ({}, []),
    "grpo_std": ({"rewardNormalization": {"std": True}}, []),
    "normalize_advantages": ({}, ["--normalize-advantages"]),
    "gspo": ({}, ["--advantage-estimator", "gspo"]),
    "cispo": ({}, ["--advantage-estimator", "cispo"]),
    "reinforce_plus_plus_baseline": (
        {"rewardNormalization": {"std": True}},
        ["--advantage-estimator", "reinforce_plus_plus_baseline", "--normalize-advantages"],
    ),
}
WHITENED = {"normalize_advantages", "reinforce_plus_plus_baseline"}


def group_mean_of_every_sample(args: Any, samples: Sequence[Any]) -> tuple[list[float], ...]:
    """A reward post-process as a user might write one: slime's group normalisation, by
    group_index, over every sample it is given (named in extraArgs by a test below)."""
    raw = [float(s.reward) for s in samples]
    groups: dict[int, list[float]] = {}
    for s, r in zip(samples, raw, strict=True):
        groups.setdefault(s.group_index, []).append(r)
    means = {g: sum(v) / len(v) for g, v in groups.items()}
    return raw, [r - means[s.group_index] for s, r in zip(samples, raw, strict=True)]


# As slime's load_function imports them in the subprocess (pytest names this module otherwise).
HERE = "tests.bundle.rollout.test_train_data_upstream"
USER_POST_PROCESS = f"{HERE}.group_mean_of_every_sample"


def drop_every_group(args: Any, samples: Sequence[Any]) -> bool:
    """A dynamic-sampling filter (slime's signature) that drops every group."""
    return False


def _case(
    rows: list[dict[str, Any]], grpo: dict[str, Any], extra: list[str], batch: int = 0
) -> dict[str, Any]:
    return {"rows": rows, "n": N, "batch": batch or len(rows), "grpo": grpo, "extra_args": extra}


CASES: dict[str, dict[str, Any]] = {
    **{name: _case(FAILURE_ROWS, grpo, extra) for name, (grpo, extra) in SETTINGS.items()},
    "zero_reward": _case(FAILURE_ROWS, {"failedEpisodes": "zeroReward"}, []),
    "reinforce_plus_plus": _case(
        FAILURE_ROWS, {}, ["--advantage-estimator", "reinforce_plus_plus", "--normalize-advantages"]
    ),
    "user_post_process": _case(
        FAILURE_ROWS, {}, ["--custom-reward-post-process-path", USER_POST_PROCESS]
    ),
    # A train row whose metadata (the agent's payload) happens to carry the key agentrl
    # marks failures with, e.g. a dataset built from an earlier run's logs.
    "row_metadata": _case(
        [
            {"behavior": "ok", "reward": [1, 0, 1, 0], "episode_error": "timeout, last year"},
            {"behavior": "ok", "reward": [0, 1, 1, 1]},
        ],
        {},
        [],
    ),
    # A group whose task outcomes all scored 1, one episode failed; one with variance.
    "zero_std": _case(
        [
            {"behavior": ["ok", "error", "ok", "ok"], "reward": 1},
            {"behavior": "ok", "reward": [1, 0, 1, 0]},
        ],
        {},
        [],
    ),
    # A skipped group (one task outcome) beside a group whose winners ran longer: weighted
    # by token, the step's advantages do not average 0, and whitening shifts the skipped
    # group's 0 by that mean.
    "no_signal_whitened": _case(
        [
            {"behavior": "ok", "reward": [1, 0, 1, 0], "turns": [4, 1, 4, 1]},
            {"behavior": ["error", "ok", "error", "error"], "reward": 1},
        ],
        {},
        ["--normalize-advantages"],
    ),
    # Rows of which only some carry a `round_number` in their metadata.
    "round_number": _case(
        [
            {"behavior": "ok", "reward": [1, 0, 1, 0], "round_number": 2},
            {"behavior": ["ok", "error", "ok", "ok"], "reward": [0, 1, 1, 1]},
            {"behavior": "ok", "reward": [1, 0, 1, 0], "round_number": "two"},
            {"behavior": "ok", "turns": 3, "reward": [0, 1, 1, 1]},
        ],
        {},
        [],
    ),
    # Every group dropped by the user's filter, and no refill round: the batch is filled with
    # the dropped groups (backfills).
    "backfill": _case(
        [{"behavior": "ok", "reward": [1, 0, 1, 0]}, {"behavior": "ok", "reward": [0, 1, 1, 1]}],
        {
            "dynamicSamplingFilter": f"{HERE}.drop_every_group",
            "maxRefillRounds": 0,
        },
        [],
    ),
    # Multi-turn episodes clipped to the response budget, an episode whose trace broke into
    # two sequences, and failures.
    "tokens": _case(
        [
            {"behavior": ["fanout", "ok", "ok", "error"], "turns": 4, "reward": [1, 0, 0, 1]},
            {"behavior": "ok", "turns": 1, "reward": [1, 0, 1, 0]},
        ],
        {"maxResponseLength": 6},
        [],
    ),
    # Over-sampling: three groups in flight for a batch of two, with a filter and carry-over;
    # the group still running when two are kept (here the slow one) is cut and handed back
    # to slime's own data source, whose add_samples checks every group's size.
    "dynamic_sampling": _case(
        [
            {"behavior": "ok", "reward": 1},
            {"behavior": ["ok", "error", "ok", "ok"], "reward": [1, 0, 0, 1]},
            {"behavior": "ok", "reward": [1, 0, 1, 0], "sleep": 0.5},
            {"behavior": "ok", "reward": [0, 1, 0, 1]},
        ],
        {
            "overSamplingBatchSize": 3,
            "stragglerPolicy": "carryOver",
            "dynamicSamplingFilter": "zeroRewardVariance",
        },
        [],
        batch=2,
    ),
}


@functools.cache
def trained(row: str) -> dict[str, dict[str, Any]]:
    """Every case through the row's trainer, in one process per row."""
    results = slime_upstream.slime_train_data(row, list(CASES.values()))
    return dict(zip(CASES, results, strict=True))


def result(row: str, name: str) -> dict[str, Any]:
    out = trained(row)[name]
    assert "error" not in out, out.get("error")
    return out


def episodes(out: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """rollout_id -> its samples, each with what the trainer holds for it."""
    t = out["trained"]
    by_id: dict[int, list[dict[str, Any]]] = {}
    for i, s in enumerate(out["samples"]):
        assert t["rollout_ids"][i] == s["rollout_id"]
        held = {k: t[k][i] for k in ("advantages", "loss_masks", "rewards", "rollout_mask_sums")}
        by_id.setdefault(s["rollout_id"], []).append({**s, **held})
    return by_id


def expected(rewards: list[float], std: bool, min_valid: int = 2) -> list[float]:
    """GRPO over the task outcomes alone: what each of them must get."""
    if len(rewards) < min_valid:
        return [0.0] * len(rewards)
    mean = math.fsum(rewards) / len(rewards)
    scale = 1.0
    if std:
        var = math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)
        scale = 1.0 / (math.sqrt(var) + EPS)
    return [(r - mean) * scale for r in rewards]


def task_advantages(out: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(what the trainer's advantage is, what GRPO over the task outcomes alone gives) for
    every task outcome of the step, in order; failures checked on the way."""
    std = bool(out.get("std"))
    got, want = [], []
    groups: dict[int, list[list[dict[str, Any]]]] = {}
    for samples in episodes(out).values():
        groups.setdefault(samples[0]["group_index"], []).append(samples)
    for members in groups.values():
        tasks = [e for e in members if e[0]["failure"] is None]
        for failed in (e for e in members if e[0]["failure"] is not None):
            (s,) = failed
            # It trains no token: mask 0 where the trainer weighs tokens, and its episode's
            # denominator 0 (slime clamps it to 1: nothing is divided by it).
            assert s["status"] == "FAILED" and s["loss_masks"] == [0] * s["response_length"]
            assert s["rollout_mask_sums"] == 0
        for e, value in zip(tasks, expected([e[0]["reward"] for e in tasks], std), strict=True):
            for s in e:
                pairs = zip(s["advantages"], s["loss_masks"], strict=True)
                trained_tokens = [a for a, m in pairs if m]
                assert len(set(trained_tokens)) <= 1  # one advantage per episode
                got.append(trained_tokens[0] if trained_tokens else 0.0)
                want.append(value)
    return got, want


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_failed_episode_never_shapes_a_siblings_advantage_in_slimes_trainer(
    row: str, setting: str
) -> None:
    out = result(row, setting)
    out["std"] = SETTINGS[setting][0].get("rewardNormalization", {}).get("std", False)
    got, want = task_advantages(out)
    if setting not in WHITENED:
        assert got == pytest.approx(want, abs=1e-5)
        return
    # slime whitens the advantages over every trained token of the step (masked mean and
    # std): one affine map of the task outcomes' own GRPO values, the same for all groups.
    # A failure counted in its group would shift that group's values alone.
    (x0, y0), (x1, y1) = [(x, y) for x, y in zip(want, got, strict=True) if x != 0.0][:2]
    scale = (y1 - y0) / (x1 - x0)
    assert scale > 0
    assert got == pytest.approx([y0 + scale * (x - x0) for x in want], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_the_check_sees_a_failure_that_counts(row: str) -> None:
    """`failedEpisodes: zeroReward` counts a failure as a 0 on purpose: the same check then
    finds the siblings moved (so it is not blind to it)."""
    got, want = task_advantages(result(row, "zero_reward"))
    assert got != pytest.approx(want, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_reinforce_plus_plus_stops_slimes_trainer_at_a_failed_episode_and_is_refused(
    row: str,
) -> None:
    """slime's REINFORCE++ returns assert that no sample is fully masked; every failed
    episode is one (as is a carried-over episode under offPolicyTokens: mask, or a sequence
    of turns without logprobs). extraArgs come last, so the value there wins over agentrl's
    `--advantage-estimator grpo`: the first step with a failure would stop training, GPUs
    up. Validation refuses it instead."""
    error = trained(row)["reinforce_plus_plus"]["error"]
    assert error["stage"] == "advantages"
    assert error["message"].startswith("AssertionError: Sequence at index")
    assert "is fully masked" in error["message"]
    extra = ["--advantage-estimator", "reinforce_plus_plus", "--normalize-advantages"]
    (finding,) = judge_extra_args(extra)
    assert finding[:2] == (0, True) and "--advantage-estimator" in finding[2]
    for ok in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"):
        assert judge_extra_args(["--advantage-estimator", ok]) == []


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_a_reward_post_process_in_extra_args_replaces_agentrls_and_is_refused(
    row: str,
) -> None:
    """slime calls the post-process its args name, and argparse keeps the extraArgs value:
    agentrl's episode-level normalisation and failure exclusion would silently not run, and
    a failure's stand-in 0 would move its siblings. Validation refuses the flag instead."""
    got, want = task_advantages(result(row, "user_post_process"))
    assert got != pytest.approx(want, abs=1e-5)
    (finding,) = judge_extra_args(["--custom-reward-post-process-path", USER_POST_PROCESS])
    assert finding[:2] == (0, True) and "spec.grpo" in finding[2]
    # The other ways to replace agentrl's part, or to skip it (slime's conversion that runs
    # the post-process and zeroes failed episodes' loss masks).
    for flag in HOOKS:
        ((_, is_error, message),) = judge_extra_args([f"{flag}=mine.fn"])
        assert is_error and message.startswith(flag)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_a_train_rows_metadata_cannot_mark_its_task_outcomes_failed(row: str) -> None:
    """A sample's metadata starts as its row's metadata (verbatim, as the agent gets it),
    and the post-process tells failures by one metadata key: a row that carried that key
    made every task outcome of its prompt count in no statistic and train with advantage 0,
    though the rollout had counted them as succeeded."""
    out = result(row, "row_metadata")
    assert {(s["status"], s["failure"]) for s in out["samples"]} == {("COMPLETED", None)}
    got, want = task_advantages(out)
    assert got == pytest.approx(want, abs=1e-5) and any(want)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_a_train_rows_round_number_does_not_reach_slime(row: str) -> None:
    """slime's conversion reads `metadata["round_number"]` of every sample as soon as the
    first one has it (its multi-turn metric). Each sample's metadata starts as its row's, so
    a train file where only some rows carried the key stopped training with a KeyError at the
    first step whose first sample came from one of them (and a non-number would fail the
    trainer's metric). Every sample now carries its own rounds: the turns in its sequence."""
    out = result(row, "round_number")
    rounds = {s["rollout_id"]: s["round_number"] for s in out["samples"]}
    assert rounds == {
        s["rollout_id"]: 0 if s["failure"] else s["num_turns"] for s in out["samples"]
    }
    assert {s["num_turns"] for s in out["samples"] if not s["failure"]} == {2, 3}
    assert out["trained"]["round_number"] == [s["round_number"] for s in out["samples"]]


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_a_backfilled_group_trains_no_token(row: str) -> None:
    """spec.grpo.maxRefillRounds: once the step may start no replacement, the batch is filled
    with groups the dynamic-sampling filter dropped, with no gradient. A user's filter may
    drop groups that have reward variance (too easy, suspect): their advantages are not 0,
    so the promise holds only if none of their tokens trains."""
    out = result(row, "backfill")
    assert len({s["group_index"] for s in out["samples"]}) == 2
    t = out["trained"]
    assert any(any(a) for a in t["advantages"])  # GRPO gives these groups a signal...
    assert all(not any(m) for m in t["loss_masks"])  # ...which trains nothing
    assert t["rollout_mask_sums"] == [0.0] * len(out["samples"])


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_a_group_without_signal_trains_its_tokens_at_advantage_zero(row: str) -> None:
    """A skipped group (FAILURE_ROWS' row 2: one task outcome, no filter) and a zero-variance
    group kept without a filter (zero_std's row 0) reach slime's trainer with their task
    outcomes' loss masks set and advantage 0 on every token: no policy gradient, but the KL
    and entropy terms weigh their tokens (docs/rollout.md, test_no_signal_docs.py), which is
    why their time counts as trained. `--normalize-advantages` shifts that 0 by the step's
    token-weighted mean advantage, which is not 0 where episodes of a group differ in length
    with their reward: then even the policy-gradient term moves them."""
    for name, row_id in (("grpo", 2), ("zero_std", 0)):
        out = result(row, name)
        held = [
            e
            for samples in episodes(out).values()
            for e in samples
            if e["row"] == row_id and e["failure"] is None
        ]
        assert held, name
        for s in held:
            assert any(s["loss_masks"]), name  # its tokens are in the loss...
            assert not any(s["advantages"]), name  # ...at advantage 0
    assert result(row, "grpo")["metrics"]["agentrl/groups_skipped"] == 1
    out = result(row, "no_signal_whitened")
    assert out["metrics"]["agentrl/groups_skipped"] == 1
    trained_tokens = [
        (e["row"], a)
        for samples in episodes(out).values()
        for e in samples
        if e["failure"] is None
        for a, m in zip(e["advantages"], e["loss_masks"], strict=True)
        if m
    ]
    shifted = {round(a, 6) for r, a in trained_tokens if r == 1}
    (value,) = shifted  # one value for the skipped group's tokens...
    assert value < -0.1  # ...no longer 0: the step's token mean (winners ran longer) is > 0


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_tokens_masks_and_log_probs_reach_slimes_trainer_as_sampled(row: str) -> None:
    out = result(row, "tokens")
    t, budget = out["trained"], out["max_response_len"]
    assert budget == 6
    assert any(s["status"] == "TRUNCATED" for s in out["samples"])  # clipped to the budget
    for i, s in enumerate(out["samples"]):
        n = s["response_length"]
        assert 1 <= n <= budget
        assert len(s["loss_mask"]) == len(s["rollout_log_probs"]) == n
        assert t["tokens"][i] == s["tokens"] and t["response_lengths"][i] == n
        assert len(s["tokens"]) > n  # a prompt of at least one token precedes the response
        # A trained token is a sampled one, with its own log-prob; a masked one has 0.0.
        response = s["tokens"][-n:]
        slots = zip(response, s["loss_mask"], s["rollout_log_probs"], strict=True)
        for token, mask, logprob in slots:
            assert (mask == 1) == (token in COMPLETION_TOKENS and s["failure"] is None)
            assert (logprob < 0) == (mask == 1)
    # The packed micro-batches: position j's mask is the logit that predicts token j + 1.
    trained_tokens = 0
    for mb in t["micro_batches"]:
        tokens, mask = mb["tokens"], mb["mask"]
        assert len(tokens) == len(mask)
        for j, m in enumerate(mask):
            if m:
                assert tokens[j + 1] in COMPLETION_TOKENS
                trained_tokens += 1
    assert trained_tokens == sum(sum(s["loss_mask"]) for s in out["samples"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("name", ["grpo", "tokens", "dynamic_sampling"])
def test_every_group_reaches_slime_whole_and_contiguous(row: str, name: str) -> None:
    out = result(row, name)
    samples = out["samples"]
    order = [s["group_index"] for s in samples]
    # Contiguous: a group's samples are never interleaved with another's.
    assert order == sorted(order, key=order.index)
    batch = CASES[name]["batch"]
    assert len(set(order)) == batch
    by_id = episodes(out)
    assert len(by_id) == batch * N  # slime's rollout count: one rollout_id per episode
    for group in set(order):
        ids = {s["rollout_id"] for s in samples if s["group_index"] == group}
        assert len(ids) == N
    for members in by_id.values():  # an episode's samples share its group and reward
        assert len({(s["group_index"], s["reward"], s["session_id"]) for s in members}) == 1
    assert out["metrics"]["agentrl/groups_kept"] + out["metrics"]["agentrl/groups_skipped"] == (
        batch
    )


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_slimes_raw_reward_averages_a_failures_stand_in_per_sequence(row: str) -> None:
    """slime's own `rollout/raw_reward` (the actor's `log_rollout_data`, both rows) is the
    mean of `metadata.raw_reward` over every sample of the step: a failed episode's stand-in
    counts as a reward of 0, and an episode counts once per sequence. agentrl's
    `agentrl/episode_reward_mean` is the mean over the episodes with a task outcome; nothing
    on agentrl's side can change slime's figure without changing what slime trains on (the
    stand-in sample keeps its group's size), so docs/rollout.md says which one to read."""
    out = result(row, "grpo")
    samples = out["samples"]
    assert sum(s["failure"] is not None for s in samples) == 4 and len(samples) == 12
    stand_in = [0.0 if s["failure"] else float(s["reward"]) for s in samples]
    assert out["logged"]["rollout/raw_reward"] == pytest.approx(sum(stand_in) / len(stand_in))
    outcomes = {s["rollout_id"]: float(s["reward"]) for s in samples if s["failure"] is None}
    task_mean = sum(outcomes.values()) / len(outcomes)
    assert out["metrics"]["agentrl/episode_reward_mean"] == pytest.approx(task_mean)
    # FAILURE_ROWS: 5 rewards of 1 among 8 task outcomes, 4 failures: 5/12 against 5/8.
    assert (out["logged"]["rollout/raw_reward"], task_mean) == pytest.approx((5 / 12, 5 / 8))
    # Its per-sample lengths count the stand-in too: 1 response token, none trained.
    lengths = [s["response_length"] for s in samples]
    assert {s["response_length"] for s in samples if s["failure"]} == {1}
    assert out["logged"]["rollout/response_lengths"] == pytest.approx(sum(lengths) / 12)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_slimes_zero_std_count_sees_a_failures_stand_in_as_a_reward(row: str) -> None:
    """slime's `rollout/zero_std/count_<reward>` (the RolloutManager's per-sample figures)
    compares every sample's reward: a group whose task outcomes all scored 1 and one of whose
    episodes failed is not counted there, though it has no GRPO signal; agentrl's
    `agentrl/zero_variance_share` counts it."""
    out = result(row, "zero_std")
    assert not [k for k in out["logged"] if k.startswith("rollout/zero_std/")]
    assert out["metrics"]["agentrl/zero_variance_share"] == pytest.approx(0.5)
