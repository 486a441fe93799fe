"""Shared test helpers: the example experiments and a small spec factory.

`examples/*.yaml` are the documented, user-facing experiments; tests load them from here so
every test exercises what users copy.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.shared import skip_summary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples"
# The Ray pod image tests render with: agentrl publishes none yet, so the operator's default
# is None and every render needs one. A test value, never pulled.
TEST_IMAGE = "runtime@sha256:" + "1" * 64

# Every Ray cluster the tests start authenticates with one token of this run, given to Ray
# the way KubeRay's token mode gives it to each container (RAY_AUTH_MODE, RAY_AUTH_TOKEN).
# Left alone, Ray 2.5x turns token auth on at the first local ray.init() (writing
# ~/.ray/auth_token and setting RAY_AUTH_MODE in this process), so clusters started after it
# demanded a token that drivers launched with their own HOME never had: the gang tests then
# failed or passed by test order. Drivers a test launches take these two variables along.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)

# Hypothesis, the same examples on every run: left at its defaults it draws new random
# examples each run (and replays failures from a .hypothesis/ database in the checkout), so a
# property test could fail on a commit that changed nothing, or pass here and fail in CI. The
# `agentrl` profile seeds each test from its own code (derandomize), keeps no database, and
# judges no test by the machine's speed (no deadline, no too_slow health check: a busy 2-core
# runner is slow). `--hypothesis-profile=explore` (or HYPOTHESIS_PROFILE=explore) draws fresh
# random examples, to look for new failures on purpose; `--hypothesis-seed=N` replays one.
try:
    from hypothesis import HealthCheck
    from hypothesis import settings as hypothesis_settings
except ImportError:  # not the dev extras: pytest_configure below says so
    pass
else:
    hypothesis_settings.register_profile(
        "agentrl", derandomize=True, database=None, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )  # fmt: skip
    hypothesis_settings.register_profile(
        "explore", derandomize=False, database=None, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )  # fmt: skip
    hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "agentrl"))


def example_paths() -> list[Path]:
    return sorted(EXAMPLES_DIR.glob("*.yaml"))


def example_policy() -> dict[str, Any]:
    """The operator policy the examples need (examples/platform/policy.yaml): they run as an
    IRSA ServiceAccount and one requests EFA devices, which the default policy refuses."""
    import yaml

    doc = yaml.safe_load((EXAMPLES_DIR / "platform" / "policy.yaml").read_text(encoding="utf-8"))
    policy: dict[str, Any] = doc["policy"]
    return policy


def load_example(name: str) -> dict[str, Any]:
    """An example's body by file name (with or without .yaml)."""
    import yaml

    path = EXAMPLES_DIR / (name if name.endswith(".yaml") else f"{name}.yaml")
    body: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return body


MINIMAL: dict[str, Any] = {
    "apiVersion": "agentrl.io/v1alpha1",
    "kind": "RLExperiment",
    "metadata": {"name": "demo", "namespace": "rl"},
    "spec": {
        "model": {
            "path": "Qwen/Qwen2.5-0.5B-Instruct",
            "type": "qwen2.5-0.5B",
            "refLoad": "/models/qwen2.5-0.5b-instruct",
        },
        "data": {"train": "/data/train.jsonl"},
        "agent": {"http": {"url": "http://agent.rl.svc:8080"}},
        "grpo": {"numRollouts": 10},
    },
}


def minimal_body(**spec_overrides: Any) -> dict[str, Any]:
    """The smallest valid experiment, with top-level spec keys replaced."""
    body = copy.deepcopy(MINIMAL)
    body["spec"].update(copy.deepcopy(spec_overrides))
    return body


@pytest.fixture(params=[p.name for p in example_paths()], ids=lambda n: n.removesuffix(".yaml"))
def example_body(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each example experiment in turn."""
    return load_example(request.param)


# What the suite imports from agentrl's dev extras (pyproject's `dev`), by import name: a
# Python without them is not the checkout's .venv, and each test module would stop on its own
# ModuleNotFoundError.
DEV_MODULES = (
    "agentrl", "yaml", "pytest_asyncio", "hypothesis", "aiohttp", "psutil", "tokenizers", "ray",
    "torch",
)  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once, saying how to get there, in a Python without the dev extras (a `pytest`
    from another environment); yaml is imported lazily above so this conftest loads there."""
    missing = [name for name in DEV_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise pytest.UsageError(
            f"this Python ({sys.executable}) has no {', '.join(missing)}: the tests run in the "
            "checkout's .venv with agentrl's dev extras. `bash hack/test.sh [PATH ...]` "
            "installs them and runs pytest there; after that `.venv/bin/pytest PATH ...` "
            "works too"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the upstream tier when its sources were missing (tests/support/shared.py),
    however many tests it skipped; it comes just before pytest's own summary line."""
    reasons = [
        str(report.longrepr[2])
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple)
    ]
    line = skip_summary(reasons)
    if line:
        terminalreporter.write_line(line)
