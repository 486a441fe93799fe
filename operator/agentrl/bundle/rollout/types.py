"""slime's types at the boundary, and plain twins of them where slime is not installed.

The rollout builds everything on `SampleFields` (plain data) and converts to slime's
`Sample`, `RolloutFnTrainOutput` and `RolloutFnEvalOutput` only when handing the batch back.
slime (with torch) exists only in the GPU image; in tests and CI the plain classes below
stand in, with the same field names and the same status values, so shapes are checked
against the same attribute names slime reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(Enum):
    """Same names and values as `slime.utils.types.Sample.Status`."""

    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass
class SampleFields:
    """What the rollout fills in for one training sequence (slime reads these attributes)."""

    group_index: int | None
    index: int | None
    prompt: Any
    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float]
    reward: float
    status: Status
    rollout_id: int
    session_id: str
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    response: str = ""
    remove_sample: bool = False  # slime zeroes the loss mask of such a sample (no gradient)
    # The engine's weight version of each turn. A plain default (a class attribute), so a
    # sample pickled by an earlier agentrl in a rollout state (`resume.py`) reads as none.
    weight_versions: tuple[str, ...] = ()


@dataclass
class PlainSample:
    """`slime.utils.types.Sample` stand-in: its defaults, only the fields agentrl touches."""

    group_index: int | None = None
    index: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    rollout_id: int | None = None
    Status = Status

    def get_reward_value(self, args: Any) -> Any:
        """As slime's: the reward, or its `args.reward_key` entry (filters call this)."""
        key = getattr(args, "reward_key", None)
        return self.reward[key] if key and isinstance(self.reward, dict) else self.reward


@dataclass
class PlainTrainOutput:
    samples: list[list[Any]]
    metrics: dict[str, Any] | None = None


@dataclass
class PlainEvalOutput:
    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] | None = None


@dataclass(frozen=True)
class SlimeTypes:
    sample: Any
    train_output: Any
    eval_output: Any
    status: Any  # the Status enum samples carry
    real: bool


def slime_types(prefer_plain: bool = False) -> SlimeTypes:
    """slime's classes when importable (in the GPU image), else the plain ones."""
    if not prefer_plain:
        try:
            from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput
            from slime.utils.types import Sample
        except ImportError:
            pass
        else:
            return SlimeTypes(
                Sample, RolloutFnTrainOutput, RolloutFnEvalOutput, Sample.Status, True
            )
    return SlimeTypes(PlainSample, PlainTrainOutput, PlainEvalOutput, Status, False)


def to_sample(fields: SampleFields, types: SlimeTypes) -> Any:
    """One `SampleFields` as the boundary's Sample class."""
    sample = types.sample(
        group_index=fields.group_index,
        index=fields.index,
        prompt=fields.prompt,
        tokens=fields.tokens,
        response=fields.response,
        response_length=fields.response_length,
        label=fields.label,
        reward=fields.reward,
        loss_mask=fields.loss_mask,
        # As slime's own rollout fills it (one per generate call); slime's training reads
        # none of it at either pinned commit: it is there for its debug dumps and for users.
        weight_versions=list(fields.weight_versions),
        rollout_log_probs=fields.rollout_log_probs,
        status=types.status[fields.status.name],  # by name: Enum(value) is slow
        metadata=fields.metadata,
    )
    # `rollout_id` and `session_id` joined slime's Sample in later releases; attributes
    # work with every release, and newer slime counts each episode once by rollout_id.
    sample.rollout_id = fields.rollout_id
    sample.session_id = fields.session_id
    sample.remove_sample = fields.remove_sample
    return sample
