"""Shared builders for the launcher tests: fake image filesystems and experiments.

A fake image is a temporary directory standing in for `/`: a CUDA toolkit laid out like
NVIDIA's (`lib64/libcudart.so.<major>[.x.y]`), pip's `nvidia/*/lib` wheel dirs, and the
`ldconfig -p` text the loader cache would print.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from agentrl.api.models import RLExperiment

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
SITE = "/usr/local/lib/python3.12/dist-packages"


def touch(root: Path, path: str, text: str = "") -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def cuda_toolkit(root: Path, home: str, major: int) -> None:
    touch(root, f"{home}/lib64/libcudart.so.{major}")
    touch(root, f"{home}/lib64/libcudart.so.{major}.0.76")
    touch(root, f"{home}/lib64/libcudart.so")  # unversioned dev symlink: never counted
    touch(root, f"{home}/bin/nvcc")


def cu12_wheels(root: Path, site: str = SITE) -> None:
    touch(root, f"{site}/nvidia/cuda_runtime/lib/libcudart.so.12")
    touch(root, f"{site}/nvidia/cublas/lib/libcublas.so.12")


def cu13_wheels(root: Path, site: str = SITE) -> None:
    touch(root, f"{site}/nvidia/cu13/lib/libcudart.so.13")


def ldconfig(*paths: str) -> str:
    """`ldconfig -p` output listing `paths` (plus an unrelated library)."""
    lines = [f"{len(paths) + 1} libs found in cache `/etc/ld.so.cache'"]
    lines.append("\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1")
    lines += [f"\t{Path(p).name} (libc6,x86-64) => {p}" for p in paths]
    return "\n".join(lines) + "\n"


# DESIGN's three examples, as the repository ships them.
EXAMPLE_A = "qwen2.5-3b-gsm8k-agentcore"  # 1x8 GPUs, AgentCore, SlimeRunner defaults
EXAMPLE_B = "qwen3-32b-swe-4node-tp-pp"  # 4x8, tp+pp, rollout on separate nodes
EXAMPLE_C = "qwen2.5-7b-http-agent-two-evals"  # HTTP agent, two eval sets that differ


def example_docs() -> dict[str, dict[str, Any]]:
    """Every example experiment in the repository's examples/*.yaml, by file stem."""
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "RLExperiment":
                docs[path.stem] = doc
    return docs


def example_doc(name: str) -> dict[str, Any]:
    """A deep copy of one example, safe to edit in a test."""
    return copy.deepcopy(example_docs()[name])


def experiment(doc: dict[str, Any]) -> RLExperiment:
    return RLExperiment.model_validate(doc)
