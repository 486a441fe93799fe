"""torch_memory_saver's preload library: the launcher judges an image as the slime in it will.

slime's actor_group LD_PRELOADs into the Megatron actors the first preload build that
exists beside torch_memory_saver, in an order its own source lists, which differs between
the supported rows. The launcher reads that order from the image's slime. These tests hold
its verdict to what each row's own code sets as LD_PRELOAD (tests/support/upstream_site/
slime_preload.py), on the released torch-memory-saver 0.0.10 wheel's layout and on the
layouts images build.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from launch_pod import POD_IMAGE, Pod, slime_upstream
from tests.support.loader_cache import pod_major

from agentrl.bundle.launch import cuda, main

STEM = cuda.TMS_STEM
# torch_memory_saver-0.0.10-cp39-abi3-manylinux2014_x86_64.whl (sha256 786e18755a9a...
# 5a28f), the release on PyPI: the shared libraries at the top of the wheel, each with the
# libcudart major its symbol versions name (`cudaMemcpy@libcudart.so.12`), which is what
# `probe.tms_listing` reads. Unpacking `pip download torch-memory-saver==0.0.10` and listing
# it with `probe.tms_listing` gives exactly this. Its unsuffixed build is a CUDA 12 one.
WHEEL_0_0_10 = {
    f"{STEM}.abi3.so": 12,
    f"{STEM}_cu12.abi3.so": 12,
    f"{STEM}_cu13.abi3.so": 13,
    "torch_memory_saver_hook_mode_torch.abi3.so": 12,
    "torch_memory_saver_hook_mode_torch_cu12.abi3.so": 12,
    "torch_memory_saver_hook_mode_torch_cu13.abi3.so": 13,
}
LAYOUTS: dict[str, dict[str, int]] = {
    "wheel-0.0.10": WHEEL_0_0_10,
    # images/slime/Dockerfile on a CUDA 13 base: `_cu13` only, the unsuffixed name linked to it
    "agentrl-image-cu13": {f"{STEM}_cu13.abi3.so": 13, f"{STEM}.abi3.so": 13},
    # slime #2186: one unsuffixed build, compiled for CUDA 12
    "unsuffixed-cu12": {f"{STEM}.abi3.so": 12},
    "none": {},
}
# What each row's actor_group.py lists, first tried first.
ORDERS = {"fa3c990": ("_cu12", ""), "624b824": ("_cu13", "_cu12", "")}


def pylib(root: Path, libs: dict[str, int]) -> Path:
    """A site dir holding torch_memory_saver (the stand-in package) and `libs`, each file
    naming the libcudart major it links as the real builds' symbol versions do."""
    shutil.copytree(POD_IMAGE / "pylib" / "torch_memory_saver", root / "torch_memory_saver")
    for name, major in libs.items():
        (root / name).write_bytes(b"\x7fELF\x00cudaMemcpy@libcudart.so.%d\x00" % major)
    return root


def actor_group(row: str) -> str:
    return (slime_upstream.slime_dir(row) / "slime" / "ray" / "actor_group.py").read_text()


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_the_lookup_order_is_read_from_the_rows_own_source(row: str) -> None:
    slime_upstream.require_upstream()
    assert cuda.tms_lookup_order(actor_group(row)) == ORDERS[row]


@pytest.mark.parametrize(
    "source",
    [
        "",
        "for path in [",  # not Python
        "names = ['a.so', 'b.so']",  # no preload build named
        f"a = ['{STEM}_cu12.abi3.so']\nb = ['{STEM}_cu13.abi3.so', '{STEM}.abi3.so']",
        f"a = ['{STEM}_cu12.abi3.so', 'other.so']",  # a list that is not only preload builds
    ],
)
def test_no_order_is_read_where_the_source_gives_none_or_two(source: str) -> None:
    assert cuda.tms_lookup_order(source) is None


def test_the_order_is_read_whatever_the_literal() -> None:
    source = f"for p in ('{STEM}_cu13.abi3.so', '{STEM}_cu12.abi3.so'):\n    pass\n"
    assert cuda.tms_lookup_order(source) == ("_cu13", "_cu12")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_the_launcher_agrees_with_slimes_own_ld_preload(
    row: str, layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's pick is the row's own LD_PRELOAD; it refuses exactly where that
    library is built for another CUDA major, or where slime finds none and raises."""
    libs = LAYOUTS[layout]
    lib = pylib(tmp_path, libs)
    truth = slime_upstream.slime_preload(row, lib)
    monkeypatch.setattr(sys, "path", [str(lib), *sys.path])  # probe.tms_listing imports here
    env = slime_upstream.env(row, {**os.environ, "PYTHONPATH": str(lib)})
    for major in (12, 13):
        choice, warning = main.tms_choice(env, major)
        assert warning is None  # the order came from the row's own source
        preload = truth.get("LD_PRELOAD")
        if preload is None:
            assert "Cannot find torch_memory_saver dynamic library" in str(truth["error"])
            assert choice.path is None
            assert choice.problem is not None and "none exists" in choice.problem
            continue
        picked = Path(preload).name
        if libs[picked] == major:
            assert (choice.path, choice.problem) == (preload, None)
        else:
            assert choice.path is None
            assert choice.problem is not None
            assert f"{preload} (built for CUDA {libs[picked]}) into CUDA {major}" in choice.problem


@pytest.mark.parametrize(
    ("row", "picked"), [("fa3c990", f"{STEM}_cu12.abi3.so"), ("624b824", f"{STEM}_cu13.abi3.so")]
)
def test_the_released_wheel_is_judged_by_the_image_s_row(
    row: str, picked: str, tmp_path: Path
) -> None:
    """torch-memory-saver 0.0.10 on a CUDA 13 machine works with slime 624b824 (it preloads
    `_cu13`) and not with fa3c990 (`_cu12`); the launcher used to refuse both."""
    lib = pylib(tmp_path, WHEEL_0_0_10)
    assert slime_upstream.slime_preload(row, lib) == {"LD_PRELOAD": str(lib / picked)}


def test_an_unreadable_order_is_judged_by_every_row_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = pylib(tmp_path, WHEEL_0_0_10)
    monkeypatch.setattr(sys, "path", [str(lib), *sys.path])
    env = {**os.environ, "PYTHONPATH": str(lib)}
    env.pop("AGENTRL_UPSTREAM_ROOTS", None)  # nothing serves `import slime`
    choice, warning = main.tms_choice(env, 13)
    assert warning is not None and "lookup order is unknown" in warning
    assert "slime is not importable" in warning
    assert (
        choice.problem is not None and f"{STEM}_cu12.abi3.so (built for CUDA 12)" in choice.problem
    )


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_the_launch_judges_the_wheel_by_the_slime_it_holds(row: str, tmp_path: Path) -> None:
    """End to end, in a pod of this machine's CUDA major (its loader cache decides it):
    the launcher's dry run agrees with the row's own LD_PRELOAD."""
    lib = pylib(tmp_path / "pylib", WHEEL_0_0_10)
    pod = Pod(tmp_path / "pod", row=row, pylib=lib)
    preload = slime_upstream.slime_preload(row, lib)["LD_PRELOAD"]
    assert preload is not None
    built_for = WHEEL_0_0_10[Path(preload).name]
    done = pod.launch("--dry-run")
    if built_for == pod_major():
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["torchMemorySaver"] == preload
    else:
        assert done.returncode == 2  # colocated: the actors offload through it
        assert f"slime would LD_PRELOAD {preload} (built for CUDA {built_for})" in done.stderr
