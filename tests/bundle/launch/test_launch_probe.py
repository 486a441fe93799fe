"""The launcher's I/O edge on temporary trees: bash-sourced MODEL_ARGS and the
torch_memory_saver listing (with the libcudart major each preload build links)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from launch_trees import touch

from agentrl.bundle.launch import cuda, probe


def test_model_args_keep_quoted_items_whole(tmp_path: Path) -> None:
    touch(tmp_path, "scripts/models/tiny.sh", 'X=2\nMODEL_ARGS=(--a "b c" --n "$X")\n')
    assert probe.model_args(str(tmp_path), "tiny") == ["--a", "b c", "--n", "2"]


def test_model_args_errors_name_the_field_and_known_types(tmp_path: Path) -> None:
    touch(tmp_path, "scripts/models/qwen2.5-3B.sh", "MODEL_ARGS=(--x)\n")
    touch(tmp_path, "scripts/models/empty.sh", "OTHER=1\n")
    touch(tmp_path, "scripts/models/broken.sh", "exit 3\n")
    with pytest.raises(probe.ProbeError, match=r"spec.model.type: .*known types: broken, empty"):
        probe.model_args(str(tmp_path), "qwen2.5-3b")
    with pytest.raises(probe.ProbeError, match="does not define the bash array MODEL_ARGS"):
        probe.model_args(str(tmp_path), "empty")
    with pytest.raises(probe.ProbeError, match=r"sourcing .*broken\.sh failed"):
        probe.model_args(str(tmp_path), "broken")


def test_tms_listing_reads_the_linked_cudart_major(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch(tmp_path, "torch_memory_saver/__init__.py")
    stem = cuda.TMS_STEM
    (tmp_path / f"{stem}.abi3.so").write_bytes(b"\x7fELF\x00libcudart.so.12\x00libc.so.6\x00")
    (tmp_path / f"{stem}_cu13.abi3.so").write_bytes(b"\x7fELF\x00libcudart.so.13\x00")
    (tmp_path / f"{stem}_x.abi3.so").write_bytes(b"no cudart here")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    site_dir, libs = probe.tms_listing()
    assert site_dir == str(tmp_path)
    assert libs == {f"{stem}.abi3.so": 12, f"{stem}_cu13.abi3.so": 13, f"{stem}_x.abi3.so": None}
    # slime 624b824 picks _cu13 first, but fa3c990 picks the unsuffixed cu12 build
    fa3c990, r624b824 = cuda.KNOWN_TMS_ORDERS
    assert cuda.choose_tms(site_dir, libs, 13, [r624b824]).path == f"{tmp_path}/{stem}_cu13.abi3.so"
    problem = cuda.choose_tms(site_dir, libs, 13, [fa3c990]).problem
    assert problem is not None and f"{stem}.abi3.so (built for CUDA 12)" in problem
