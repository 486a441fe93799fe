"""compose(): one argv for the preview and the pod, with the pod's facts in place."""

from __future__ import annotations

import json
from typing import Any

from test_slimecmd_flags import EXAMPLE_A, EXAMPLE_C, spec_of

from agentrl import slimecmd
from agentrl.api.runtime import RuntimeConfig
from agentrl.slimecmd import Cond, PodFacts, Start
from agentrl.slimecmd.compose import wandb_args
from conftest import load_example

FACTS = PodFacts(
    model_args=["--num-layers", "36"],
    train_env={"CUDA_HOME": "/usr/local/cuda"},
    wandb_key=True,
    start=Start.FIRST_RUN,
    hf_mode_flag=True,
)


def _spec(name: str = EXAMPLE_C, **runtime: Any) -> Any:
    body = load_example(name)
    body["spec"].setdefault("runtime", {}).update(runtime)
    return spec_of(body)


def test_order_train_env_wandb_and_extra_args_last() -> None:
    spec = _spec(extraArgs=["--rollout-top-p", "0.95"])
    cmd = slimecmd.compose(spec, FACTS)
    argv = cmd.argv()
    assert cmd.resolved
    assert argv[:4] == ["python3", "/root/slime/train.py", "--num-layers", "36"]
    assert argv[-2:] == ["--rollout-top-p", "0.95"]
    i = argv.index("--train-env-vars")
    assert json.loads(argv[i + 1]) == {"CUDA_HOME": "/usr/local/cuda"}
    origins = [p.origin for p in cmd.parts]
    assert origins[1] == "/root/slime/scripts/models/qwen2.5-7B.sh"
    assert origins[-1] == "spec.runtime.extraArgs"


def test_wandb_flags_only_with_the_key() -> None:
    spec = _spec(EXAMPLE_A)
    assert spec.tracking.wandb is not None  # example (a) configures wandb
    off = slimecmd.compose(spec, PodFacts(**{**FACTS.__dict__, "wandb_key": False})).argv()
    assert "--use-wandb" not in off
    on = slimecmd.compose(spec, FACTS).argv()
    i = on.index("--use-wandb")
    assert on[i : i + 3] == ["--use-wandb", "--wandb-project", spec.tracking.wandb.project]
    assert i > on.index("--train-env-vars")  # after the env, before extraArgs


def test_the_preview_marks_what_the_pod_decides() -> None:
    spec = _spec(EXAMPLE_A)  # checkpoint.path set, resume true
    cmd = slimecmd.compose(spec, PodFacts())
    assert not cmd.resolved
    conds = {p.cond: p.args for p in cmd.parts if p.cond}
    ckpt = spec.checkpoint.path
    assert conds == {
        Cond.HF_MODE_FLAG: ("--megatron-to-hf-mode", "bridge"),
        Cond.RESTART: ("--load", ckpt),
        Cond.FIRST_RUN: ("--finetune", "--no-load-optim", "--no-load-rng"),
        Cond.WANDB_KEY: tuple(wandb_args(spec, None)),
    }
    argv = cmd.argv()
    assert f"<restart, only when {ckpt}/latest_checkpointed_iteration.txt exists:>" in argv
    assert "<first run, otherwise:>" in argv
    assert any(a.startswith("<MODEL_ARGS from /root/slime/scripts/models/") for a in argv)


def test_without_a_checkpoint_to_resume_the_preview_knows_it_is_a_first_run() -> None:
    body = load_example(EXAMPLE_C)
    body["spec"]["checkpoint"] = {"path": "/ckpt", "resume": False}
    # resume: false still resumes a retry's own saves: the preview shows both starts.
    parts = slimecmd.compose(spec_of(body), PodFacts()).parts
    (restart,) = [p for p in parts if p.cond is Cond.RESTART]
    assert restart.args == ("--load", "/ckpt") and "a save of this experiment" in restart.marker
    assert any(p.args == ("--finetune", "--no-load-optim", "--no-load-rng") for p in parts)
    body["spec"]["checkpoint"] = {}
    argv = slimecmd.compose(spec_of(body), PodFacts()).argv()
    assert "--save" not in argv and "--finetune" in argv


