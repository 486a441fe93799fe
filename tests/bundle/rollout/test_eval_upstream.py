"""An eval pass of agentrl's rollout, logged by slime's own eval logging at each pinned commit.

slime's RolloutManager.eval hands what `generate_rollout(..., evaluation=True)` returns to its
eval logging (`eval/<name>` is the mean of `rewards`, pass@k groups `rewards` by the global
`--n-samples-per-eval-prompt`). tests/support/upstream_site/slime_eval.py runs the eval pass on
slime's own `Sample` and that logging on it, with the flags agentrl renders for the spec.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support import slime_upstream

from agentrl.api.models import RLExperimentSpec
from agentrl.api.slime_flags import judge_extra_args
from agentrl.api.validation import errors, parse_experiment
from agentrl.slimecmd import flags

from .doubles import runtime_config

ROWS = slime_upstream.ROWS


def _rows(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "metadata": r}) + "\n"
                            for i, r in enumerate(rows)))  # fmt: skip
    return str(path)


def _rendered(sets: list[dict[str, Any]]) -> list[str]:
    """The eval flags agentrl renders for these sets (launcher's compose)."""
    spec: RLExperimentSpec = runtime_config(eval_sets=sets).spec
    return flags.eval_args(spec, "/tmp/agentrl/slime-eval-config.yaml")


@pytest.mark.parametrize("row", ROWS)
def test_slime_logs_pass_at_k_of_an_eval_pass_with_the_rendered_flags(
    row: str, tmp_path: Path
) -> None:
    path = _rows(tmp_path / "e.jsonl", [{"id": 0, "reward": 1}, {"id": 1, "reward": [1, 0]}])
    sets = [{"name": "e", "path": path, "samplesPerPrompt": 2}]
    got = slime_upstream.slime_eval(row, {"argv": [*_rendered(sets), "--log-passrate"],
                                          "sets": sets, "rollout_id": 9})  # fmt: skip
    log = got["log"]
    assert log["eval/e"] == 0.75 and log["eval/e-truncated_ratio"] == 0.0
    assert (log["eval/e-pass@1"], log["eval/e-pass@2"]) == (0.75, 1.0)
    assert log["eval/step"] == 9.0


@pytest.mark.parametrize("row", ROWS)
def test_n_samples_per_eval_prompt_in_extra_args_is_refused(row: str, tmp_path: Path) -> None:
    """slime groups agentrl's eval rewards for pass@k by --n-samples-per-eval-prompt; a value
    in extraArgs (argparse keeps the last) that is not the sets' samplesPerPrompt fails
    slime's assert at the eval, hours into a run. It used to be warned as having no effect."""
    path = _rows(tmp_path / "e.jsonl", [{"id": i, "reward": i % 2} for i in range(3)])
    sets = [{"name": "e", "path": path, "samplesPerPrompt": 1}]
    extra = ["--n-samples-per-eval-prompt", "2", "--log-passrate"]
    got = slime_upstream.slime_eval(row, {"argv": [*_rendered(sets), *extra], "sets": sets})
    assert got["error"].startswith("AssertionError: len(flat_rewards)=3")

    [(index, is_error, message)] = judge_extra_args(extra[:2])  # --log-passrate: its own
    assert (index, is_error) == (0, True)
    assert "pass@k" in message and "spec.data.eval[].samplesPerPrompt" in message


@pytest.mark.parametrize("row", ROWS)
def test_eval_sets_in_an_eval_config_still_get_pass_at_k(row: str, tmp_path: Path) -> None:
    """Sets that differ in temperature only go to slime as --eval-config; slime's pass@k reads
    the global flag alone, which agentrl renders too when every set has the same size."""
    path = _rows(tmp_path / "e.jsonl", [{"id": 0, "reward": [1, 0]}])
    sets = [
        {"name": "greedy", "path": path, "samplesPerPrompt": 2},
        {"name": "hot", "path": path, "samplesPerPrompt": 2, "temperature": 1.0},
    ]
    argv = _rendered(sets)
    assert "--eval-config" in argv
    got = slime_upstream.slime_eval(row, {"argv": [*argv, "--log-passrate"], "sets": sets})
    log = got["log"]
    assert (log["eval/greedy-pass@1"], log["eval/greedy-pass@2"]) == (0.5, 1.0)
    assert "eval/hot-pass@2" in log


@pytest.mark.parametrize("row", ROWS)
def test_slimes_eval_figures_leave_failed_episodes_out(row: str, tmp_path: Path) -> None:
    """A failed eval episode (agent crash, timeout, gateway) is no task outcome: slime's
    eval/<name> is the mean of the task outcomes, the figure agentrl_eval_reward_mean (and
    status.evalReward) shows too, and slime's per-sample figures describe the answers the
    model gave, not the failures' 1-token stand-ins. The failures are counted beside it.
    It used to average them in as 0 (1/3 here) and count the failed group's stand-ins as a
    zero-variance group of reward 0 and responses of length 0."""
    rows = [{"id": 0, "reward": 1}, {"id": 1, "reward": 0}, {"id": 2, "behavior": "error"}]
    sets = [{"name": "e", "path": _rows(tmp_path / "e.jsonl", rows), "samplesPerPrompt": 2}]
    got = slime_upstream.slime_eval(row, {"argv": _rendered(sets), "sets": sets})
    log = got["log"]
    assert log["eval/e"] == 0.5 == got["gauges"]["e"] == log["eval/e/task_reward_mean"]
    assert log["eval/e/failed_ratio"] == pytest.approx(1 / 3)
    assert log["eval/e/episodes"] == 6
    assert log["eval/e/response_len/min"] == 4  # every task outcome: 2 turns of 2 tokens
    assert (log["eval/e/zero_std/count_0.0"], log["eval/e/zero_std/count_1.0"]) == (1, 1)


@pytest.mark.parametrize("row", ROWS)
def test_an_eval_set_whose_episodes_all_failed_logs_no_reward(row: str, tmp_path: Path) -> None:
    """A set whose every episode failed has no eval/<name> for the pass (its failed_ratio
    says why), and the other sets log as usual; slime's logging divides by the rewards'
    count, so the set has no entry rather than an empty one. It used to log eval/<name> = 0,
    a collapsed model on the W&B chart researchers pick checkpoints from."""
    good = _rows(tmp_path / "good.jsonl", [{"id": 0, "reward": 1}])
    bad = _rows(tmp_path / "bad.jsonl", [{"id": 1, "behavior": "error"}] * 2)
    sets = [
        {"name": "good", "path": good, "samplesPerPrompt": 2},
        {"name": "bad", "path": bad, "samplesPerPrompt": 2},
    ]
    got = slime_upstream.slime_eval(row, {"argv": _rendered(sets), "sets": sets})
    log = got["log"]
    assert log["eval/good"] == 1.0
    bad = {k: v for k, v in log.items() if k.startswith("eval/bad")}
    assert bad == {"eval/bad/failed_ratio": 1.0, "eval/bad/episodes": 4.0}
    assert got["gauges"]["good"] == 1.0 and math.isnan(got["gauges"]["bad"])


@pytest.mark.parametrize("row", ROWS)
def test_agentrls_eval_pass_at_k_is_slimes(row: str, tmp_path: Path) -> None:
    """--log-passrate is refused (slime's train-side pass@k asserts one sample per episode),
    so agentrl logs eval pass@k itself: the same figures slime's own pass@k gives for the
    same pass, and a failed episode counted as no pass (slime's gets no failed episode)."""
    rows = [
        {"id": 0, "reward": 1},
        {"id": 1, "reward": [1, 0, 0, 0]},
        {"id": 2, "reward": [0, 1, 1, 0]},
    ]
    sets = [
        {"name": "e", "path": _rows(tmp_path / "e.jsonl", rows), "samplesPerPrompt": 4},
        {"name": "f", "path": _rows(tmp_path / "f.jsonl", [*rows, {"id": 3, "behavior": "error"}]),
         "samplesPerPrompt": 4},
    ]  # fmt: skip
    got = slime_upstream.slime_eval(row, {"argv": [*_rendered(sets), "--log-passrate"],
                                          "sets": sets})  # fmt: skip
    log = got["log"]
    for k in (1, 2, 4):
        assert log[f"eval/e/pass@{k}"] == pytest.approx(log[f"eval/e-pass@{k}"]), k
    assert log["eval/e/pass@1"] == pytest.approx((1 + 0.25 + 0.5) / 3)
    assert log["eval/f/pass@1"] == pytest.approx((1 + 0.25 + 0.5 + 0) / 4)
    assert "eval/e/pass@8" not in log


@pytest.mark.parametrize("row", ROWS)
def test_eval_set_names_that_slimes_logging_overwrites_are_refused(
    row: str, tmp_path: Path
) -> None:
    """slime's eval logging writes every set's keys into one dict: a set named `step` has its
    reward overwritten by the step number, and `a-truncated_ratio` overwrites set `a`'s
    truncated ratio with its reward. Validation refuses both names."""
    path = _rows(tmp_path / "e.jsonl", [{"id": 0, "reward": 0.25}])
    step = [{"name": "step", "path": path}]
    got = slime_upstream.slime_eval(row, {"argv": _rendered(step), "sets": step, "rollout_id": 7})
    assert got["log"]["eval/step"] == 7.0  # the set's 0.25 is gone
    pair = [{"name": "a", "path": path}, {"name": "a-truncated_ratio", "path": path}]
    got = slime_upstream.slime_eval(row, {"argv": _rendered(pair), "sets": pair})
    assert got["log"]["eval/a-truncated_ratio"] == 0.25  # not set a's truncated ratio, 0

    for sets, bad in ((step, 0), (pair, 1)):
        _, problems = parse_experiment(minimal_body(data={"train": "/t.jsonl", "eval": sets}))
        assert [p.path for p in errors(problems)] == [f"spec.data.eval[{bad}].name"]
