"""The static checks run as tests, so the one test command runs them all and its last line and
exit status are pytest's.

ruff (lint and format), mypy (strict), import-linter (the layers), hadolint (the Dockerfiles)
and actionlint (the workflows, their `run:` scripts through shellcheck): each is a dev
dependency in the venv beside this interpreter, so a missing tool is a failure, not a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# The examples too: users copy them, so they are held to the code's standard.
PYTHON_TREES = ["operator", "tests", "benchmarks", "examples"]

CHECKS = {
    "ruff check": ["ruff", "check", *PYTHON_TREES],
    "ruff format": ["ruff", "format", "--check", *PYTHON_TREES],
    "mypy": ["mypy"],
    "mypy examples": ["mypy", "--strict", "examples/agents"],
    "import-linter": ["lint-imports"],
    "hadolint": [
        "hadolint",
        *(
            str(p.relative_to(ROOT))
            for p in [ROOT / "Dockerfile", *ROOT.glob("images/*/Dockerfile")]
        ),
    ],
    "actionlint": [
        "actionlint",
        "-no-color",
        *(str(p.relative_to(ROOT)) for p in sorted(ROOT.glob(".github/workflows/*.y*ml"))),
    ],
}


@pytest.mark.parametrize("argv", CHECKS.values(), ids=CHECKS.keys())
def test_static_check(argv: list[str]) -> None:
    tool = BIN / argv[0]
    assert tool.is_file(), f"{argv[0]} is not in {BIN}: run `bash hack/setup.sh`"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # shellcheck
    done = subprocess.run(
        [str(tool), *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout}\n{done.stderr}"[-8000:]
