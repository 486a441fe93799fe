"""First run vs restart, proved with slime's own code at each supported commit.

Each test launches the real launcher in a temporary pod (launch_pod), takes the argv and env
it exec'd train.py with, and hands them to slime's own `parse_args` (Megatron's
`validate_args` included, on the GPU worker the RayJob places the driver on) and
`load_checkpoint` (tests/support/upstream_site/slime_run.py): what slime ends up loading is
slime's answer, not a restatement of it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from launch_pod import Pod, megatron_checkpoint, slime_upstream

from agentrl.api.rules import start_rollout_fixed, start_taken_over

ROWS = slime_upstream.ROWS
pytestmark = pytest.mark.slow  # each test launches the launcher and runs slime's parser


def _slime(pod: Pod, *argvs: list[str]) -> list[dict[str, Any]]:
    env = pod.driver_env()
    cases = [{"argv": argv, "env": env, "load": True} for argv in argvs]
    return slime_upstream.run_slime(pod.row, cases)


def _launched(pod: Pod) -> list[str]:
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    return pod.slime_args()


def _starts_from_model(result: dict[str, Any], weights: str) -> None:
    args = result["args"]
    assert args["load"] == weights  # slime loads --ref-load
    assert (args["finetune"], args["no_load_optim"], args["no_load_rng"]) == (True, True, True)
    assert args["start_rollout_id"] == 0


@pytest.mark.parametrize("row", ROWS)
def test_first_run_starts_from_the_hf_model_and_a_retry_resumes(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    first = _launched(pod)
    # Made at launch; it holds only the launcher's log files, which slime's loader (run on
    # the restart's argv below) does not mind.
    assert [p.name for p in pod.checkpoint.iterdir()] == ["logs"]
    assert "--load" not in first
    # Attempt 1 saved iteration 10 before the pod died; KubeRay's attempt 2 starts a new pod.
    megatron_checkpoint(pod.checkpoint, "10")
    second = _launched(pod)
    assert second[second.index("--load") + 1] == str(pod.checkpoint)

    run1, run2 = _slime(pod, first, second)
    hf = pod.exp.spec.model.path
    _starts_from_model(run1, hf)
    assert run1["loaded"]["kind"] == "hf" and run1["loaded"]["path"] == hf
    args = run2["args"]
    assert args["load"] == str(pod.checkpoint)
    assert not (args["finetune"] or args["no_load_optim"] or args["no_load_rng"])
    assert args["start_rollout_id"] is None  # slime takes it from the checkpoint
    assert run2["loaded"] == {
        "kind": "megatron",
        "path": str(pod.checkpoint),
        "iteration": 10,
        "finetune": False,
        "no_load_optim": False,
        "no_load_rng": False,
    }


@pytest.mark.parametrize("row", ROWS)
def test_first_run_from_a_megatron_model_gets_a_fresh_optimizer(row: str, tmp_path: Path) -> None:
    """A Megatron refLoad is loaded as weights only, on every row: without agentrl's
    first-run flags, fa3c990 in bridge mode would also load its optimizer and RNG state."""
    pod = Pod(tmp_path, row=row, megatron_ref=True)
    [run] = _slime(pod, _launched(pod))
    ref = pod.exp.spec.model.ref_load
    _starts_from_model(run, ref)
    loaded = run["loaded"]
    assert (loaded["kind"], loaded["path"], loaded["iteration"]) == ("megatron", ref, "release")
    assert loaded["finetune"] and loaded["no_load_optim"] and loaded["no_load_rng"]


@pytest.mark.parametrize("row", ROWS)
def test_load_of_an_empty_directory_is_what_crashed(row: str, tmp_path: Path) -> None:
    """The old argv (`--load` at the empty checkpoint dir) against slime's own loader: fa3c990
    in bridge mode keeps it and asserts; 624b824 falls back to --ref-load."""
    pod = Pod(tmp_path, row=row)
    argv = [
        a for a in _launched(pod) if a not in ("--finetune", "--no-load-optim", "--no-load-rng")
    ]
    old = [*argv, "--load", str(pod.checkpoint)]
    [with_logs] = _slime(pod, old)  # the directory holds only the launcher's logs/
    shutil.rmtree(pod.checkpoint / "logs")
    [empty] = _slime(pod, old)
    if row == "fa3c990":
        assert empty["args"]["load"] == str(pod.checkpoint)
        assert "does not exist or is an empty directory" in empty["load_error"]
        # Not empty but no tracker: slime would read HF weights from the checkpoint dir.
        assert with_logs["loaded"] == {
            "kind": "hf",
            "path": str(pod.checkpoint),
            "loader": "megatron-bridge",
        }
    else:
        for run in (empty, with_logs):
            assert run["args"]["load"] == pod.exp.spec.model.path
            assert run["loaded"]["kind"] == "hf"


def test_raw_mode_starts_from_a_megatron_model(tmp_path: Path) -> None:
    """fa3c990's raw mode (a user override) loads a Megatron refLoad on a first run."""
    pod = Pod(tmp_path, megatron_ref=True, extra_args=["--megatron-to-hf-mode", "raw"])
    [run] = _slime(pod, _launched(pod))
    assert run["args"]["megatron_to_hf_mode"] == "raw"
    _starts_from_model(run, pod.exp.spec.model.ref_load)
    assert run["loaded"]["kind"] == "megatron"


