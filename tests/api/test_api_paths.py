"""Paths in the pods (agentrl.api.paths): each lies on the mount Kubernetes would put it on."""

from __future__ import annotations

from typing import Any

from tests.conftest import minimal_body

from agentrl.api.validation import parse_experiment


def _volumes(*mounts: dict[str, Any]) -> dict[str, Any]:
    names = sorted({m["name"] for m in mounts})
    return {
        "volumes": [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in names],
        "volumeMounts": list(mounts),
    }


def _problems(**spec: Any) -> list[str]:
    return [str(p) for p in parse_experiment(minimal_body(**spec))[1]]


def test_a_writable_mount_inside_a_read_only_one_takes_checkpoints() -> None:
    runtime = _volumes(
        {"name": "models", "mountPath": "/store", "readOnly": True},
        {"name": "ckpt", "mountPath": "/store/ckpt/"},
        {"name": "models", "mountPath": "/models"},
        {"name": "models", "mountPath": "/data"},
    )
    assert _problems(runtime=runtime, checkpoint={"path": "/store/ckpt/run"}) == []
    assert [
        p.split(":")[0] for p in _problems(runtime=runtime, checkpoint={"path": "/store/x"})
    ] == ["spec.checkpoint.path"]


def test_paths_are_matched_component_by_component() -> None:
    runtime = _volumes({"name": "d", "mountPath": "/data"}, {"name": "d", "mountPath": "/models"})
    found = _problems(runtime=runtime, data={"train": "/database/train.jsonl"})
    assert len(found) == 1 and found[0].startswith("warning: spec.data.train: /database")
    assert _problems(runtime=runtime, data={"train": "/data//x/./train.jsonl"}) == []


def test_extra_code_directories_hold_small_files() -> None:
    runtime = _volumes({"name": "m", "mountPath": "/models"})
    runtime["extraCode"] = [{"configMap": "tools"}]
    assert _problems(runtime=runtime, data={"train": "/opt/agentrl/extra/0/train.jsonl"}) == []


def test_a_relative_model_path_gets_one_error_with_the_fix() -> None:
    found = _problems(model={"path": "./models/qwen", "type": "qwen2.5-0.5B"})
    assert len(found) == 1 and "e.g. /models/qwen" in found[0], found
    found = _problems(model={"path": "~/qwen", "type": "qwen2.5-0.5B"})
    assert len(found) == 1 and "nothing expands '~'" in found[0], found
