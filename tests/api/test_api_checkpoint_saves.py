"""checkpoint.path without saveInterval: slime's own train-loop rule saves nothing.

slime's train.py saves when `should_run_periodic_action(rollout_id, args.save_interval, ...)`
holds; the function is run here from each supported slime commit on the save interval that
agentrl's command line gives slime, so the warning follows slime's rule, not a restatement.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support import slime_upstream

from agentrl.api.validation import errors, parse_experiment
from agentrl.slimecmd import flags

_VOLUMES = {
    "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "v"}}],
    "volumeMounts": [{"name": "v", "mountPath": p} for p in ("/ckpt", "/models", "/data")],
}


def _periodic(row: str) -> Callable[..., bool]:
    source = (slime_upstream.slime_dir(row) / "slime/utils/misc.py").read_text()
    (func,) = [
        n for n in ast.parse(source).body if getattr(n, "name", "") == "should_run_periodic_action"
    ]
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([func], []), "misc.py", "exec"), namespace)
    return namespace["should_run_periodic_action"]  # type: ignore[no-any-return]


def _saved_rollouts(row: str, checkpoint: dict[str, Any], rollouts: int) -> list[int]:
    """The rollouts slime's train loop saves after, with agentrl's --save-interval."""
    exp, _ = parse_experiment(
        minimal_body(runtime=_VOLUMES, checkpoint=checkpoint, grpo={"numRollouts": rollouts})
    )
    assert exp is not None
    args = flags.save_args(exp.spec)
    interval = int(args[args.index("--save-interval") + 1]) if "--save-interval" in args else None
    periodic = _periodic(row)
    # train.py: should_run_periodic_action(rollout_id, args.save_interval,
    # num_rollout_per_epoch, args.num_rollout); one pass over the data is longer here.
    return [r for r in range(rollouts) if periodic(r, interval, None, rollouts)]


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_a_checkpoint_path_without_save_interval_saves_nothing_and_is_warned(row: str) -> None:
    assert _saved_rollouts(row, {"path": "/ckpt/run"}, 25) == []
    exp, problems = parse_experiment(
        minimal_body(runtime=_VOLUMES, checkpoint={"path": "/ckpt/run"}, grpo={"numRollouts": 25})
    )
    assert exp is not None and errors(problems) == []
    (warning,) = problems
    assert (warning.severity, warning.path) == ("warning", "spec.checkpoint.saveInterval")
    assert "saves no checkpoint at all" in warning.message
    assert "starts over from the model" in warning.message
    assert "set saveInterval" in warning.hint and "25" in warning.hint


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_a_save_interval_saves_and_is_not_warned(row: str) -> None:
    checkpoint = {"path": "/ckpt/run", "saveInterval": 10}
    assert _saved_rollouts(row, checkpoint, 25) == [9, 19, 24]
    body = minimal_body(runtime=_VOLUMES, checkpoint=checkpoint, grpo={"numRollouts": 25})
    assert parse_experiment(body)[1] == []
    assert parse_experiment(minimal_body(runtime=_VOLUMES))[1] == []  # no path: nothing saved


def test_a_save_interval_in_extra_args_is_not_warned() -> None:
    for extra in (["--save-interval", "7"], ["--save-interval=7"]):
        body = minimal_body(
            runtime={**_VOLUMES, "extraArgs": extra}, checkpoint={"path": "/ckpt/run"}
        )
        assert parse_experiment(body)[1] == [], extra


def test_save_interval_in_extra_args_without_a_checkpoint_path_is_refused() -> None:
    """slime stops at start on --save-interval without --save (its own parse_args on the
    launcher's argv: tests/bundle/launch/test_slime_start.py); agentrl renders --save only
    from checkpoint.path."""
    for extra in (["--save-interval", "7"], ["--save-interval=7"]):
        body = minimal_body(runtime={**_VOLUMES, "extraArgs": ["--seed", "1", *extra]})
        (error,) = [p for p in parse_experiment(body)[1] if p.severity == "error"]
        assert error.path == "spec.runtime.extraArgs[2]"
        assert "--save-interval without spec.checkpoint.path" in error.message
        assert "spec.checkpoint.path" in error.hint


def test_retries_without_a_checkpoint_path_are_warned_on_backoff_limit() -> None:
    """Nothing is saved without checkpoint.path: each KubeRay retry starts over from the
    model at rollout 0 (the launcher renders no --load without it)."""
    body = minimal_body(runtime=_VOLUMES, backoffLimit=2)
    exp, problems = parse_experiment(body)
    assert exp is not None and errors(problems) == []
    (warning,) = problems
    assert (warning.severity, warning.path) == ("warning", "spec.backoffLimit")
    assert "starts over from the model at rollout 0" in warning.message
    assert "checkpoint.path" in warning.hint and "backoffLimit: 0" in warning.hint
    assert parse_experiment(minimal_body(runtime=_VOLUMES))[1] == []  # no retries: no warning


@pytest.mark.parametrize("row", slime_upstream.ROWS)
@pytest.mark.parametrize(("interval", "warned"), [(25, True), (40, True), (24, False)])
def test_retries_with_a_save_interval_of_all_the_rollouts_are_warned(
    row: str, interval: int, warned: bool
) -> None:
    """slime's own rule: an interval of at least numRollouts saves after the last rollout
    only, so a retry finds no save of the failed attempt."""
    checkpoint = {"path": "/ckpt/run", "saveInterval": interval}
    assert (_saved_rollouts(row, checkpoint, 25) == [24]) == warned
    body = minimal_body(
        runtime=_VOLUMES, checkpoint=checkpoint, grpo={"numRollouts": 25}, backoffLimit=1
    )
    exp, problems = parse_experiment(body)
    assert exp is not None and errors(problems) == []
    if not warned:
        assert problems == []
        return
    (warning,) = problems
    assert (warning.severity, warning.path) == ("warning", "spec.checkpoint.saveInterval")
    assert "saves only after the last rollout" in warning.message
    assert "set saveInterval below 25" in warning.hint
    body["spec"]["backoffLimit"] = 0  # no retries: the final save is all that is asked for
    assert parse_experiment(body)[1] == []


def test_retries_are_not_warned_twice_nor_for_a_flag_interval() -> None:
    """A path without saveInterval is checkpoint_saves' one warning, which names the retry;
    --save-interval in extraArgs is its business too."""
    body = minimal_body(runtime=_VOLUMES, checkpoint={"path": "/ckpt/run"}, backoffLimit=3)
    assert [p.path for p in parse_experiment(body)[1]] == ["spec.checkpoint.saveInterval"]
    runtime = {**_VOLUMES, "extraArgs": ["--save-interval", "7"]}
    body = minimal_body(runtime=runtime, checkpoint={"path": "/ckpt/run"}, backoffLimit=3)
    assert parse_experiment(body)[1] == []


@pytest.mark.parametrize(
    ("extra", "checkpoint"),
    [
        (["--save-interval", "25"], {"path": "/ckpt/run"}),
        (["--save-interval=40"], {"path": "/ckpt/run"}),
        # agentrl renders --save-interval 10 from the field, and argparse keeps the later one.
        (["--save-interval", "25"], {"path": "/ckpt/run", "saveInterval": 10}),
    ],
)
def test_retries_with_a_flag_save_interval_of_all_the_rollouts_are_warned(
    extra: list[str], checkpoint: dict[str, Any]
) -> None:
    """--save-interval in extraArgs is the interval slime saves by, as saveInterval is: one of
    at least numRollouts leaves a retry nothing to resume, however it was given."""
    runtime = {**_VOLUMES, "extraArgs": extra}
    body = minimal_body(
        runtime=runtime, checkpoint=checkpoint, grpo={"numRollouts": 25}, backoffLimit=1
    )
    exp, problems = parse_experiment(body)
    assert exp is not None and errors(problems) == []
    (warning,) = problems
    assert (warning.severity, warning.path) == ("warning", "spec.runtime.extraArgs[0]")
    assert warning.message.startswith("--save-interval ")
    assert "saves only after the last rollout" in warning.message
    assert "set --save-interval below 25" in warning.hint
    body["spec"]["runtime"]["extraArgs"] = ["--save-interval", "24"]
    assert parse_experiment(body)[1] == []


def test_retries_of_a_one_rollout_run_are_not_warned() -> None:
    """One rollout: a retry has no earlier rollout to go on from, saved or not."""
    body = minimal_body(runtime=_VOLUMES, grpo={"numRollouts": 1}, backoffLimit=2)
    assert parse_experiment(body)[1] == []
    checkpoint = {"path": "/ckpt/run", "saveInterval": 1}
    body = minimal_body(
        runtime=_VOLUMES, checkpoint=checkpoint, grpo={"numRollouts": 1}, backoffLimit=2
    )
    assert parse_experiment(body)[1] == []
