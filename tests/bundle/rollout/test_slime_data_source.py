"""The data-source contract the rollout relies on, checked against slime's own code.

slime's `data_source.py` at both pinned commits runs here (`slime_upstream.py`); the
benchmark's `SlimeDataSource` double must hand out the same groups in the same order for
the same calls, and what `source.DataSource` does with either must work.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from agentrl.bundle.rollout.source import DataSource, SourceError

from .doubles import SlimeDataSource
from .slime_upstream import COMMITS, buffered_source, read_only_source, snapshot, write_rows

ROWS = [{"id": i} for i in range(5)]


def shape(groups: list[list[Any]]) -> list[list[tuple[Any, ...]]]:
    return [[(s.group_index, s.index, s.metadata["id"]) for s in g] for g in groups]


@pytest.mark.parametrize("commit", COMMITS)
def test_the_benchmarks_double_hands_out_what_slimes_source_does(
    tmp_path: Path, commit: str
) -> None:
    real = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", ROWS), 3)
    double = SlimeDataSource([{"prompt": f"p{i}", "metadata": r} for i, r in enumerate(ROWS)], 3)
    script: list[tuple[str, Any]] = [
        ("get", 2), ("give", [1]), ("get", 3), ("give", [0, 2]), ("get", 1), ("get", 4),
        ("give", []), ("get", 2),
    ]  # fmt: skip
    last: dict[str, list[list[Any]]] = {}
    for op, arg in script:
        for name, source in (("real", real), ("double", double)):
            if op == "get":
                last[name] = source.get_samples(arg)
            else:
                source.add_samples([last[name][i] for i in arg])
        if op == "get":
            assert shape(last["double"]) == shape(last["real"]), (op, arg)


@pytest.mark.parametrize("commit", COMMITS)
def test_a_group_of_the_wrong_size_is_refused_by_slime_and_by_the_double(
    tmp_path: Path, commit: str
) -> None:
    real = buffered_source(commit, write_rows(tmp_path / "rows.jsonl", ROWS), 2)
    (group,) = real.get_samples(1)
    with pytest.raises(AssertionError, match="n_samples_per_prompt"):
        real.add_samples([group[:1]])
    double = SlimeDataSource([{"metadata": r} for r in ROWS], 2)
    with pytest.raises(AssertionError):
        double.add_samples([double.get_samples(1)[0][:1]])


@pytest.mark.parametrize("commit", COMMITS)
def test_the_probe_tells_slimes_two_sources_apart_without_side_effects(
    tmp_path: Path, commit: str
) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", ROWS)
    buffered = buffered_source(commit, rows, 2)
    assert DataSource(buffered).returns_supported()
    assert buffered.get_buffer_length() == 0 and buffered.sample_offset == 0
    DataSource(buffered).check_returns()
    read_only = read_only_source(commit, rows, 2)
    assert not DataSource(read_only).returns_supported()
    with pytest.raises(SourceError, match=r"RolloutDataSource\.add_samples refused"):
        DataSource(read_only).check_returns()


@pytest.mark.parametrize("commit", COMMITS)
def test_groups_handed_back_come_out_first_as_the_same_objects(tmp_path: Path, commit: str) -> None:
    source = DataSource(buffered_source(commit, write_rows(tmp_path / "rows.jsonl", ROWS), 2))
    first = source.fetch(3)
    source.give_back([first[2], first[0]])
    again = source.fetch(3)
    assert [g.samples for g in again[:2]] == [first[2].samples, first[0].samples]
    assert all(a is b for a, b in zip(again[0].samples, first[2].samples, strict=True))
    assert again[0].key(1) == first[2].key(1) == (2, 5)
    assert [i.index for i in again[0].inputs] == [4, 5]  # the inputs read the same samples


@pytest.mark.parametrize("commit", COMMITS)
def test_the_calls_the_rollout_makes_exist_with_these_signatures(commit: str) -> None:
    """Read from the file itself, so a renamed method fails here and not on a GPU."""
    tree = ast.parse(snapshot(commit).read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in ("DataSource", "RolloutDataSource", "RolloutDataSourceWithBuffer"):
        methods = {
            f.name: [a.arg for a in f.args.args]
            for f in classes[name].body
            if isinstance(f, ast.FunctionDef)
        }
        assert methods["get_samples"] == ["self", "num_samples"], name
        assert methods["add_samples"] == ["self", "samples"], name


def test_groups_without_a_group_index_stay_apart_across_refills() -> None:
    """slime always numbers groups; a source that does not still gets one number per group
    for the whole step, so refilled groups never share a GRPO group with earlier ones."""
    from types import SimpleNamespace

    class Unnumbered:
        def get_samples(self, n: int) -> list[list[Any]]:
            return [[SimpleNamespace(prompt="p", metadata={})] for _ in range(n)]

    source = DataSource(Unnumbered())
    first, second = source.fetch(2), source.fetch(1)
    assert [g.inputs[0].group_index for g in first + second] == [0, 1, 2]
    assert first[0].key(0) is None  # nothing to carry over without slime's numbering
