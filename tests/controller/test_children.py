"""Pure decisions about children, as tables: ownership, immutable fields, lifecycle patches.

The RayJobs here are rendered by `agentrl.render` (the annotations are stamped there), so
the tables exercise what the operator really compares against.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tests.conftest import minimal_body

from agentrl.api.constants import ANNOTATION_SPEC_HASH, LABEL_KUEUE_QUEUE
from agentrl.api.crd import IMMUTABLE_SPEC_FIELDS
from agentrl.api.models import RLExperimentSpec
from agentrl.api.validation import parse_experiment
from agentrl.controller import children
from agentrl.render import OperatorDefaults, render_all
from agentrl.render.provenance import ANNOTATION_LIFECYCLE, field_hashes

UID = "uid-1"
TEST_IMAGE = "runtime@sha256:" + "1" * 64  # a test value, never pulled
BUNDLE = {"agentrl/__init__.py": "x = 1\n"}


def spec_of(**overrides: Any) -> RLExperimentSpec:
    body = minimal_body(**overrides)
    body["metadata"]["uid"] = UID
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return exp.spec


def rayjob(**overrides: Any) -> dict[str, Any]:
    body = minimal_body(**overrides)
    body["metadata"]["uid"] = UID
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return render_all(exp, OperatorDefaults(image=TEST_IMAGE), BUNDLE).rayjob


def ref(uid: str, name: str = "demo", kind: str = "RLExperiment") -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [{"kind": kind, "name": name, "uid": uid}]}}


@pytest.mark.parametrize(
    ("obj", "uid", "owned", "predecessor"),
    [
        pytest.param(ref(UID), UID, True, False, id="ours"),
        pytest.param(ref("old-uid"), UID, False, True, id="deleted-predecessor"),
        pytest.param(ref("x", name="other"), UID, False, False, id="another-experiment"),
        pytest.param(ref("x", kind="Deployment"), UID, False, False, id="another-kind"),
        pytest.param({"metadata": {}}, UID, False, False, id="no-owner"),
        pytest.param(ref(UID), None, False, True, id="we-have-no-uid"),
    ],
)
def test_ownership(obj: dict[str, Any], uid: str | None, owned: bool, predecessor: bool) -> None:
    assert children.owned_by(obj, uid) is owned
    assert children.left_by_predecessor(obj, "demo", uid) is predecessor


def test_conflict_message_names_the_object_and_the_fix() -> None:
    obj = {"kind": "ConfigMap", "metadata": {"namespace": "rl", "name": "demo-config"}}
    text = children.conflict_message(obj)
    assert text.startswith("ConfigMap rl/demo-config already exists")
    assert "rename the experiment" in text


@pytest.mark.parametrize(
    ("edit", "changed"),
    [
        pytest.param({}, [], id="unchanged"),
        pytest.param(
            {"model": {"path": "Qwen/Qwen3-8B", "type": "qwen3-8B", "refLoad": "/models/q"}},
            ["model"],
            id="model",
        ),
        pytest.param({"grpo": {"numRollouts": 11}}, ["grpo"], id="grpo"),
        pytest.param({"suspend": True, "activeDeadlineSeconds": 60}, [], id="lifecycle-only"),
        pytest.param({"scheduling": {"queueName": "team"}}, [], id="scheduling"),
        # The default written out, or filled in by the API server, is no change.
        pytest.param(
            {"grpo": {"numRollouts": 10, "rolloutBatchSize": 32}}, [], id="explicit-default"
        ),
        pytest.param(
            {"grpo": {"numRollouts": 11}, "data": {"train": "/data/other.jsonl"}},
            ["data", "grpo"],
            id="two-fields",
        ),
    ],
)
def test_changed_immutable(edit: dict[str, Any], changed: list[str]) -> None:
    job = rayjob()
    assert sorted(children.changed_immutable(job, spec_of(**edit))) == changed


def test_changed_immutable_without_a_record_compares_nothing() -> None:
    job = rayjob()
    del job["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    assert children.changed_immutable(job, spec_of(grpo={"numRollouts": 99})) == []
    job["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = "not json"
    assert children.changed_immutable(job, spec_of(grpo={"numRollouts": 99})) == []


def test_every_immutable_field_is_hashed() -> None:
    assert set(field_hashes(spec_of())) == set(IMMUTABLE_SPEC_FIELDS)


def _applied(job: dict[str, Any]) -> dict[str, Any]:
    """The RayJob as stored after the operator created it (another controller may edit it)."""
    return copy.deepcopy(job)


@pytest.mark.parametrize(
    ("edit", "spec_patch", "queue"),
    [
        pytest.param({}, None, None, id="nothing-changed"),
        pytest.param({"suspend": True}, {"suspend": True}, None, id="suspend"),
        pytest.param(
            {"activeDeadlineSeconds": 7200}, {"activeDeadlineSeconds": 7200}, None, id="deadline"
        ),
        pytest.param(
            {"startupDeadlineSeconds": 900},
            {"preRunningDeadlineSeconds": 900},
            None,
            id="startup-deadline",
        ),
        pytest.param(
            {"ttlSecondsAfterFinished": 60}, {"ttlSecondsAfterFinished": 60}, None, id="ttl"
        ),
        pytest.param({"scheduling": {"queueName": "gpu"}}, None, "gpu", id="queue-label"),
    ],
)
def test_lifecycle_patch(
    edit: dict[str, Any], spec_patch: dict[str, Any] | None, queue: str | None
) -> None:
    existing = _applied(rayjob())
    patch = children.lifecycle_patch(existing, rayjob(**edit))
    if spec_patch is None and queue is None:
        assert patch is None
        return
    assert patch is not None
    assert patch.get("spec") == spec_patch
    assert (patch["metadata"].get("labels") or {}).get(LABEL_KUEUE_QUEUE) == queue
    recorded = json.loads(patch["metadata"]["annotations"][ANNOTATION_LIFECYCLE])
    assert recorded == json.loads(rayjob(**edit)["metadata"]["annotations"][ANNOTATION_LIFECYCLE])


def test_lifecycle_patch_leaves_what_others_changed() -> None:
    existing = _applied(rayjob())
    existing["spec"]["suspend"] = True  # Kueue suspended it; the experiment did not change
    assert children.lifecycle_patch(existing, rayjob()) is None
    patch = children.lifecycle_patch(existing, rayjob(activeDeadlineSeconds=60))
    assert patch is not None and patch["spec"] == {"activeDeadlineSeconds": 60}


def test_lifecycle_patch_removes_a_cleared_value() -> None:
    existing = _applied(rayjob(activeDeadlineSeconds=60))
    patch = children.lifecycle_patch(existing, rayjob())
    assert patch is not None
    assert patch["spec"]["activeDeadlineSeconds"] is None  # merge patch: remove the field


def test_lifecycle_patch_without_a_record_compares_with_the_object() -> None:
    existing = _applied(rayjob())
    del existing["metadata"]["annotations"][ANNOTATION_LIFECYCLE]
    assert children.lifecycle_patch(existing, rayjob()) is None
    patch = children.lifecycle_patch(existing, rayjob(suspend=True))
    assert patch is not None and patch["spec"] == {"suspend": True}
