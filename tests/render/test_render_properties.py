"""Property: every spec validation accepts renders, and renders to what KubeRay accepts.

Validation is the promise that nothing fails later; slime's flag builder raises on GPU
layouts it cannot express, and KubeRay refuses objects its schema or controller rejects. If
validation lets a spec through that either of them refuses, this test finds it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, render_all
from agentrl.slimecmd import preview
from conftest import TEST_IMAGE, minimal_body
from kube_checks import kuberay_controller_errors, rayjob_schema_errors

POW2 = st.sampled_from([1, 2, 4, 8])
BUNDLE = {"agentrl/__init__.py": ""}


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly plausible layouts (so most are accepted), with the odd wrong one mixed in."""
    nodes, per_node = draw(st.integers(1, 6)), draw(POW2)
    colocate = draw(st.booleans())
    resources: dict[str, Any] = {
        "nodes": nodes,
        "gpusPerNode": per_node,
        "parallelism": {"tensor": draw(st.sampled_from([1, 2, 2, 4])),
                        "pipeline": draw(st.sampled_from([1, 1, 2])),
                        "context": draw(st.sampled_from([1, 1, 1, 2])),
                        "expert": draw(st.sampled_from([1, 1, 1, 2]))},
        "rolloutGpusPerEngine": draw(st.sampled_from([1, 2, 2, 4])),
        "colocate": colocate,
    }  # fmt: skip
    if not colocate:
        whole = draw(st.integers(1, max(1, nodes - 1))) * per_node
        resources["rolloutGpus"] = draw(st.sampled_from([whole, whole, max(1, per_node // 2)]))
    grpo: dict[str, Any] = {
        "numRollouts": 3,
        "rolloutBatchSize": draw(st.sampled_from([4, 8, 16, 32])),
        "samplesPerPrompt": draw(st.sampled_from([2, 4, 8, 8, 1])),
    }
    if draw(st.booleans()):
        grpo["globalBatchSize"] = draw(st.sampled_from([8, 16, 32, 64, 128]))
    return minimal_body(resources=resources, grpo=grpo)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_accepted_specs_render_and_pass_kuberay(body: dict[str, Any]) -> None:
    exp, problems = parse_experiment(body)
    if exp is None:
        assert any(p.severity == "error" and p.path for p in problems)
        return
    preview(exp.spec)  # raises on a GPU layout slime cannot express
    job = render_all(exp, OperatorDefaults(image=TEST_IMAGE), BUNDLE).rayjob
    assert kuberay_controller_errors(job) == []
    assert rayjob_schema_errors(job) == []
