"""The property tests draw the same examples on every run, on any machine.

Left at Hypothesis' defaults each run draws new random examples, so the suite's outcome could
change without a commit; tests/conftest.py loads a derandomized profile without a database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT

# `--hypothesis-profile=explore` draws fresh examples on purpose: nothing to check then.
pytestmark = pytest.mark.skipif(
    settings.get_current_profile_name() not in ("agentrl", "default"),
    reason="another Hypothesis profile was chosen on purpose",
)


def _drawn() -> list[object]:
    seen: list[object] = []

    @settings(max_examples=30)
    @given(st.lists(st.text(), min_size=1), st.integers())
    def prop(xs: list[str], n: int) -> None:
        seen.append((xs, n))

    prop()
    return seen


def test_the_profile_is_derandomized_without_a_database_or_a_clock() -> None:
    current = settings.default
    assert current.derandomize is True
    assert current.database is None
    assert current.deadline is None


def test_two_runs_draw_the_same_examples() -> None:
    assert _drawn() == _drawn()


def test_two_processes_draw_the_same_examples(tmp_path: Path) -> None:
    """Two pytest processes (two CI runs; PYTHONHASHSEED differs) see the same examples."""
    test = tmp_path / "test_prop.py"
    test.write_text(
        textwrap.dedent(
            """
            from hypothesis import given, settings, strategies as st

            @settings(max_examples=25)
            @given(st.dictionaries(st.text(), st.integers()))
            def test_prop(d):
                print("EX", sorted(d.items()))
            """
        ),
        encoding="utf-8",
    )
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        env.pop("HYPOTHESIS_PROFILE", None)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
             "-p", "tests.conftest", str(test)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outs.append([line for line in done.stdout.splitlines() if line.startswith("EX")])
    assert outs[0] and outs[0] == outs[1]
