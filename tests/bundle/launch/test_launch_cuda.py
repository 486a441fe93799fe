"""CUDA pinning on fake image trees and fake `ldconfig -p` output."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_trees import SITE, cu12_wheels, cu13_wheels, cuda_toolkit, ldconfig, touch

from agentrl.bundle.launch import cuda

AMBIENT = {
    "LD_LIBRARY_PATH": "/usr/local/cuda-13.0/lib64:/usr/local/nvidia/lib64:/opt/amazon/efa/lib",
    "PATH": "/usr/local/cuda-13.0/bin:/usr/local/bin:/usr/bin",
}


def test_clean_cu12(tmp_path: Path) -> None:
    cuda_toolkit(tmp_path, "/usr/local/cuda-12.9", 12)
    cu12_wheels(tmp_path)
    text = ldconfig("/usr/local/cuda-12.9/targets/x86_64-linux/lib/libcudart.so.12")
    env = cuda.resolve_cuda(tmp_path, "/usr/local/cuda-12.9", [SITE], AMBIENT, text)
    assert env.major == 12
    # wheels first, then the one toolkit, then ambient entries without other CUDA installs
    assert env.ld_library_path == [
        f"{SITE}/nvidia/cublas/lib",
        f"{SITE}/nvidia/cuda_runtime/lib",
        "/usr/local/cuda-12.9/lib64",
        "/usr/local/nvidia/lib64",
        "/opt/amazon/efa/lib",
    ]
    assert env.path == ["/usr/local/cuda-12.9/bin", "/usr/local/bin", "/usr/bin"]
    assert env.env()["CUDA_HOME"] == "/usr/local/cuda-12.9"
    sources = {(c.path, c.source) for c in env.cudarts}
    assert (f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12", "LD_LIBRARY_PATH") in sources
    assert ("/usr/local/cuda-12.9/lib64/libcudart.so.12.0.76", "LD_LIBRARY_PATH") in sources
    assert any(c.source == "ldconfig cache" for c in env.cudarts)


def test_clean_cu13(tmp_path: Path) -> None:
    cuda_toolkit(tmp_path, "/usr/local/cuda", 13)
    cu13_wheels(tmp_path)
    text = ldconfig("/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13")
    env = cuda.resolve_cuda(tmp_path, "/usr/local/cuda/", [SITE], {}, text)
    assert env.major == 13
    assert env.cuda_home == "/usr/local/cuda"
    assert env.ld_library_path == [f"{SITE}/nvidia/cu13/lib", "/usr/local/cuda/lib64"]
    assert {c.major for c in env.cudarts} == {13}


def test_cu12_wheels_beside_cu13_ldconfig_cache_fails_naming_both(tmp_path: Path) -> None:
    cuda_toolkit(tmp_path, "/usr/local/cuda-12.9", 12)
    cu12_wheels(tmp_path)
    cached = "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13"
    with pytest.raises(cuda.CudaError) as err:
        cuda.resolve_cuda(tmp_path, "/usr/local/cuda-12.9", [SITE], AMBIENT, ldconfig(cached))
    message = str(err.value)
    assert f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12" in message
    assert f"{cached} (ldconfig cache)" in message
    assert "Multiple libcudart libraries found" in message
    assert "ldconfig" in message and "LD_LIBRARY_PATH cannot hide" in message


def test_stray_wheel_of_other_major_is_found_even_off_ld_library_path(tmp_path: Path) -> None:
    # A cu13 toolkit plus cu12 wheels: the wheel dir joins LD_LIBRARY_PATH and is refused.
    cuda_toolkit(tmp_path, "/usr/local/cuda-13.0", 13)
    cu12_wheels(tmp_path)
    with pytest.raises(
        cuda.CudaError, match=r"libcudart.so.12: .*cuda_runtime/lib/libcudart.so.12"
    ):
        cuda.resolve_cuda(tmp_path, "/usr/local/cuda-13.0", [SITE], {}, "")


def test_ambient_cuda_paths_are_dropped_so_they_are_not_refused(tmp_path: Path) -> None:
    cuda_toolkit(tmp_path, "/usr/local/cuda-12.9", 12)
    cuda_toolkit(tmp_path, "/usr/local/cuda-13.0", 13)  # installed but only on the ambient path
    env = cuda.resolve_cuda(tmp_path, "/usr/local/cuda-12.9", [], AMBIENT, "")
    assert "/usr/local/cuda-13.0/lib64" not in env.ld_library_path
    assert {c.major for c in env.cudarts} == {12}


def test_cuda_home_missing_names_the_field_and_the_installed_toolkits(tmp_path: Path) -> None:
    cuda_toolkit(tmp_path, "/usr/local/cuda-12.9", 12)
    with pytest.raises(cuda.CudaError) as err:
        cuda.resolve_cuda(tmp_path, "/usr/local/cuda", [SITE], {}, "")
    assert "CUDA_HOME /usr/local/cuda does not exist" in str(err.value)
    assert "spec.runtime.cudaHome" in str(err.value)
    assert "/usr/local/cuda-12.9" in str(err.value)


def test_cuda_home_without_runtime_library(tmp_path: Path) -> None:
    touch(tmp_path, "/usr/local/cuda/bin/nvcc")
    with pytest.raises(cuda.CudaError, match="holds no libcudart"):
        cuda.resolve_cuda(tmp_path, "/usr/local/cuda", [], {}, "")


def test_parse_ldconfig_ignores_other_libraries_and_unversioned_names() -> None:
    text = ldconfig("/usr/lib/libcudart.so", "/opt/x/libcudart.so.11.0", "/usr/lib/libcuda.so.1")
    assert [(c.major, c.path) for c in cuda.parse_ldconfig(text)] == [
        (11, "/opt/x/libcudart.so.11.0")
    ]


STEM = cuda.TMS_STEM
FA3C990, R624B824 = cuda.KNOWN_TMS_ORDERS  # each row's order, as its actor_group.py lists it


@pytest.mark.parametrize(
    ("libs", "major", "orders", "path", "problem"),
    [
        ({f"{STEM}_cu12.abi3.so": None}, 12, [FA3C990], f"{STEM}_cu12.abi3.so", None),
        ({f"{STEM}.abi3.so": None}, 13, [FA3C990], f"{STEM}.abi3.so", None),
        ({f"{STEM}.abi3.so": 13}, 13, [R624B824], f"{STEM}.abi3.so", None),
        (
            {f"{STEM}_cu13.abi3.so": 13, f"{STEM}.abi3.so": 13},
            13,
            [R624B824],
            f"{STEM}_cu13.abi3.so",
            None,
        ),
        # The same image: fa3c990 does not know _cu13 and takes the unsuffixed build.
        (
            {f"{STEM}_cu13.abi3.so": 13, f"{STEM}.abi3.so": 13},
            13,
            [FA3C990],
            f"{STEM}.abi3.so",
            None,
        ),
        # fa3c990 tries _cu12 first: a stale cu12 build would be preloaded into cu13 actors
        (
            {f"{STEM}_cu12.abi3.so": None, f"{STEM}_cu13.abi3.so": None},
            13,
            [FA3C990],
            None,
            f"{STEM}_cu12.abi3.so (built for CUDA 12) into CUDA 13",
        ),
        # ... which 624b824 never reaches: it takes _cu13
        (
            {f"{STEM}_cu12.abi3.so": None, f"{STEM}_cu13.abi3.so": None},
            13,
            [R624B824],
            f"{STEM}_cu13.abi3.so",
            None,
        ),
        # An order that could not be read: every row's order must pick a build for the major.
        (
            {f"{STEM}_cu12.abi3.so": None, f"{STEM}_cu13.abi3.so": None},
            13,
            [FA3C990, R624B824],
            None,
            f"{STEM}_cu12.abi3.so (built for CUDA 12) into CUDA 13",
        ),
        (
            {f"{STEM}_cu13.abi3.so": None},
            12,
            [R624B824],
            None,
            f"{STEM}_cu13.abi3.so (built for CUDA 13)",
        ),
        # fa3c990 would raise: neither of its names exists
        (
            {f"{STEM}_cu13.abi3.so": 13},
            13,
            [FA3C990],
            None,
            f"looks for {STEM}_cu12.abi3.so, {STEM}.abi3.so in {SITE} and none exists",
        ),
        # slime #2186: an unsuffixed build compiled for CUDA 12 inside a CUDA 13 image
        (
            {f"{STEM}.abi3.so": 12},
            13,
            [R624B824],
            None,
            f"{STEM}.abi3.so (built for CUDA 12) into CUDA 13",
        ),
        ({}, 12, [R624B824], None, "none exists; install torch_memory_saver built for CUDA 12"),
    ],
)
def test_torch_memory_saver_choice(
    libs: dict[str, int | None],
    major: int,
    orders: list[tuple[str, ...]],
    path: str | None,
    problem: str | None,
) -> None:
    choice = cuda.choose_tms(SITE, libs, major, orders)
    assert choice.path == (f"{SITE}/{path}" if path else None)
    if problem is None:
        assert choice.problem is None
    else:
        assert choice.problem is not None and problem in choice.problem


def test_torch_memory_saver_not_installed() -> None:
    assert cuda.choose_tms(None, {}, 12, cuda.KNOWN_TMS_ORDERS).problem == (
        "torch_memory_saver is not installed; colocated training offloads through it"
    )


def test_a_test_pods_loader_cache_keeps_one_cuda_major(tmp_path: Path) -> None:
    """The launcher tests' pods see this machine's `ldconfig -p` with one CUDA runtime
    (tests/support/loader_cache.py), so a machine with two registered still passes them."""
    from tests.support.loader_cache import one_major

    cu12 = "/usr/local/cuda-12.9/targets/x86_64-linux/lib/libcudart.so.12"
    cu13 = "/usr/local/cuda-13.0/lib/libcudart.so.13"
    machine = ldconfig(cu13, cu12, "/usr/local/cuda-13.0/lib/libcudart.so")
    cuda_toolkit(tmp_path, "/cuda", 13)
    with pytest.raises(cuda.CudaError, match=r"majors \[12, 13\]"):
        cuda.resolve_cuda(tmp_path, "/cuda", [], AMBIENT, machine)
    major, pod = one_major(machine)
    assert major == 13
    assert pod == machine.replace(f"\tlibcudart.so.12 (libc6,x86-64) => {cu12}\n", "")
    assert cuda.resolve_cuda(tmp_path, "/cuda", [], AMBIENT, pod).major == 13
    assert one_major(ldconfig()) == (12, ldconfig())  # no runtime at all: a CUDA 12 pod
    # A runtime wheel in the venv decides: no pod can hide it (a CUDA build of torch).
    major, pod = one_major(machine, wheels={12})
    assert major == 12
    assert pod == machine.replace(f"\tlibcudart.so.13 (libc6,x86-64) => {cu13}\n", "")
