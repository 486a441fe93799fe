"""slime's data source as a train step sees it: prompt groups out, unused groups back.

slime hands `generate_rollout` its `DataSource` (by default `RolloutDataSourceWithBuffer`).
Two calls exist at both pinned commits (fa3c990, 624b824):
- `get_samples(n) -> list[list[Sample]]`: n groups of `n_samples_per_prompt` copies of a
  prompt, each copy with its `group_index` and `index`; groups handed back earlier come
  first (the buffer), then fresh prompts from the dataset;
- `add_samples(groups)`: hand groups back in the same shape (each group exactly
  `n_samples_per_prompt` long, or slime's assertion fails); the read-only
  `RolloutDataSource` raises `RuntimeError` instead, whatever it is given.
https://github.com/THUDM/slime/blob/fa3c990af/slime/rollout/data_source.py
https://github.com/THUDM/slime/blob/624b824a8/slime/rollout/data_source.py
A cut group goes back as the very `Sample` objects it came as: the rollout never mutates
them, so they are still pending prompts. slime does not save its buffer in checkpoints;
agentrl does, with the prompt cursor and the carried-over episodes (`resume.py`), so a job
restarted from a checkpoint skips and repeats no prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.bundle.rollout.episode import EpisodeInput
from agentrl.bundle.rollout.inputs import inputs_from_slime

log = logging.getLogger("agentrl.rollout")


@dataclass(frozen=True, eq=False)
class PromptGroup:
    """One prompt's group: slime's samples (handed back if cut) and the episode inputs."""

    samples: Sequence[Any]
    inputs: Sequence[EpisodeInput]

    def key(self, slot: int) -> tuple[int, int] | None:
        """Which prompt copy a slot is, across steps (None: the source gave no indices)."""
        sample = self.samples[slot]
        group_index, index = getattr(sample, "group_index", None), getattr(sample, "index", None)
        return None if group_index is None or index is None else (int(group_index), int(index))


class SourceError(RuntimeError):
    """slime's data source cannot do what the spec asks of it."""


class DataSource:
    """Fetches groups from slime's data source and hands unused ones back."""

    def __init__(self, data_source: Any) -> None:
        self._source = data_source
        self._returns: bool | None = None  # does add_samples work? (probed once)
        self._refusal: Exception | None = None
        self._fetched = 0  # groups taken so far: positions for sources without group_index

    def fetch(self, n: int) -> list[PromptGroup]:
        if n <= 0:
            return []
        raw = self._source.get_samples(n)
        inputs = inputs_from_slime(raw, first_group=self._fetched)
        self._fetched += len(raw)
        return [PromptGroup(list(g), i) for g, i in zip(raw, inputs, strict=True)]

    def returns_supported(self) -> bool:
        """Whether the source takes groups back. An empty hand-back is a no-op for slime's
        buffered source and still raises for its read-only one: a probe without effects."""
        if self._returns is None:
            try:
                self._source.add_samples([])
            except Exception as exc:
                self._refusal = exc
                self._returns = False
            else:
                self._returns = True
        return self._returns

    def check_returns(self) -> None:
        """Fail before any episode starts if the source cannot take groups back."""
        if not self.returns_supported():
            exc = self._refusal
            raise SourceError(
                f"spec.grpo.stragglerPolicy cuts groups and hands their prompts back to slime's "
                f"data source, but {type(self._source).__name__}.add_samples refused "
                f"({type(exc).__name__}: {str(exc)[:200]}); use slime's default "
                "--data-source-path (slime.rollout.data_source.RolloutDataSourceWithBuffer) or "
                "set stragglerPolicy: wait"
            ) from exc

    def give_back(self, groups: Sequence[PromptGroup]) -> None:
        if groups:
            self._source.add_samples([list(g.samples) for g in groups])
