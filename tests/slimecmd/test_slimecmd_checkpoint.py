"""decide(): first run or restart from what the checkpoint directory holds (table tests)."""

from __future__ import annotations

import pytest
from test_slimecmd_flags import EXAMPLE_A, spec_of

from agentrl.api.validation import parse_experiment
from agentrl.slimecmd import CheckpointDir, Start, decide
from agentrl.slimecmd.checkpoint import iteration_dir
from conftest import load_example

TRACKER = "latest_checkpointed_iteration.txt"


def _spec(**checkpoint: object):  # type: ignore[no-untyped-def]
    body = load_example(EXAMPLE_A)
    body["spec"]["checkpoint"] = {"path": "/ckpt", **checkpoint}
    return spec_of(body)


@pytest.mark.parametrize(
    ("found", "start", "iteration"),
    [
        (None, Start.FIRST_RUN, None),
        (CheckpointDir(None, ()), Start.FIRST_RUN, None),
        (CheckpointDir("10\n", ("iter_0000010", TRACKER)), Start.RESUME, "10"),
        (CheckpointDir("release", ("release", TRACKER)), Start.RESUME, "release"),
        (CheckpointDir("20", ("iter_0000010", "iter_0000020", TRACKER)), Start.RESUME, "20"),
    ],
)
def test_decisions(found: CheckpointDir | None, start: Start, iteration: str | None) -> None:
    decision = decide(_spec(), found)
    assert (decision.start, decision.iteration, decision.problem) == (start, iteration, None)


@pytest.mark.parametrize(
    ("tracker", "entries", "says"),
    [
        ("10", (TRACKER,), "names iter_0000010, which is missing"),
        ("ten", ("iter_0000010", TRACKER), "is not an iteration number"),
        ("", (TRACKER,), "is not an iteration number"),
    ],
)
def test_a_tracker_without_its_iteration_is_a_problem(
    tracker: str, entries: tuple[str, ...], says: str
) -> None:
    decision = decide(_spec(), CheckpointDir(tracker, entries))
    assert decision.problem is not None and says in decision.problem
    assert decision.problem.startswith("spec.checkpoint.path: /ckpt/" + TRACKER)
    # Starting over is the user's call: resume: false does it, with a warning.
    over = decide(_spec(resume=False), CheckpointDir(tracker, entries))
    assert over.start is Start.FIRST_RUN and over.problem is None
    assert over.warning is not None and "resume is false" in over.warning


def test_iterations_without_a_tracker_warn_and_start_over() -> None:
    decision = decide(_spec(), CheckpointDir(None, ("iter_0000005",)))
    assert decision.start is Start.FIRST_RUN and decision.problem is None
    assert decision.warning is not None and "iter_0000005" in decision.warning


def test_no_checkpoint_path_is_always_a_first_run() -> None:
    body = load_example(EXAMPLE_A)
    body["spec"]["checkpoint"] = {}
    assert decide(spec_of(body), None).start is Start.FIRST_RUN


def test_iteration_dir_follows_megatron() -> None:
    assert iteration_dir(" 7\n") == "iter_0000007"
    assert iteration_dir("release") == "release"
    assert iteration_dir("-1") is None and iteration_dir("7.0") is None


def test_a_restart_with_a_fixed_start_rollout_is_refused_a_first_run_is_not() -> None:
    """slime counts from extraArgs' --start-rollout-id even when it loads a saved run
    (tests/bundle/launch/test_slime_start.py runs its parser): a restart would train again
    from that rollout and save over the run. Validation refuses it too."""
    body = load_example(EXAMPLE_A)
    body["spec"]["checkpoint"] = {"path": "/ckpt", "saveInterval": 5}
    body["spec"]["runtime"]["extraArgs"] = ["--seed", "1", "--start-rollout-id=0"]
    spec = spec_of(body)
    saved = CheckpointDir("10", ("iter_0000010", TRACKER))
    decision = decide(spec, saved)
    assert decision.problem is not None
    assert decision.problem.startswith(
        "spec.runtime.extraArgs[2]: --start-rollout-id on a restart from saved iteration 10"
    )
    assert decide(spec, CheckpointDir(None, ())).problem is None
    _, problems = parse_experiment(body)
    (error,) = [p for p in problems if p.severity == "error"]
    assert error.path == "spec.runtime.extraArgs[2]" and "--start-rollout-id" in error.message
    body["spec"]["checkpoint"]["resume"] = False  # every attempt starts over: nothing to keep
    assert [p for p in parse_experiment(body)[1] if p.severity == "error"] == []
