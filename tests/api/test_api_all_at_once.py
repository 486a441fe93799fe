"""Issue 14: every problem in one run. When fields do not parse, every rule whose inputs did
still runs (agentrl.api.partial), and a rule that reads a broken field is skipped, so its
words never rest on a value the user did not write."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.api import partial
from agentrl.api.models import RLExperiment
from agentrl.api.validation import parse_experiment
from conftest import minimal_body

# Type errors in fields no cross-field rule reads.
UNRELATED = [
    ("gateway", {"logLevel": 5}),
    ("data", {"train": "/data/train.jsonl", "shuffle": "yes"}),
    ("agent", {"http": {"url": "http://agent.rl.svc:8080"}, "modelId": 7}),
    ("tracking", {"wandb": {"project": 3, "apiKeySecret": {"name": "w", "key": "k"}}}),
    ("runtime", {"imagePullPolicy": "Sometimes"}),
]


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "nodes": draw(st.integers(1, 4)),
        "gpusPerNode": draw(st.sampled_from([1, 2, 4, 8])),
        "colocate": draw(st.booleans()),
        "rolloutGpusPerEngine": draw(st.sampled_from([1, 2, 3])),
        "parallelism": {"tensor": draw(st.sampled_from([1, 2, 3, 4]))},
    }
    if draw(st.booleans()):
        resources["rolloutGpus"] = draw(st.integers(1, 40))
    grpo: dict[str, Any] = {"numRollouts": 1, "samplesPerPrompt": draw(st.integers(1, 8))}
    if draw(st.booleans()):
        grpo["globalBatchSize"] = draw(st.sampled_from([7, 16, 64, 100]))
    return minimal_body(resources=resources, grpo=grpo)


@settings(max_examples=150, deadline=None)
@given(layouts(), st.sampled_from(UNRELATED))
def test_a_type_error_hides_no_cross_field_problem(
    body: dict[str, Any], broken: tuple[str, dict[str, Any]]
) -> None:
    _, clean = parse_experiment(body)
    dirty = copy.deepcopy(body)
    dirty["spec"][broken[0]] = broken[1]
    exp, problems = parse_experiment(dirty)
    assert exp is None
    found = {(p.path, p.message) for p in problems}
    assert {(p.path, p.message) for p in clean} <= found  # nothing hidden
    assert len(found - {(p.path, p.message) for p in clean}) == 1  # only the type error


def test_a_rule_that_reads_a_broken_field_is_skipped() -> None:
    body = minimal_body(
        resources={"nodes": "two", "parallelism": {"tensor": 3}},  # layout reads nodes
        grpo={"numRollouts": 1, "samplesPerPrompt": 1, "globalBatchSize": 32},
    )
    _, problems = parse_experiment(body)
    assert {p.path for p in problems} == {
        "spec.resources.nodes",  # the type error
        "spec.grpo.samplesPerPrompt",  # GRPO with one sample: reads no broken field
        "spec.resources.parallelism.tensor",  # 3 does not divide the model's 14 heads: neither
    }


def test_broken_required_fields_and_list_items() -> None:
    body = minimal_body(
        grpo={"numRollouts": "ten", "globalBatchSize": 100},
        data={"train": "/t.jsonl", "eval": [{"name": "a", "path": "/a.jsonl"}, "junk",
                                             {"name": "a", "path": "/b.jsonl"}]},
    )  # fmt: skip
    _, problems = parse_experiment(body)
    assert {p.path for p in problems} >= {
        "spec.grpo.numRollouts",
        "spec.grpo.globalBatchSize",  # 100 does not divide 32 x 8
        "spec.data.eval[1]",
    }


def test_the_marker_refuses_every_use() -> None:
    marker = partial.Unparsed("spec.x")
    uses = [
        lambda: bool(marker), lambda: marker == 1, lambda: marker < 1, lambda: marker + 1,
        lambda: 1 * marker, lambda: hash(marker), lambda: f"{marker}", lambda: str(marker),
        lambda: list(marker), lambda: len(marker), lambda: 1 in marker, lambda: marker.name,
        lambda: int(marker), lambda: [0][marker],
    ]  # fmt: skip
    for use in uses:
        with pytest.raises(partial.UnparsedField):
            use()


def test_partial_experiment_keeps_parsed_values_and_defaults() -> None:
    body = minimal_body(resources={"nodes": "x", "cpu": 4})
    exp = partial.build(RLExperiment, body)
    assert exp.spec.resources.cpu == "4"  # parsed (numbers are quantities)
    assert exp.spec.resources.gpus_per_node == 8  # default
    assert isinstance(exp.spec.resources.nodes, partial.Unparsed)

    def whole(subject: Any) -> Iterator[tuple[str, str, str, str]]:
        partial.require_parsed(subject)  # reads every field at once
        yield ("spec", "read", "", "error")

    assert partial.run_rules([whole], exp, partial=True) == []
    complete = parse_experiment(minimal_body())[0]
    assert partial.run_rules([whole], complete, partial=False) == [("spec", "read", "", "error")]
