"""`model.rendererFamily` is checked against the families of the pinned `renderers`: the
generated list equals the installed package's, the pin in pyproject.toml is that version,
the hint names the nearest family, and docs/api.md lists them all."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import renderers
from renderers.configs import _CONFIG_BY_NAME, config_from_name

from agentrl.api.renderer_families import AUTO, FAMILIES, RENDERERS_VERSION
from agentrl.api.validation import parse_experiment
from conftest import ROOT, example_paths, load_example, minimal_body


def test_generated_list_matches_the_installed_package() -> None:
    assert renderers.__version__ == RENDERERS_VERSION
    assert set(FAMILIES) | {AUTO} == set(_CONFIG_BY_NAME)
    assert list(FAMILIES) == sorted(FAMILIES)
    gen = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen-renderer-families.py"), "--check"], check=False
    )
    assert gen.returncode == 0, "run hack/gen-renderer-families.py"


def test_the_bundle_extra_pins_that_version() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.findall(r'"renderers==([^"]+)"', pyproject) == [RENDERERS_VERSION]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_listed_family_is_one_the_gateway_can_build(family: str) -> None:
    assert config_from_name(family) is not None  # what the gateway calls on the head pod


def test_examples_use_valid_families() -> None:
    for path in example_paths():
        family = load_example(path.name)["spec"]["model"].get("rendererFamily")
        assert family is None or family in FAMILIES, (path.name, family)


@pytest.mark.parametrize(
    ("given", "nearest"),
    [("qwen2.5", "qwen3.5"), ("llama3", "llama-3"), ("glm4.5", "glm-4.5"), ("Qwen3", "qwen3")],
)
def test_unknown_family_names_the_nearest_and_default(given: str, nearest: str) -> None:
    body = minimal_body(
        model={"path": "/models/q", "type": "qwen2.5-0.5B", "rendererFamily": given}
    )
    exp, problems = parse_experiment(body)
    assert exp is None
    (problem,) = problems
    assert problem.path == "spec.model.rendererFamily"
    assert f"did you mean {nearest!r}?" in problem.message and "`default`" in problem.message


def test_hint_for_a_missing_family_names_real_families() -> None:
    _, problems = parse_experiment(
        minimal_body(model={"path": "/models/q", "type": "qwen2.5-0.5B"})
    )
    (problem,) = problems
    assert "qwen2.5" not in problem.hint.replace("(Qwen2.5)", "") and "llama3" not in problem.hint
    for named in re.findall(r"e\.g\. (\S+) or (\S+),", problem.hint)[0]:
        assert named in FAMILIES


def test_auto_needs_a_hub_id() -> None:
    local = minimal_body(
        model={"path": "/models/q", "type": "qwen2.5-0.5B", "rendererFamily": AUTO}
    )
    assert [p.path for p in parse_experiment(local)[1]] == ["spec.model.rendererFamily"]
    hub = minimal_body()
    hub["spec"]["model"]["rendererFamily"] = AUTO
    assert parse_experiment(hub)[1] == []


def test_docs_list_every_family() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("## Renderer families", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{family}`" in section for family in (*FAMILIES, AUTO))
    assert RENDERERS_VERSION in section
