"""The real launcher in a subprocess against a fake slime tree (fake_slime/).

The fake has slime's shape: train.py (records the argv and env it was exec'd with),
scripts/models/qwen2.5-3B.sh (MODEL_ARGS as a bash array), slime.utils.arguments /
megatron.training.arguments / slime.backends.sglang_utils.arguments (tiny argparse
providers with slime's API), and torch_memory_saver's preload library. The CUDA toolkit is
a temporary directory whose major matches this machine's ldconfig cache, so the real
`ldconfig -p` is consulted and must agree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from agentrl.render.slime_args import (
    CUSTOM_CONFIG_PATH,
    EVAL_CONFIG_PATH,
    build_slime_args,
    preview_command,
)
from launch_trees import EXAMPLE_C, cuda_toolkit, example_doc, experiment, touch

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.launch import cuda, probe

FAKE = Path(__file__).parent / "fake_slime"
SECRET = "wandb-secret-value-123"
HEADER_SECRET = "tok-xyz"
BASE_PATH = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"


def _cache_major() -> int:
    """The libcudart major this machine's ldconfig cache holds (12 when it holds none)."""
    out = probe.ldconfig_text()  # "" where there is no ldconfig
    majors = {c.major for c in cuda.parse_ldconfig(out)}
    assert len(majors) <= 1, f"this machine's ldconfig cache already mixes majors: {majors}"
    return majors.pop() if majors else 12


class Pod:
    """A temporary pod filesystem: models, data, checkpoints, CUDA toolkit, runtime config."""

    def __init__(
        self, root: Path, extra_args: list[str] | None = None, slime_dir: Path = FAKE
    ) -> None:
        self.root = root
        self.record = root / "record.json"
        self.custom_config = root / "slime-custom-config.yaml"
        self.eval_config = root / "slime-eval-config.yaml"
        doc = example_doc(EXAMPLE_C)
        spec = doc["spec"]
        spec["model"]["path"] = str(touch(root, "models/qwen/config.json", "{}").parent)
        # The trainer starts from a Megatron checkpoint, as slime users often convert once.
        marker = touch(root, "models/qwen-megatron/latest_checkpointed_iteration.txt", "release")
        spec["model"]["refLoad"] = str(marker.parent)
        row = json.dumps({"prompt": "1+1?", "metadata": {"answer": "2"}}) + "\n"
        spec["data"]["train"] = str(touch(root, "data/train.jsonl", row * 3))
        for i, s in enumerate(spec["data"]["eval"]):
            s["path"] = str(touch(root, f"data/eval{i}.jsonl", row))
        spec["checkpoint"] = {"path": str(root / "ckpt" / "run1"), "saveInterval": 5}
        spec["tracking"] = {"wandb": {"project": "p", "apiKeySecret": {"name": "w", "key": "k"}}}
        cuda_toolkit(root, "/cuda", _cache_major())
        spec["runtime"] = {
            "cudaHome": str(root / "cuda"),
            "slimeDir": str(slime_dir),
            "extraArgs": ["--rollout-top-p", "0.95"] if extra_args is None else extra_args,
        }
        exp = experiment(doc)
        args = build_slime_args(exp)
        args[args.index(CUSTOM_CONFIG_PATH)] = str(self.custom_config)
        args[args.index(EVAL_CONFIG_PATH)] = str(self.eval_config)
        self.exp = exp
        self.config_path = root / "config.json"
        self.config_path.write_text(
            RuntimeConfig(
                experiment="http-agent",
                namespace="rl",
                bundle_version="t",
                spec=exp.spec,
                gateway_url="http://gw:9090",
                slime_args=args,
                wandb_api_key_env="WANDB_API_KEY",
                http_header_envs={"Authorization": "AGENTRL_HTTP_HEADER_0"},
            ).to_json()
        )

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": BASE_PATH,
            "PYTHONPATH": str(FAKE / "pylib"),
            "MEGATRON_DIR": str(FAKE / "Megatron-LM"),
            "AGENTRL_TEST_RECORD": str(self.record),
            "WANDB_API_KEY": SECRET,
            "AGENTRL_HTTP_HEADER_0": f"Bearer {HEADER_SECRET}",
            "LD_LIBRARY_PATH": "/usr/local/cuda-11.8/lib64:/opt/efa/lib",
            **extra,
        }

    def launch(self, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "agentrl.bundle.launch", "--config", str(self.config_path)]
        return subprocess.run(
            [*cmd, *flags],
            check=False,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=120,
        )