def test_a_restart_loads_the_checkpoint() -> None:
    spec = _spec(EXAMPLE_A)
    argv = slimecmd.compose(spec, PodFacts(**{**FACTS.__dict__, "start": Start.RESUME})).argv()
    assert argv[argv.index("--load") + 1] == spec.checkpoint.path
    assert "--finetune" not in argv and "--no-load-optim" not in argv


def test_extra_args_that_set_the_start_take_it_over() -> None:
    for extra in (["--load", "/elsewhere"], ["--finetune"], ["--load=/x"]):
        argv = slimecmd.compose(_spec(EXAMPLE_A, extraArgs=extra), FACTS).argv()
        assert "--no-load-optim" not in argv and argv[-len(extra) :] == extra


def test_a_restart_after_extra_args_load_of_another_directory_loads_the_runs_saves() -> None:
    """extraArgs `--load` of another directory starts the first run only; a restart loads
    spec.checkpoint.path, after extraArgs so argparse keeps it (tests/bundle/launch/
    test_slime_start.py runs slime's parser and loader on both attempts)."""
    resume = PodFacts(**{**FACTS.__dict__, "start": Start.RESUME})
    spec = _spec(EXAMPLE_A, extraArgs=["--load", "/other-run"])
    ckpt = spec.checkpoint.path
    assert slimecmd.compose(spec, resume).argv()[-4:] == ["--load", "/other-run", "--load", ckpt]
    assert slimecmd.compose(spec, FACTS).argv()[-2:] == ["--load", "/other-run"]
    preview = slimecmd.preview(spec)
    assert preview[-3:] == [f"<restart, only when {ckpt}/latest_checkpointed_iteration.txt "
                            "exists:>", "--load", ckpt]  # fmt: skip
    # --finetune takes every attempt over (warned at validation); --load of the run itself
    # needs nothing after it.
    for extra in (["--load", "/other-run", "--finetune"], ["--load", ckpt], [f"--load={ckpt}/"]):
        argv = slimecmd.compose(_spec(EXAMPLE_A, extraArgs=extra), resume).argv()
        assert argv[-len(extra) :] == extra and argv.count("--load") <= 1


def test_a_no_load_flag_in_extra_args_leaves_the_restart_to_the_launcher() -> None:
    """`--no-load-optim` says what a load leaves out; the restart must still `--load` the run
    (tests/bundle/launch/test_slime_start.py runs slime's parser on it)."""
    for flag in ("--no-load-optim", "--no-load-rng"):
        spec = _spec(EXAMPLE_A, extraArgs=[flag])
        resume = PodFacts(**{**FACTS.__dict__, "start": Start.RESUME})
        argv = slimecmd.compose(spec, resume).argv()
        assert argv[argv.index("--load") + 1] == spec.checkpoint.path and argv[-1] == flag


def test_file_docs_follow_the_paths_in_the_argv() -> None:
    spec = _spec()
    cmd = slimecmd.compose(spec, PodFacts(files_dir="/run/x"))
    config = RuntimeConfig(
        experiment="e", namespace="n", bundle_version="v", spec=spec, gateway_url="http://g"
    )
    docs = slimecmd.file_docs(config, cmd, "/etc/agentrl/config.json")
    assert set(docs) == {"/run/x/slime-custom-config.yaml", "/run/x/slime-eval-config.yaml"}
    assert docs["/run/x/slime-custom-config.yaml"] == {
        "agentrl_config_path": "/etc/agentrl/config.json",
        "agentrl_experiment": "n/e",
        "agentrl_bundle_version": "v",
    }
    argv = cmd.argv()
    for path in docs:
        assert path in argv


def test_wandb_names_the_run_and_group_after_the_experiment() -> None:
    spec = _spec(EXAMPLE_A)
    assert spec.tracking.wandb is not None and spec.tracking.wandb.group is None
    argv = slimecmd.compose(spec, PodFacts(**{**FACTS.__dict__, "experiment": "rl/a"})).argv()
    i = argv.index("--wandb-group")
    assert argv[i + 1] == "rl/a" and "--disable-wandb-random-suffix" in argv
    # The preview without the experiment shows where it goes.
    assert "<namespace>/<name>" in slimecmd.preview(spec)
    assert "rl/a" in slimecmd.preview(spec, slimecmd.wandb_run_name("rl", "a"))