def test_raw_mode_with_hf_weights_is_refused_before_slime_would_fail(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=["--megatron-to-hf-mode", "raw"])
    done = pod.launch()
    assert done.returncode == 2
    assert "spec.model.refLoad" in done.stderr and "--megatron-to-hf-mode raw" in done.stderr
    assert not pod.record.exists()
    ok = Pod(tmp_path / "bridge")  # the same tree in bridge mode starts
    argv = _launched(ok)
    [run] = _slime(ok, [*argv, "--megatron-to-hf-mode", "raw"])
    assert "Only bridge mode is supported for loading HF checkpoint" in run["load_error"]


@pytest.mark.parametrize("row", ROWS)
def test_missing_ref_load_is_refused_like_slime_refuses_it(row: str, tmp_path: Path) -> None:
    """--use-kl-loss needs --ref-load on disk: slime raises; the launcher says so first."""
    pod = Pod(tmp_path, row=row, megatron_ref=True)
    argv = _launched(pod)
    shutil.rmtree(pod.exp.spec.model.ref_load or "")
    [run] = _slime(pod, argv)
    assert "does not exist, please check the path" in run["parse_error"]
    done = pod.launch()
    assert done.returncode == 2 and "spec.model.refLoad" in done.stderr


@pytest.mark.parametrize("row", ROWS)
def test_resume_false_starts_from_the_model_beside_a_saved_run(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    megatron_checkpoint(pod.checkpoint, "10")
    pod.config_path.write_text(
        pod.config_path.read_text().replace('"resume": true', '"resume": false')
    )
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    assert "spec.checkpoint.resume is false" in done.stderr
    [run] = _slime(pod, pod.slime_args())
    _starts_from_model(run, pod.exp.spec.model.path)


@pytest.mark.parametrize("row", ROWS)
def test_resume_false_leaves_another_runs_saves_but_a_retry_resumes_its_own(
    row: str, tmp_path: Path
) -> None:
    """The launcher end to end (decision, run mark written, retry read): attempt 1 of an
    experiment with `checkpoint.resume: false` starts from the model beside another run's
    iteration 5; once it has saved iteration 10, KubeRay's attempt 2 loads that, and slime's
    own loader agrees. Before, attempt 2 started from the model again and saved over it."""
    pod = Pod(tmp_path, row=row)
    megatron_checkpoint(pod.checkpoint, "5")  # another experiment's saves
    config = json.loads(pod.config_path.read_text())
    config["spec"]["checkpoint"]["resume"], config["uid"] = False, "3b9f-attempts"
    pod.config_path.write_text(json.dumps(config))
    first = _launched(pod)
    assert "--load" not in first
    megatron_checkpoint(pod.checkpoint, "10")  # attempt 1 saved before its pod died
    second = _launched(pod)
    assert second[second.index("--load") + 1] == str(pod.checkpoint)
    run1, run2 = _slime(pod, first, second)
    _starts_from_model(run1, pod.exp.spec.model.path)
    assert run2["args"]["load"] == str(pod.checkpoint) and not run2["args"]["finetune"]
    assert run2["args"]["start_rollout_id"] is None  # slime takes it from the checkpoint


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("flag", ["--no-load-optim", "--no-load-rng"])
def test_a_retry_with_a_no_load_flag_in_extra_args_still_resumes(
    row: str, flag: str, tmp_path: Path
) -> None:
    """extraArgs `--no-load-optim` says what not to load, not to start over: attempt 2 must
    still load the saved run (without --load slime took --ref-load at rollout 0, and its saves
    overwrote the run's checkpoints)."""
    pod = Pod(tmp_path, row=row, extra_args=["--seed", "1234", flag])
    first = _launched(pod)
    assert "--load" not in first
    megatron_checkpoint(pod.checkpoint, "10")
    second = _launched(pod)
    run1, run2 = _slime(pod, first, second)
    _starts_from_model(run1, pod.exp.spec.model.path)
    args = run2["args"]
    assert args["load"] == str(pod.checkpoint) and not args["finetune"]
    assert args["start_rollout_id"] is None  # slime takes it from the checkpoint
    assert run2["loaded"]["kind"] == "megatron" and run2["loaded"]["iteration"] == 10
    assert args[flag[2:].replace("-", "_")] is True  # the user's flag holds


@pytest.mark.parametrize("row", ROWS)
def test_a_retry_with_finetune_in_extra_args_starts_over_and_is_warned(
    row: str, tmp_path: Path
) -> None:
    """extraArgs `--finetune` takes every attempt's start over: attempt 2, beside the run's
    saved iteration 10, starts from the model at rollout 0 (and saves over the run), which
    validation warns about before any GPU is scheduled."""
    pod = Pod(tmp_path, row=row, extra_args=["--seed", "1234", "--finetune"])
    first = _launched(pod)
    megatron_checkpoint(pod.checkpoint, "10")
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    # The job log says what slime does, not "restart from saved iteration 10".
    assert "--finetune: from the model at rollout 0, beside saved iteration 10" in done.stderr
    assert "restart from saved iteration" not in done.stderr
    second = pod.slime_args()
    assert "--load" not in second
    _, run2 = _slime(pod, first, second)
    assert run2["args"]["load"] == pod.exp.spec.model.path  # the model, not the run
    assert run2["args"]["start_rollout_id"] == 0
    ((path, message, _, severity),) = list(start_taken_over(pod.exp))
    assert path == "spec.runtime.extraArgs[2]" and "iteration 0" in message
    assert severity == "warning"


@pytest.mark.parametrize("row", ROWS)
def test_a_retry_after_a_first_run_from_extra_args_load_resumes_the_runs_own_saves(
    row: str, tmp_path: Path
) -> None:
    """extraArgs `--load` of another run's checkpoint (iteration 5) starts attempt 1 from it;
    attempt 1 saves iteration 10 in spec.checkpoint.path. Attempt 2 must load iteration 10
    (slime's own parse_args and loader on its argv): with the user's `--load` alone it loaded
    iteration 5 again, redid rollouts 6 to 10 and saved over the run's checkpoints."""
    other = megatron_checkpoint(tmp_path / "other-run", "5")
    pod = Pod(tmp_path / "pod", row=row, extra_args=["--seed", "1234", "--load", str(other)])
    done = pod.launch()
    assert f"first run, from {other} (spec.runtime.extraArgs --load)" in done.stderr
    first = pod.slime_args()
    megatron_checkpoint(pod.checkpoint, "10")
    done = pod.launch()
    assert "restart from saved iteration 10" in done.stderr
    second = pod.slime_args()
    run1, run2 = _slime(pod, first, second)
    assert run1["args"]["load"] == str(other) and run1["loaded"]["iteration"] == 5
    assert run2["args"]["load"] == str(pod.checkpoint)
    assert run2["args"]["start_rollout_id"] is None  # slime takes it from the checkpoint
    assert run2["loaded"]["kind"] == "megatron" and run2["loaded"]["iteration"] == 10
    assert not run2["args"]["finetune"]


@pytest.mark.parametrize("row", ROWS)
def test_a_fixed_start_rollout_would_make_a_retry_train_again_and_is_refused(
    row: str, tmp_path: Path
) -> None:
    """extraArgs `--start-rollout-id 0`: on attempt 2 slime (its own parse_args and loader)
    loads saved iteration 10, weights and optimizer, and still counts from rollout 0, so it
    trains rollouts 0 to 10 again and saves over them. The launcher refuses that restart
    (validation refuses the spec before any GPU)."""
    pod = Pod(tmp_path / "pod", row=row)
    _launched(pod)
    megatron_checkpoint(pod.checkpoint, "10")
    second = _launched(pod)
    [run] = _slime(pod, [*second, "--start-rollout-id", "0"])  # extraArgs come last
    assert run["loaded"]["kind"] == "megatron" and run["loaded"]["iteration"] == 10
    assert run["args"]["start_rollout_id"] == 0  # not 11: slime counts from the flag

    fixed = Pod(tmp_path / "fixed", row=row, extra_args=["--seed", "1", "--start-rollout-id", "0"])
    assert fixed.launch().returncode == 0  # a first run: nothing saved to go on from
    megatron_checkpoint(fixed.checkpoint, "10")
    done = fixed.launch()
    assert done.returncode == 2
    assert "spec.runtime.extraArgs[2]: --start-rollout-id on a restart from saved iteration 10" in (
        done.stderr
    )
    ((path, _, _, severity),) = list(start_rollout_fixed(fixed.exp))
    assert (path, severity) == ("spec.runtime.extraArgs[2]", "error")


@pytest.mark.parametrize("row", ROWS)
def test_checkpoints_saved_in_the_starting_weights_would_become_the_kl_reference(
    row: str, tmp_path: Path
) -> None:
    """checkpoint.path = the trainer's starting weights: slime loads the reference model with
    its own `load_other_checkpoint("ref", --ref-load)`, which takes the latest save there.
    On attempt 2 the reference is then the run's iteration 10, the trained policy, not the
    starting weights. The launcher refuses that directory (validation does too)."""
    pod = Pod(tmp_path / "pod", row=row)
    _launched(pod)
    megatron_checkpoint(pod.checkpoint, "10")
    second = _launched(pod)
    same = [*second, "--ref-load", str(pod.checkpoint)]  # refLoad = checkpoint.path
    ours, shared = slime_upstream.run_slime(
        row, [{"argv": a, "env": pod.driver_env(), "load_ref": True} for a in (second, same)]
    )
    assert ours["loaded_ref"]["kind"] == "hf"  # the starting weights
    assert ours["loaded_ref"]["path"] == pod.exp.spec.model.path
    assert shared["loaded_ref"]["kind"] == "megatron"
    assert shared["loaded_ref"]["iteration"] == 10  # the run's latest save

    refused = Pod(tmp_path / "refused", row=row)
    config = refused.config_path.read_text()
    refused.config_path.write_text(
        config.replace(str(refused.checkpoint), refused.exp.spec.model.path)
    )
    done = refused.launch()
    assert done.returncode == 2
    assert "is also the trainer's starting weights (spec.model.refLoad)" in done.stderr
    assert not refused.record.exists()


@pytest.mark.parametrize("row", ROWS)
def test_save_interval_without_a_checkpoint_path_is_refused_before_slime_stops_on_it(
    row: str, tmp_path: Path
) -> None:
    """extraArgs `--save-interval` and no spec.checkpoint.path: agentrl renders no --save,
    and slime's own parse_args stops on it, on the GPU worker. The launcher refuses it first
    (validation refuses the spec)."""
    pod = Pod(tmp_path / "pod", row=row, checkpoint=False)
    argv = _launched(pod)
    [run] = _slime(pod, [*argv, "--save-interval", "5"])  # extraArgs come last
    assert "'--save' is required when save_interval is set" in run["parse_error"]

    refused = Pod(tmp_path / "refused", row=row, checkpoint=False,
                  extra_args=["--seed", "1", "--save-interval", "5"])  # fmt: skip
    done = refused.launch()
    assert done.returncode == 2
    assert "spec.runtime.extraArgs[2]: --save-interval without spec.checkpoint.path" in (
        done.stderr
    )
    assert not refused.record.exists()


@pytest.mark.parametrize("row", ROWS)
def test_save_elsewhere_in_extra_args_would_start_every_retry_over_and_is_refused(
    row: str, tmp_path: Path
) -> None:
    """extraArgs `--save` elsewhere than spec.checkpoint.path: slime saves the run there, the
    launcher judges checkpoint.path at each pod start and finds nothing, so attempt 2 (slime's
    own parse_args on its argv) starts from the model at rollout 0 and saves into the very
    directory attempt 1 saved iteration 10 in. The launcher now refuses the flag."""
    elsewhere = tmp_path / "elsewhere"
    pod = Pod(tmp_path / "pod", row=row)
    _launched(pod)
    megatron_checkpoint(elsewhere, "10")  # attempt 1 saved where argparse's last --save said
    second = _launched(pod)
    assert "--load" not in second  # nothing saved in checkpoint.path
    [run] = _slime(pod, [*second, "--save", str(elsewhere)])  # extraArgs come last
    assert run["args"]["save"] == str(elsewhere)
    _starts_from_model(run, pod.exp.spec.model.path)

    refused = Pod(tmp_path / "refused", row=row, extra_args=["--save", str(elsewhere)])
    done = refused.launch()
    assert done.returncode == 2
    assert "--save (from spec.runtime.extraArgs) cannot work" in done.stderr
    assert "remove it and set spec.checkpoint.path" in done.stderr
    assert not refused.record.exists()


def test_a_tracker_naming_a_missing_iteration_stops_the_launch(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    megatron_checkpoint(pod.checkpoint, "10")
    shutil.rmtree(pod.checkpoint / "iter_0000010")
    done = pod.launch()
    assert done.returncode == 2
    assert "latest_checkpointed_iteration.txt ('10') names iter_0000010, which is missing" in (
        done.stderr
    )
    assert not pod.record.exists()


@pytest.mark.parametrize("row", ROWS)
def test_eval_config_entries_are_read_by_slime(row: str, tmp_path: Path) -> None:
    """Per-set eval settings reach slime's EvalDatasetConfig (built with **entry)."""
    pod = Pod(tmp_path, row=row)
    [run] = _slime(pod, _launched(pod))
    got = [
        (d["name"], d["n_samples_per_eval_prompt"], d["temperature"], d.get("max_response_len"))
        for d in run["eval_datasets"]
    ]
    rollout_len = pod.exp.spec.grpo.max_response_length  # a set without its own length
    assert got == [("web-dev", 1, 0.0, rollout_len), ("web-hard", 4, 0.7, 2048)]
    assert {d["input_key"] for d in run["eval_datasets"]} == {"prompt"}
    assert {d["metadata_key"] for d in run["eval_datasets"]} == {"metadata"}


def _as_mistral(pod: Pod) -> None:
    config = Path(pod.exp.spec.model.path) / "config.json"
    body = {**json.loads(config.read_text()), "model_type": "mistral"}
    config.write_text(json.dumps({**body, "architectures": ["MistralForCausalLM"]}))


def test_hf_weights_slimes_own_loader_cannot_take_are_refused_at_624b824(
    tmp_path: Path,
) -> None:
    """slime 624b824 loads HF weights per model type; the launcher asks slime's own loader
    in the image before the GPUs are up, instead of slime's ValueError after."""
    pod = Pod(tmp_path, row="624b824")
    argv = _launched(pod)  # qwen2: slime's loader takes it
    _as_mistral(pod)
    [run] = _slime(pod, argv)
    assert "Unsupported HuggingFace model type: mistral" in run["load_error"]
    done = pod.launch()
    assert done.returncode == 2
    assert "model_type 'mistral', which the image's slime cannot load" in done.stderr
    bridge = Pod(tmp_path / "bridge")  # fa3c990 loads any model through Megatron-Bridge
    _as_mistral(bridge)
    assert bridge.launch().returncode == 0