def _recorded(pod: Pod) -> dict[str, Any]:
    return json.loads(pod.record.read_text())


def test_exec_replaces_the_launcher_with_train_py_and_propagates_env(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.bundle.launch", "--config", str(pod.config_path)],
        env=pod.env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    rec = _recorded(pod)
    assert rec["pid"] == proc.pid  # exec, not a child process
    argv = rec["argv"]
    assert argv[0] == str(FAKE / "train.py")
    assert argv[1:4] == ["--swiglu", "--num-layers", "28"]  # MODEL_ARGS first, from bash
    assert argv[-2:] == ["--rollout-top-p", "0.95"]  # extraArgs last
    assert argv[argv.index("--use-wandb") : argv.index("--use-wandb") + 3] == [
        "--use-wandb",
        "--wandb-project",
        "p",
    ]
    assert SECRET not in " ".join(argv)
    env = rec["env"]
    cuda_home = str(tmp_path / "cuda")
    assert env["CUDA_HOME"] == cuda_home
    assert env["LD_LIBRARY_PATH"].split(":") == [f"{cuda_home}/lib64", "/opt/efa/lib"]
    assert env["PATH"].startswith(f"{cuda_home}/bin:")
    assert env["WANDB_API_KEY"] == SECRET and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["AGENTRL_HTTP_HEADER_0"] == f"Bearer {HEADER_SECRET}"
    assert str(FAKE) in env["PYTHONPATH"].split(":")
    train_env = json.loads(argv[argv.index("--train-env-vars") + 1])
    assert {k: env[k] for k in train_env} == train_env  # actors get the driver's pinned env
    assert set(train_env) >= {"CUDA_HOME", "LD_LIBRARY_PATH", "PYTHONPATH"}
    assert "agentrl_config_path" in pod.custom_config.read_text()
    assert argv[argv.index("--eval-config") + 1] == str(pod.eval_config)
    sets = yaml.safe_load(pod.eval_config.read_text())["eval"]["datasets"]
    assert [(d["name"], d["n_samples_per_eval_prompt"]) for d in sets] == [
        ("web-dev", 1),
        ("web-hard", 4),
    ]
    assert "exec" in err


def test_unknown_flag_is_refused_before_exec(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=["--use-dynamic-global-batch-size"])
    done = pod.launch()
    assert done.returncode == 2
    assert "--use-dynamic-global-batch-size (did you mean --use-dynamic-batch-size?)" in done.stderr
    assert "from spec.runtime.extraArgs" in done.stderr
    assert not pod.record.exists()


def test_dry_run_prints_json_with_secrets_redacted(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    done = pod.launch("--dry-run")
    assert done.returncode == 0, done.stderr
    assert not pod.record.exists()
    out = json.loads(done.stdout)
    assert out["argv"][:2] == ["python3", str(FAKE / "train.py")]
    assert out["env"]["CUDA_HOME"] == str(tmp_path / "cuda")
    assert SECRET not in done.stdout and HEADER_SECRET not in done.stdout
    assert out["secretsPresent"] == ["AGENTRL_HTTP_HEADER_0", "WANDB_API_KEY"]
    assert str(pod.custom_config) in out["files"]


def test_two_cuda_majors_and_preflight_problems_are_reported_together(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    other = 13 if _cache_major() == 12 else 12
    stray = touch(tmp_path, f"opt/lib/libcudart.so.{other}").parent
    (tmp_path / "models/qwen/config.json").unlink()
    (tmp_path / "data/train.jsonl").write_text('{"prompt": "x"}\n')
    done = pod.launch(LD_LIBRARY_PATH=str(stray))
    assert done.returncode == 2
    assert f"{stray}/libcudart.so.{other} (LD_LIBRARY_PATH)" in done.stderr
    assert "spec.model.path" in done.stderr and "has no config.json" in done.stderr
    assert "line 1" in done.stderr and '"metadata" is missing' in done.stderr
    assert not pod.record.exists()


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
    assert report["major"] == _cache_major()
    assert report["torchMemorySaver"] == str(
        FAKE / "pylib" / "torch_memory_saver_hook_mode_preload.abi3.so"
    )
    other = 13 if _cache_major() == 12 else 12
    stray = touch(tmp_path, f"opt/lib/libcudart.so.{other}").parent
    bad = subprocess.run(
        cmd, check=False, env=pod.env(LD_LIBRARY_PATH=str(stray)), capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert f"libcudart.so.{other}: {stray}/libcudart.so.{other} (LD_LIBRARY_PATH)" in bad.stderr


def test_without_slime_importable_flags_are_not_checked_but_said_so(tmp_path: Path) -> None:
    tree = tmp_path / "slime-tree"
    shutil.copytree(FAKE, tree, ignore=shutil.ignore_patterns("slime", "__pycache__"))
    pod = Pod(tmp_path, extra_args=["--no-such-flag"], slime_dir=tree)
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    assert "slime is not importable here: flags were not checked" in done.stderr
    assert _recorded(pod)["argv"][-1] == "--no-such-flag"


def test_slime_that_cannot_build_its_parser_stops_the_launch(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    done = pod.launch(MEGATRON_DIR=str(tmp_path / "no-megatron"))
    assert done.returncode == 2
    assert "could not build slime's argument parser" in done.stderr
    assert "No module named 'megatron'" in done.stderr
    assert not pod.record.exists()


def test_render_preview_is_the_command_the_launcher_execs(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    argv = ["python3", *_recorded(pod)["argv"]]
    paths = {CUSTOM_CONFIG_PATH: str(pod.custom_config), EVAL_CONFIG_PATH: str(pod.eval_config)}
    model_args = argv[2 : argv.index("--actor-num-nodes")]
    expected: list[str] = []
    for arg in preview_command(pod.exp):
        if arg.startswith("<MODEL_ARGS"):
            expected += model_args
        elif arg.startswith("<JSON:"):
            expected.append(argv[argv.index("--train-env-vars") + 1])
        elif not arg.startswith("<only when"):
            expected.append(paths.get(arg, arg))
    expected[1] = str(FAKE / "train.py")
    assert argv == expected
    assert len(model_args) == 23  # the 14 MODEL_ARGS entries of the fake script, 9 valued


def test_megatron_without_add_megatron_arguments_is_still_checked(tmp_path: Path) -> None:
    legacy = str(FAKE / "Megatron-LM-legacy")
    ok = Pod(tmp_path / "ok").launch(MEGATRON_DIR=legacy)
    assert ok.returncode == 0, ok.stderr
    bad = Pod(tmp_path / "bad", extra_args=["--tensor-parallel-size", "2"]).launch(
        MEGATRON_DIR=legacy
    )
    assert bad.returncode == 2
    assert "--tensor-parallel-size (did you mean --tensor-model-parallel-size?)" in bad.stderr


def test_unwritable_slime_config_file_stops_the_launch(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    pod.custom_config.mkdir()  # a directory where the YAML must go
    done = pod.launch()
    assert done.returncode == 2
    assert f"cannot write {pod.custom_config}: Is a directory" in done.stderr
    assert not pod.record.exists()


def _fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    """A PATH with an `nvidia-smi` script (the real one needs a GPU driver)."""
    exe = touch(tmp_path, "bin/nvidia-smi", f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return f"{exe.parent}:{BASE_PATH}"


def test_visible_gpu_count_must_match_the_spec(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    lines = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"
    path = _fake_nvidia_smi(tmp_path, f"printf '{lines}\\n'")
    done = pod.launch(PATH=path)
    assert done.returncode == 2
    assert "spec.resources.gpusPerNode is 8 but this node sees 2 GPUs" in done.stderr


def test_nvidia_smi_without_a_driver_only_warns(tmp_path: Path) -> None:
    pod = Pod(tmp_path)
    path = _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    done = pod.launch(PATH=path)
    assert done.returncode == 0, done.stderr
    assert "warning: nvidia-smi failed, GPU count not checked: NVIDIA-SMI has failed" in done.stderr
