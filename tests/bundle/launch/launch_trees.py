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


# The experiments of DESIGN's three examples, used until (and beside) examples/*.yaml.
_BASE: dict[str, Any] = {
    "apiVersion": "agentrl.io/v1alpha1",
    "kind": "RLExperiment",
    "metadata": {"name": "qwen3b-gsm8k", "namespace": "rl"},
    "spec": {
        "model": {"path": "/models/Qwen2.5-3B-Instruct", "type": "qwen2.5-3B"},
        "data": {"train": "/data/gsm8k/train.jsonl"},
        "agent": {
            "agentCore": {
                "runtimeArn": "arn:aws:bedrock-agentcore:us-west-2:111122223333:runtime/math-AbC",
                "region": "us-west-2",
                "s3Bucket": "agentrl-rollouts",
            }
        },
        "grpo": {"numRollouts": 100},
    },
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and key in out else value
    return out


BUILTIN: dict[str, dict[str, Any]] = {
    "builtin-1x8-agentcore": _BASE,
    "builtin-4x8-tp-pp-disaggregated": _merge(
        _BASE,
        {
            "metadata": {"name": "qwen32b-tp-pp"},
            "spec": {
                "model": {"path": "/models/Qwen2.5-32B-Instruct", "type": "qwen2.5-32B"},
                "resources": {
                    "nodes": 4,
                    "gpusPerNode": 8,
                    "colocate": False,
                    "rolloutGpus": 8,
                    "rolloutGpusPerEngine": 4,
                    "parallelism": {"tensor": 4, "pipeline": 2},
                },
                "grpo": {"numRollouts": 200, "maxResponseLength": 4096, "maxTokensPerGpu": 16384},
                "checkpoint": {"path": "/ckpt/qwen32b", "saveInterval": 10},
            },
        },
    ),
    "builtin-http-two-evals": _merge(
        {k: v for k, v in _BASE.items() if k != "spec"},
        {
            "metadata": {"name": "http-agent"},
            "spec": {
                **{k: v for k, v in _BASE["spec"].items() if k != "agent"},
                "agent": {"http": {"url": "https://agent.example.com/episodes"}},
                "data": {
                    "train": "/data/train.jsonl",
                    "eval": [
                        {"name": "gsm8k", "path": "/data/gsm8k-test.jsonl"},
                        {"name": "math500", "path": "/data/math500.jsonl", "samplesPerPrompt": 4,
                         "temperature": 0.6},
                    ],
                    "evalInterval": 5,
                },
                "model": {**_BASE["spec"]["model"], "reasoningParser": "qwen3",
                          "toolCallParser": "qwen25"},
                "runtime": {"extraArgs": ["--rollout-top-p", "0.95"]},
            },
        },
    ),
}  # fmt: skip


def example_docs() -> dict[str, dict[str, Any]]:
    """Every example experiment: the repository's examples/*.yaml, then the built-ins."""
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "RLExperiment":
                docs[path.stem] = doc
    return {**docs, **BUILTIN}


def experiment(doc: dict[str, Any]) -> RLExperiment:
    return RLExperiment.model_validate(doc)
