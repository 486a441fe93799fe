"""Paths in the pods (agentrl.api.paths): each lies on the mount Kubernetes would put it on."""

from __future__ import annotations

from typing import Any

import pytest
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
    ckpt = {"saveInterval": 5}
    assert _problems(runtime=runtime, checkpoint={**ckpt, "path": "/store/ckpt/run"}) == []
    assert [
        p.split(":")[0] for p in _problems(runtime=runtime, checkpoint={**ckpt, "path": "/store/x"})
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


@pytest.mark.parametrize(
    ("source", "owner"),
    [
        ({"emptyDir": {}}, "pod"),
        ({"ephemeral": {"volumeClaimTemplate": {"spec": {}}}}, "pod"),
        ({"hostPath": {"path": "/mnt/nvme/ckpt", "type": "DirectoryOrCreate"}}, "node"),
    ],
)
def test_checkpoints_on_a_volume_of_each_pod_or_node_are_lost_to_a_retry(
    source: dict[str, Any], owner: str
) -> None:
    # KubeRay runs each backoffLimit retry on a new RayCluster: the launcher of attempt 2
    # would find an empty directory and start over from the model.
    runtime = _volumes({"name": "m", "mountPath": "/models"}, {"name": "m", "mountPath": "/data"})
    runtime["volumes"].append({"name": "ckpt", **source})
    runtime["volumeMounts"].append({"name": "ckpt", "mountPath": "/ckpt"})
    found = _problems(runtime=runtime, checkpoint={"path": "/ckpt/run", "saveInterval": 5})
    assert len(found) == 1, found
    assert found[0].startswith(
        "warning: spec.checkpoint.path: /ckpt/run is on runtime.volumeMounts[2]"
    )
    assert (
        f"volume, which each {owner} has its own" in found[0]
        and "start over from the model" in found[0]
    )
    assert "PersistentVolumeClaim" in found[0]


def test_checkpoints_on_a_claim_are_kept_for_a_retry() -> None:
    runtime = _volumes(
        {"name": "m", "mountPath": "/models"},
        {"name": "m", "mountPath": "/data"},
        {"name": "ckpt", "mountPath": "/ckpt"},
    )
    assert _problems(runtime=runtime, checkpoint={"path": "/ckpt/run", "saveInterval": 5}) == []


@pytest.mark.parametrize(
    "path", ["/models/qwen2.5-0.5b-instruct", "/models//qwen2.5-0.5b-instruct/"]
)
def test_checkpoints_in_the_trainers_starting_weights_are_refused(path: str) -> None:
    """slime loads the KL reference model from --ref-load's latest save (its own
    load_other_checkpoint: tests/bundle/launch/test_slime_start.py runs it), so checkpoints
    saved there make every retry's reference the trained policy."""
    runtime = _volumes({"name": "m", "mountPath": "/models"}, {"name": "m", "mountPath": "/data"})
    checkpoint = {"path": path, "saveInterval": 5}
    problems = _problems(runtime=runtime, checkpoint=checkpoint)
    assert [p.split(":")[0] for p in problems] == ["spec.checkpoint.path"]
    assert "the trainer's starting weights (spec.model.refLoad)" in problems[0]
    assert "reference model" in problems[0]
    inside = {**checkpoint, "path": "/models/qwen2.5-0.5b-instruct/run"}
    assert _problems(runtime=runtime, checkpoint=inside) == []
