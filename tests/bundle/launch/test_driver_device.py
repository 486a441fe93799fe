"""slime's driver needs a CUDA device: proved with Megatron's own validate_args, at each row.

The launcher runs in a temporary pod (launch_pod) and execs train.py's recorder; its argv
and env go to slime's own `parse_args` (tests/support/upstream_site/slime_run.py), which
runs Megatron's `validate_args` as written. The pod it runs in is described by the env the
way the container runtime and Ray shape it (tests/support/upstream_site/torch_cuda.py): a
GPU worker (where agentrl's RayJob runs the driver), agentrl's GPU-less head (where Ray runs
a driver that asks for no resources), or a GPU worker whose GPUs Ray hid from a zero-GPU
process. Where slime would die, the launcher refuses first, naming the cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_pod import Pod, slime_upstream

ROWS = slime_upstream.ROWS
pytestmark = pytest.mark.slow  # each test launches the launcher and runs slime's parser


@pytest.mark.parametrize("row", ROWS)
def test_megatron_validate_args_needs_the_gpu_the_driver_pod_has(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    argv = pod.slime_args()
    tp = int(argv[argv.index("--tensor-model-parallel-size") + 1])
    assert tp > 1  # the case in which Megatron reads the GPU's architecture
    worker = pod.driver_env()
    head = pod.driver_env(pod_gpus=0)
    hidden = {**worker, "CUDA_VISIBLE_DEVICES": ""}
    cases = [{"argv": argv, "env": env} for env in (worker, head, hidden)]
    on_worker, on_head, gpus_hidden = slime_upstream.run_slime(row, cases)

    assert "parse_error" not in on_worker, on_worker.get("trace")
    assert on_worker["args"]["ref_load"] == pod.exp.spec.model.ref_load
    for result, error in ((on_head, "Found no NVIDIA driver"), (gpus_hidden, "No CUDA GPUs")):
        assert result["parse_error"].startswith("RuntimeError: " + error), result
        trace = result["trace"]  # Megatron's own check, reached from slime's parse_args
        assert "get_device_arch_version" in trace and "in validate_args" in trace


@pytest.mark.parametrize(
    ("env", "cause"),
    [
        ({"AGENTRL_POD_GPUS": "0"}, "this pod has no GPU: Ray ran the driver on the CPU head"),
        ({"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES is empty: Ray hid this pod's GPUs"),
    ],
)
def test_the_launcher_refuses_a_driver_without_a_device(
    env: dict[str, str], cause: str, tmp_path: Path
) -> None:
    pod = Pod(tmp_path)
    done = pod.launch(**env)
    assert done.returncode == 2
    assert f"slime's driver sees no CUDA device: {cause}" in done.stderr
    assert "validate_args" in done.stderr
    assert not pod.record.exists()  # slime never started
