"""The failure taxonomy has one home: every reason the code raises is defined and classified
there, and docs/rollout.md lists each with its category."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agentrl.bundle import failures
from agentrl.bundle.failures import (
    REASONS,
    FailureClass,
    category,
    failure_class,
    sample_failure,
)
from agentrl.bundle.rollout.episode import EpisodeInput, failed_sample

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "operator" / "agentrl" / "bundle"
# Calls whose argument at this position is a failure reason.
REASON_ARGS = {"AgentError": 0, "_EpisodeFailure": 0, "_failed": 3, "episode_finished": 1}


def reason_arguments() -> list[tuple[str, ast.expr]]:
    found = []
    for path in BUNDLE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            at = REASON_ARGS.get(name)
            if at is not None and len(node.args) > at:
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.args[at]))
    return found


def test_every_reason_the_code_raises_is_a_constant_of_the_one_home() -> None:
    """A string literal would be a reason nobody classified or documented."""
    constants = {
        name
        for name, value in vars(failures).items()
        if name.isupper() and isinstance(value, str) and value in REASONS
    }
    args = reason_arguments()
    assert len(args) >= 15  # the scan sees the agents, the episode and the batch
    for where, arg in args:
        if isinstance(arg, ast.Name) and arg.id in {"reason", "failure", "exc"}:
            continue  # passed through from a checked call
        if isinstance(arg, ast.Attribute) and arg.attr in {"reason", "failure"}:
            continue  # exc.reason, outcome.failure: checked where they were raised
        if isinstance(arg, ast.IfExp):  # THROTTLED if ... else AGENT_ERROR
            names = {n.id for n in (arg.body, arg.orelse) if isinstance(n, ast.Name)}
            assert names <= constants and len(names) == 2, where
            continue
        assert isinstance(arg, ast.Name) and arg.id in constants, (where, ast.dump(arg))


def test_every_reason_is_an_infrastructure_failure_and_no_reason_a_task_outcome() -> None:
    assert failure_class(None) is FailureClass.TASK_OUTCOME
    for reason in [*REASONS, "a reason from the future"]:
        assert failure_class(reason) is FailureClass.INFRASTRUCTURE
    assert category("a reason from the future") is failures.Category.INTERNAL
    categories = {r.category for r in REASONS.values()}
    assert categories == set(failures.Category)  # each category has a reason


def test_docs_list_every_reason_with_its_category() -> None:
    text = (ROOT / "docs" / "rollout.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| ([a-z ]+) \|", text, re.M))
    assert set(rows) == set(REASONS)
    for label, reason in REASONS.items():
        assert rows[label] == reason.category.value.replace("_", " "), label


def test_a_failed_sample_names_its_reason_for_the_reward_post_process() -> None:
    inp = EpisodeInput("p", {"id": 1}, None, group_index=0, index=0, prompt_tokens=[5, 6])
    sample = failed_sample(inp, "sid", failures.THROTTLED, rollout_id=3)
    assert sample_failure(sample) == "throttled"
    assert sample.remove_sample and sample.loss_mask == [0]
    assert sample_failure(type("S", (), {"metadata": {"id": 1}})()) is None
