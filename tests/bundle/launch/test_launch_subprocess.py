"""The real launcher in a subprocess, in a pod whose image holds slime's own source.

See launch_pod: slime at a supported commit, Megatron-LM, SGLang's argument modules, and
two stand-ins (train.py records its argv; torch_memory_saver by file name). The CUDA
toolkit is a temporary directory whose major matches the pod's loader cache, this machine's
real `ldconfig -p` with one CUDA runtime (tests/support/loader_cache.py), which the launcher
consults and must agree with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from launch_pod import (
    HEADER_SECRET,
    POD_IMAGE,
    SECRET,
    Pod,
    slime_upstream,
)
from launch_trees import touch
from tests.support.loader_cache import pod_major

from agentrl import slimecmd
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.launch import cuda, probe
from agentrl.slimecmd.checkpoint import FIRST_RUN_FLAGS
from agentrl.slimecmd.compose import HF_MODE_FLAG


def test_exec_replaces_the_launcher_with_train_py_and_propagates_env(tmp_path: Path) -> None:
    pod = Pod(tmp_path, checkpoint=False)  # no volume to keep a log on: plain exec
    proc = subprocess.Popen(pod.command(), env=pod.env(), stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    rec = pod.recorded()
    assert rec["pid"] == proc.pid  # exec, not a child process
    argv = rec["argv"]
    assert argv[0] == str(pod.image / "train.py")
    assert argv[1:4] == ["--swiglu", "--num-layers", "28"]  # MODEL_ARGS first, from bash
    assert argv[-2:] == ["--seed", "1234"]  # extraArgs last
    i = argv.index("--use-wandb")
    assert argv[i : i + 3] == ["--use-wandb", "--wandb-project", "p"]
    assert SECRET not in " ".join(argv)
    env = rec["env"]
    cuda_home = str(tmp_path / "cuda")
    assert env["CUDA_HOME"] == cuda_home
    # This venv's nvidia wheels first, if it has any (a CUDA build of torch from PyPI).
    wheels = cuda.nvidia_wheel_lib_dirs(Path("/"), probe.site_dirs())
    assert env["LD_LIBRARY_PATH"].split(":") == [*wheels, f"{cuda_home}/lib64", "/opt/efa/lib"]
    assert env["PATH"].startswith(f"{cuda_home}/bin:")
    assert env["WANDB_API_KEY"] == SECRET and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["AGENTRL_HTTP_HEADER_0"] == f"Bearer {HEADER_SECRET}"
    assert str(pod.image) in env["PYTHONPATH"].split(":")
    assert str(slime_upstream.MEGATRON) in env["PYTHONPATH"].split(":")
    train_env = json.loads(argv[argv.index("--train-env-vars") + 1])
    assert {k: env[k] for k in train_env} == train_env  # actors get the driver's pinned env
    assert set(train_env) >= {"CUDA_HOME", "LD_LIBRARY_PATH", "PYTHONPATH"}
    custom = pod.files_dir / "slime-custom-config.yaml"
    assert "agentrl_config_path" in custom.read_text()
    eval_config = pod.files_dir / "slime-eval-config.yaml"
    assert argv[argv.index("--eval-config") + 1] == str(eval_config)
    sets = yaml.safe_load(eval_config.read_text())["eval"]["datasets"]
    assert [(d["name"], d["n_samples_per_eval_prompt"]) for d in sets] == [
        ("web-dev", 1),
        ("web-hard", 4),
    ]
    assert "first run, from the model; exec [" in err  # the job log shows the whole argv


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_the_launcher_adapts_to_the_slime_in_the_image(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    argv = pod.slime_args()
    if row == "fa3c990":
        assert argv[argv.index(HF_MODE_FLAG) + 1] == "bridge"
    else:
        assert HF_MODE_FLAG not in argv  # slime 624b824 has no such flag
    assert set(FIRST_RUN_FLAGS) <= set(argv)


def test_unknown_flag_is_refused_before_exec(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=["--use-dynamic-global-batch-size"])
    done = pod.launch()
    assert done.returncode == 2
    assert "--use-dynamic-global-batch-size (did you mean --use-dynamic-batch-size?)" in done.stderr
    assert "from spec.runtime.extraArgs" in done.stderr
    assert not pod.record.exists()


def test_a_flag_the_row_dropped_is_refused_there(tmp_path: Path) -> None:
    pod = Pod(tmp_path, row="624b824", extra_args=[HF_MODE_FLAG, "raw"])
    done = pod.launch()
    assert done.returncode == 2
    line = next(x for x in done.stderr.splitlines() if x.strip().startswith(HF_MODE_FLAG))
    assert line.endswith("from spec.runtime.extraArgs")
    assert "1 problem(s)" in done.stderr


def test_dry_run_prints_json_with_secrets_redacted(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    done = pod.launch("--dry-run")
    assert done.returncode == 0, done.stderr
    assert not pod.record.exists()
    out = json.loads(done.stdout)
    assert out["argv"][:2] == ["python3", str(pod.image / "train.py")]
    assert out["start"] == {"decision": "first-run", "iteration": None}
    assert out["slime"] == {"definesMegatronToHfMode": True}
    assert out["env"]["CUDA_HOME"] == str(tmp_path / "cuda")
    assert SECRET not in done.stdout and HEADER_SECRET not in done.stdout
    assert out["secretsPresent"] == ["AGENTRL_HTTP_HEADER_0", "WANDB_API_KEY"]
    assert str(pod.files_dir / "slime-custom-config.yaml") in out["files"]


def test_two_cuda_majors_and_preflight_problems_are_reported_together(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    other = 13 if pod_major() == 12 else 12
    stray = touch(tmp_path, f"opt/lib/libcudart.so.{other}").parent
    (tmp_path / "models/qwen/config.json").unlink()
    (tmp_path / "data/train.jsonl").write_text('{"prompt": "x"}\n')
    done = pod.launch(LD_LIBRARY_PATH=str(stray))
    assert done.returncode == 2
    assert f"{stray}/libcudart.so.{other} (LD_LIBRARY_PATH)" in done.stderr
    assert "spec.model.path" in done.stderr and "has no config.json" in done.stderr
    assert "line 1" in done.stderr and '"metadata" is missing' in done.stderr
    assert not pod.record.exists()


def test_a_hub_id_the_offline_pods_cannot_resolve_stops_the_launch(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    config = RuntimeConfig.load(pod.config_path)
    spec = config.spec.model_copy(deep=True)
    spec.model.path = "Qwen/Qwen2.5-7B-Instruct"  # refLoad stays the pod's HF directory
    pod.config_path.write_text(config.model_copy(update={"spec": spec}).to_json())
    done = pod.launch(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    assert done.returncode == 2, done.stderr
    assert "spec.model.path: 'Qwen/Qwen2.5-7B-Instruct' is a Hugging Face id, and " in done.stderr
    assert f"HF_HUB_OFFLINE=1 keeps the pods off the hub, but the hub cache {tmp_path}/hub" in (
        done.stderr
    )
    assert not pod.record.exists()


@pytest.mark.parametrize("limit", ["3", "4"])
def test_a_prompt_length_limit_in_extra_args_is_measured_before_slime_starts(
    limit: str, tmp_path: Path
) -> None:
    """--rollout-max-prompt-len in extraArgs: the launcher measures the train prompts with
    the pod's tokenizer, as slime's Dataset does (the pod's rows are 4 tokens each, the row
    added here is longer). A limit every row exceeds stops the launch, naming the lines; one
    that only some rows exceed starts slime with the flag as given, and says which rows
    slime will drop."""
    pod = Pod(tmp_path, extra_args=["--seed", "1234", "--rollout-max-prompt-len", limit])
    train = tmp_path / "data" / "train.jsonl"
    long_row = {"prompt": "1+1? " * 8, "metadata": {"answer": "2"}}
    train.write_text(train.read_text() + json.dumps(long_row) + "\n")
    rows = len(train.read_text().splitlines())
    done = pod.launch()
    said = f"spec.runtime.extraArgs: --rollout-max-prompt-len {limit}: slime's Dataset drops"
    assert said in done.stderr
    if limit == "3":
        assert done.returncode == 2, done.stderr
        assert "that is every row, nothing is left to train on" in done.stderr
        assert not pod.record.exists()
    else:
        assert done.returncode == 0, done.stderr
        assert f"at lines {rows} (" in done.stderr and f"1 of {rows} rows" in done.stderr
        assert "a rehearsal leaves them out too" in done.stderr
        assert "--rollout-max-prompt-len" in pod.slime_args()


def test_missing_runtime_config_is_a_clear_error(tmp_path: Path) -> None:
    missing = "config.json"
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.bundle.launch", "--config", str(tmp_path / missing)],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=60,
    )
    assert done.returncode == 2
    assert f"cannot read the runtime config {tmp_path / missing}" in done.stderr


def test_check_cuda_mode_for_the_image_build(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    cmd = [sys.executable, "-m", "agentrl.bundle.launch", "--check-cuda"]
    cmd += ["--cuda-home", str(tmp_path / "cuda")]
    ok = subprocess.run(cmd, check=False, env=pod.env(), capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["major"] == pod_major()
    assert report["torchMemorySaver"] == str(
        POD_IMAGE / "pylib" / "torch_memory_saver_hook_mode_preload.abi3.so"
    )
    other = 13 if pod_major() == 12 else 12
    stray = touch(tmp_path, f"opt/lib/libcudart.so.{other}").parent
    bad = subprocess.run(
        cmd, check=False, env=pod.env(LD_LIBRARY_PATH=str(stray)), capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert f"libcudart.so.{other}: {stray}/libcudart.so.{other} (LD_LIBRARY_PATH)" in bad.stderr


def test_an_image_without_slime_stops_the_launch(tmp_path: Path) -> None:
    pod = Pod(tmp_path, slime_package=False)
    env = pod.env()
    env.pop("AGENTRL_UPSTREAM_ROOTS")  # nothing serves `import slime` either
    done = subprocess.run(
        pod.command(), check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    assert "slime is not importable with the pinned env" in done.stderr
    assert "spec.runtime.slimeDir" in done.stderr
    assert not pod.record.exists()


def test_slime_that_cannot_build_its_parser_stops_the_launch(tmp_path: Path) -> None:
    """slime imports, but Megatron's argument code does not import in this Python (no
    stand-ins here: the Megatron-LM snapshot needs its GPU stack)."""
    pod = Pod(tmp_path)
    env = pod.env()
    env.pop("AGENTRL_UPSTREAM_ROOTS")
    done = subprocess.run(
        pod.command(), check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    assert "could not build slime's argument parser" in done.stderr
    # Whichever import fails first (torch where it is absent, Megatron's core without its
    # GPU stack), slime's own traceback is in the message.
    assert "Error: " in done.stderr.split("could not build slime's argument parser", 1)[1]
    assert not pod.record.exists()


def test_render_preview_is_the_command_the_launcher_execs(tmp_path: Path) -> None:
    """`agentrl render --show-command` and the exec'd argv agree on everything they share:
    the preview's conditions, resolved as the pod resolved them, give the same argv."""
    pod = Pod(tmp_path)
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    argv = ["python3", *pod.recorded()["argv"]]
    holds = {
        slimecmd.Cond.HF_MODE_FLAG: True,
        slimecmd.Cond.FIRST_RUN: True,
        slimecmd.Cond.RESTART: False,
        slimecmd.Cond.WANDB_KEY: True,
    }
    config = RuntimeConfig.load(pod.config_path)  # the experiment the operator rendered it for
    run = slimecmd.wandb_run_name(config.namespace, config.experiment)
    facts = slimecmd.PodFacts(files_dir=str(pod.files_dir), experiment=run)
    preview = slimecmd.compose(pod.exp.spec, facts)  # as `agentrl render --show-command` does
    model_args = argv[2 : argv.index("--actor-num-nodes")]
    expected: list[str] = []
    for part in preview.parts:
        if part.cond is not None and not holds[part.cond]:
            continue
        if part.placeholder and part.args[0].startswith("<MODEL_ARGS"):
            expected += model_args
        elif part.placeholder:
            expected += [part.args[0], argv[argv.index("--train-env-vars") + 1]]
        else:
            expected += part.args
    expected[1] = str(pod.image / "train.py")
    assert argv == expected
    assert len(model_args) == 24  # qwen2.5-7B.sh: 15 entries, 9 of them valued


def test_unwritable_slime_config_file_stops_the_launch(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    (pod.files_dir / "slime-custom-config.yaml").mkdir(parents=True)  # a dir where YAML goes
    done = pod.launch()
    assert done.returncode == 2
    assert "slime-custom-config.yaml: Is a directory" in done.stderr
    assert not pod.record.exists()


def _fake_nvidia_smi(pod: Pod, body: str) -> str:
    """The pod's PATH, with an `nvidia-smi` script (the real one needs a GPU driver)."""
    exe = pod.bin / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return pod.path


def test_visible_gpu_count_must_match_the_spec(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    lines = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"
    done = pod.launch(PATH=_fake_nvidia_smi(pod, f"printf '{lines}\\n'"))
    assert done.returncode == 2
    assert "spec.resources.gpusPerNode is 8 but this node sees 2 GPUs" in done.stderr


def test_nvidia_smi_without_a_driver_only_warns(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    path = _fake_nvidia_smi(pod, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    done = pod.launch(PATH=path)
    assert done.returncode == 0, done.stderr
    assert "warning: nvidia-smi failed, GPU count not checked: NVIDIA-SMI has failed" in done.stderr
