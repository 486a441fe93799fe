"""The first command: `hack/demo.sh` and `agentrl render --summary` fit on a screen.

The demo runs as a newcomer runs it, from a fresh virtualenv holding only the core CLI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from agentrl.cli.main import main
from conftest import EXAMPLES_DIR, TEST_IMAGE, example_paths

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 120
MAX_BYTES = 8 * 1024
# What the examples need to render: an image (none is published yet) and the platform policy
# that allows their IRSA ServiceAccount.
RENDER = ["--image", TEST_IMAGE, "--policy", str(EXAMPLES_DIR / "platform" / "policy.yaml")]


def _summary(capsys: pytest.CaptureFixture[str], example: Path) -> str:
    assert main(["render", "-f", str(example), *RENDER, "--summary"]) == 0
    return capsys.readouterr().out


def _objects(capsys: pytest.CaptureFixture[str], example: Path) -> list[dict[str, object]]:
    assert main(["render", "-f", str(example), *RENDER]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


@pytest.mark.parametrize("example", example_paths(), ids=lambda p: p.stem)
def test_summary_is_short_and_names_every_object_with_its_size(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = _objects(capsys, example)
    out = _summary(capsys, example)
    assert len(out.splitlines()) <= MAX_LINES and len(out.encode()) <= MAX_BYTES
    for obj in objects:
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        size = r"\d+(\.\d)? (B|KiB)"
        row = re.search(rf"^  {obj['kind']}\s+{re.escape(meta['name'])}\s+{size}\s", out, re.M)
        assert row, f"{obj['kind']} {meta['name']} missing from:\n{out}"
    assert "\nslime command " in out and "python3 " in out and "--rollout-function-path" in out
    assert "base64" not in out and "agentrl-bundle.zip:" not in out  # no object bodies


def test_summary_gpu_layout_of_a_disaggregated_multi_node_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _summary(capsys, EXAMPLES_DIR / "qwen3-32b-swe-4node-tp-pp.yaml")
    assert "GPU layout: 32 GPUs, disaggregated: rollout has GPUs of its own" in out
    assert re.search(r"workers\s+4 pods x 8 nvidia.com/gpu \(.*vpc.amazonaws.com/efa 32\); "
                     r"slime's driver runs on one of them", out)  # fmt: skip
    head = next(line for line in out.splitlines() if line.lstrip().startswith("head "))
    assert "driver" not in head  # the head holds no GPU; the driver runs on a worker
    assert re.search(r"training\s+16 GPUs, Megatron: tensor 4 x pipeline 2 x context 1 -> "
                     r"data parallel 2", out)  # fmt: skip
    assert re.search(r"rollout\s+16 GPUs, 4 SGLang engine\(s\) x 4 GPUs", out)
    assert "cluster deleted 3600 s after the run" in out


@pytest.mark.slow
def test_demo_from_a_fresh_venv_prints_a_screenful_and_writes_the_yaml(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    out_dir = tmp_path / "out"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")},
        "AGENTRL_VENV": str(env_dir),
        "AGENTRL_DEMO_OUT": str(out_dir),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "hack" / "demo.sh")],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shown = done.stdout + done.stderr
    assert len(shown.splitlines()) <= MAX_LINES and len(shown.encode()) <= MAX_BYTES, shown
    full = out_dir / "qwen2.5-3b-gsm8k-agentcore.yaml"
    kinds = [d["kind"] for d in yaml.safe_load_all(full.read_text())]
    assert kinds == ["ConfigMap", "ConfigMap", "Service", "Service", "RayJob"]
    assert f"every object in full: {out_dir}/qwen2.5-3b-gsm8k-agentcore.yaml" in shown
    for name in (
        "qwen3b-gsm8k-config",
        "qwen3b-gsm8k-gateway",
        "qwen3b-gsm8k-metrics",
        "qwen3b-gsm8k-bundle-",
    ):
        assert name in shown
    assert "GPU layout: 8 GPUs" in shown and "python3 /root/slime/train.py" in shown
    assert "agentrl logs qwen3b-gsm8k -n rl -f" in shown
    assert (env_dir / "bin" / "agentrl").exists()  # installed the core CLI itself


def test_summary_as_json_holds_what_the_text_shows(capsys: pytest.CaptureFixture[str]) -> None:
    example = EXAMPLES_DIR / "qwen3-32b-swe-4node-tp-pp.yaml"
    objects = _objects(capsys, example)
    assert main(["render", "-f", str(example), *RENDER, "--summary", "-o", "json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["experiments"]
    assert (summary["namespace"], summary["name"]) == ("rl", "qwen3-32b-swe")
    expected = []
    for obj in objects:
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        expected.append((obj["kind"], meta["name"]))
    assert [(o["kind"], o["name"]) for o in summary["objects"]] == expected
    assert all(o["bytes"] > 0 and o["what"] for o in summary["objects"])
    assert summary["bytes"] == sum(o["bytes"] for o in summary["objects"])
    layout = summary["gpuLayout"]
    assert layout["gpus"] == 32 and layout["colocate"] is False
    assert layout["workers"]["pods"] == 4 and layout["workers"]["gpusPerPod"] == 8
    assert layout["workers"]["extraResources"] == {"vpc.amazonaws.com/efa": 32}
    assert layout["training"] == {"gpus": 16, "tensor": 4, "pipeline": 2, "context": 1,
                                  "dataParallel": 2}  # fmt: skip
    assert layout["rollout"] == {"gpus": 16, "engines": 4, "gpusPerEngine": 4}
    assert summary["command"][0] == "python3" and "--rollout-function-path" in summary["command"]


def test_summary_and_show_command_together_is_a_wrong_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: render prints every object, the command line, or a summary. Given both flags
    it printed the command alone, and the summary asked for was dropped without a word."""
    example = EXAMPLES_DIR / "qwen2.5-3b-gsm8k-agentcore.yaml"
    with pytest.raises(SystemExit) as stop:
        main(["render", "-f", str(example), *RENDER, "--summary", "--show-command"])
    out, err = capsys.readouterr()
    assert (stop.value.code, out) == (2, "")
    assert "argument --show-command: not allowed with argument --summary" in err
