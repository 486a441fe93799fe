"""The slime boundary: slime's own classes when importable, plain twins otherwise.

slime (with torch) only exists in the GPU image, so a stand-in package with slime's module
paths and the same `Sample` / output shapes is put on sys.path to check the switch.
"""

from __future__ import annotations

import copy
import pickle
import sys
from pathlib import Path

import pytest

from agentrl.bundle.rollout.types import PlainSample, SampleFields, Status, slime_types, to_sample

SLIME_TYPES = """
from dataclasses import dataclass, field
from enum import Enum

@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    prompt: object = ""
    tokens: list = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: object = None
    reward: object = None
    loss_mask: list | None = None
    weight_versions: list = field(default_factory=list)  # both pinned commits have it
    rollout_log_probs: list | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
"""
BASE_TYPES = """
from dataclasses import dataclass

@dataclass
class RolloutFnTrainOutput:
    samples: list
    metrics: dict | None = None

@dataclass
class RolloutFnEvalOutput:
    data: dict
    metrics: dict | None = None
"""

FIELDS = SampleFields(
    group_index=3, index=9, prompt="p", tokens=[1, 2, 3], response_length=1, loss_mask=[0],
    rollout_log_probs=[0.0], reward=0.0, status=Status.FAILED, rollout_id=17, session_id="s",
    metadata={"episode_error": "timeout"}, weight_versions=("3", "3"),
)  # fmt: skip


@pytest.fixture
def fake_slime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module, text in {
        "utils/types.py": SLIME_TYPES,
        "rollout/base_types.py": BASE_TYPES,
    }.items():
        path = tmp_path / "slime" / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        (path.parent / "__init__.py").touch()
    (tmp_path / "slime" / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "slime" or m.startswith("slime.")]:
        monkeypatch.delitem(sys.modules, name)


def test_plain_types_without_slime() -> None:
    types = slime_types(prefer_plain=True)
    sample = to_sample(FIELDS, types)
    assert not types.real and isinstance(sample, PlainSample)
    assert sample.status is Status.FAILED and sample.rollout_id == 17
    assert sample.weight_versions == ["3", "3"]


def test_slimes_own_classes_when_importable(fake_slime: None) -> None:
    types = slime_types()
    assert types.real
    sample = to_sample(FIELDS, types)
    assert type(sample).__module__ == "slime.utils.types"
    assert sample.status is types.sample.Status.FAILED  # slime's enum, not ours
    assert sample.rollout_id == 17 and sample.session_id == "s"
    assert sample.loss_mask == [0] and sample.metadata["episode_error"] == "timeout"
    assert sample.weight_versions == ["3", "3"]  # as slime's own rollout fills it
    out = types.train_output(samples=[[sample]], metrics={})
    assert type(out).__name__ == "RolloutFnTrainOutput"


def test_a_sample_pickled_before_weight_versions_converts() -> None:
    """A carried-over episode's samples are pickled in the rollout state (resume.py); one
    written by an agentrl without `weight_versions` unpickles without the attribute and
    must still become a slime Sample after the upgrade's restart."""
    old = copy.copy(FIELDS)
    del old.__dict__["weight_versions"]  # what unpickling an older SampleFields gives
    restored = pickle.loads(pickle.dumps(old))
    assert "weight_versions" not in restored.__dict__
    assert to_sample(restored, slime_types(prefer_plain=True)).weight_versions == []
