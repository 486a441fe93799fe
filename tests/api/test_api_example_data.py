"""The JSONL samples under examples/data/ follow the documented row format:
`{"prompt": ..., "metadata": {...agent payload...}}`, one JSON object per line."""

from __future__ import annotations

import json

import pytest

from conftest import EXAMPLES_DIR

DATA = sorted((EXAMPLES_DIR / "data").glob("*.jsonl"))


def test_there_are_samples() -> None:
    assert len(DATA) >= 4


@pytest.mark.parametrize("path", DATA, ids=[p.name for p in DATA])
def test_rows_have_prompt_and_metadata(path: object) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()  # type: ignore[attr-defined]
    assert lines
    for n, line in enumerate(lines, 1):
        row = json.loads(line)
        assert set(row) == {"prompt", "metadata"}, f"line {n}"
        assert isinstance(row["prompt"], str | list) and row["prompt"], f"line {n}"
        assert isinstance(row["metadata"], dict) and row["metadata"], f"line {n}"
