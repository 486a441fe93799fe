"""What a cut group leaves behind until slime's data source hands it back.

A group cut when the batch filled goes back to slime's data source (`source.py`) as its
prompt samples. The rollout remembers two things about it, keyed by the samples'
`(group_index, index)`, which slime keeps on the objects it buffers:
- that it was cut: when it comes back it is waited for, so no group is cut twice and every
  started prompt trains within two steps (no prompt starves for being slow);
- under `carryOver`, its finished episodes: only the unfinished ones run again.
Entries the source does not hand back within `TTL_STEPS` steps (a custom data source with
its own order) are dropped: the prompt is still in the source, only finished work is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.bundle.rollout.episode import EpisodeOutcome

TTL_STEPS = 4
Key = tuple[int, int]  # (group_index, index) of one prompt copy


@dataclass
class CarryStore:
    episodes: dict[Key, tuple[int, EpisodeOutcome]] = field(default_factory=dict)
    cut_groups: dict[int, int] = field(default_factory=dict)  # group_index -> step it was cut

    def put(self, step: int, group_index: int, finished: dict[Key, EpisodeOutcome]) -> None:
        self.cut_groups[group_index] = step
        for key, outcome in finished.items():
            self.episodes[key] = (step, outcome)

    def was_cut(self, group_index: int | None) -> bool:
        return group_index is not None and self.cut_groups.pop(group_index, None) is not None

    def take(self, key: Key | None) -> EpisodeOutcome | None:
        entry = self.take_entry(key)
        return None if entry is None else entry[1]

    def take_entry(self, key: Key | None) -> tuple[int, EpisodeOutcome] | None:
        """The kept episode with the step that kept it (what `put_back` needs)."""
        return None if key is None else self.episodes.pop(key, None)

    def put_back(
        self, group_index: int, cut_step: int | None, entries: dict[Key, tuple[int, EpisodeOutcome]]
    ) -> None:
        """Undo `was_cut` and `take_entry` for a group whose step failed: the store is again
        what the rollout state saved after the previous step holds (`resume.py`)."""
        if cut_step is not None:
            self.cut_groups.setdefault(group_index, cut_step)
        self.episodes.update(entries)

    def drain(self) -> list[EpisodeOutcome]:
        """Forget every kept episode (the run trains no step after this one); returns them.
        The cut marks stay: they only make a group that comes back be waited for."""
        dropped = [o for _, o in self.episodes.values()]
        self.episodes = {}
        return dropped

    def expire(self, step: int) -> list[EpisodeOutcome]:
        """Forget entries older than TTL_STEPS; returns the finished episodes dropped."""
        dropped = [o for k, (s, o) in self.episodes.items() if step - s >= TTL_STEPS]
        self.episodes = {k: v for k, v in self.episodes.items() if step - v[0] < TTL_STEPS}
        self.cut_groups = {g: s for g, s in self.cut_groups.items() if step - s < TTL_STEPS}
        return dropped
