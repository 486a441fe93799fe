"""Golden files: the exact objects each example renders to, reviewed like code.

A change in the renderer shows up as a diff of `tests/render/golden/<example>.yaml`;
regenerate with `AGENTRL_UPDATE_GOLDEN=1 pytest tests/render/test_render_golden.py` and
review the diff (slime's command line has its own goldens in tests/slimecmd/golden/).
The bundle is a fixed two-file stand-in so edits of agentrl.bundle never churn the goldens
(the real bundle is covered by test_render_bundle.py).
"""

from __future__ import annotations

import base64
import io
import os
import zipfile
from pathlib import Path

import pytest

from agentrl.api.validation import parse_experiment
from agentrl.cli.main import dump_objects
from agentrl.render import OperatorDefaults, render_all
from conftest import example_paths, load_example

GOLDEN_DIR = Path(__file__).parent / "golden"
DEFAULTS = OperatorDefaults(
    image="registry.example/agentrl-runtime:0.0.0@sha256:" + "0" * 64,
    bundle_version="0.0.0-golden",
    ray_version="2.49.0",
)
BUNDLE = {
    "agentrl/__init__.py": '"""agentrl (golden stand-in)."""\n',
    "agentrl/bundle/launch/__main__.py": "raise SystemExit(0)\n",
}


def rendered(name: str) -> str:
    exp, problems = parse_experiment(load_example(name))
    assert exp is not None, problems
    objs = list(render_all(exp, DEFAULTS, BUNDLE))
    for obj in objs:
        # The archive's bytes depend on the zlib build, and nobody reviews base64: show its
        # members (test_render_bundle.py checks the archive itself).
        for key, b64 in (obj.get("binaryData") or {}).items():
            with zipfile.ZipFile(io.BytesIO(base64.b64decode(b64))) as zf:
                obj["binaryData"][key] = "zip: " + ", ".join(zf.namelist())
    return dump_objects(objs, "yaml")


@pytest.mark.parametrize("name", [p.stem for p in example_paths()])
def test_matches_golden(name: str) -> None:
    golden = GOLDEN_DIR / f"{name}.yaml"
    text = rendered(name)
    if os.environ.get("AGENTRL_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.exists(), f"no golden for {name}: run with AGENTRL_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"{golden} differs: review, then regenerate with AGENTRL_UPDATE_GOLDEN=1"
    )


def test_rendering_is_deterministic() -> None:
    name = example_paths()[0].stem
    assert rendered(name) == rendered(name)


def test_rendering_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pure: the CLI reads env for its defaults; the renderer itself never does."""
    name = example_paths()[0].stem
    before = rendered(name)
    for var in ("AGENTRL_IMAGE", "AGENTRL_BUNDLE_VERSION", "CUDA_HOME", "PYTHONPATH", "HOME"):
        monkeypatch.setenv(var, "/elsewhere@sha256:" + "f" * 64)
    assert rendered(name) == before
