"""The pods' image, judged with the caller's default (api.images through parse_experiment)."""

from __future__ import annotations

from agentrl.api.images import DefaultImage, is_digest_pinned
from agentrl.api.validation import Problem, errors, parse_experiment
from agentrl.render.defaults import DEFAULT_IMAGE, OperatorDefaults
from conftest import minimal_body

PINNED = "runtime:1@sha256:" + "3" * 64  # a test value


def image_problems(body: dict[str, object], default: DefaultImage | None) -> list[Problem]:
    _, problems = parse_experiment(body, default_image=default)
    return [p for p in problems if p.path == "spec.runtime.image"]


def test_the_built_in_image_is_none_or_what_a_release_pinned() -> None:
    """None until the release workflow writes a pushed image's digest (hack/pin-images.py),
    never a placeholder shaped like one."""
    assert DEFAULT_IMAGE is None or is_digest_pinned(DEFAULT_IMAGE)
    assert OperatorDefaults().image == DEFAULT_IMAGE


def test_no_image_anywhere_is_an_error_for_the_operator_with_the_fix() -> None:
    exp, problems = parse_experiment(minimal_body(), default_image=DefaultImage(None))
    assert exp is None
    (problem,) = errors(problems)
    assert problem.path == "spec.runtime.image"
    assert "no default Ray pod image" in problem.message
    assert "images/slime/Dockerfile" in problem.hint and "@sha256:<digest>" in problem.hint


def test_no_image_anywhere_is_a_warning_where_the_operator_is_not_known() -> None:
    exp, problems = parse_experiment(
        minimal_body(), default_image=DefaultImage(None, missing="warning")
    )
    assert exp is not None
    (problem,) = problems
    assert problem.severity == "warning" and problem.path == "spec.runtime.image"


def test_a_pinned_default_or_a_spec_image_says_nothing() -> None:
    assert image_problems(minimal_body(), DefaultImage(PINNED)) == []
    spec_image = minimal_body(runtime={"image": PINNED})
    assert image_problems(spec_image, DefaultImage(None)) == []


def test_an_unpinned_default_is_a_warning() -> None:
    (problem,) = image_problems(minimal_body(), DefaultImage("runtime:latest"))
    assert problem.severity == "warning"
    assert "runtime:latest is not pinned by digest" in problem.message


def test_without_a_default_images_are_not_judged() -> None:
    assert image_problems(minimal_body(), None) == []
