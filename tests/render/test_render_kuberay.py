"""KubeRay releases: what each release's rayjobs.ray.io would drop from a rendered RayJob.

The per-release CRDs are KubeRay's own (`../shared/schemas/kuberay/v1.1.1` ... `v1.7.0`, as
each release tag ships them); the newest is vendored in tests/data/kuberay. Every example and
every optional lifecycle field is rendered and walked against the minimum release agentrl
states and against the newest: nothing may be pruned. The walk itself is checked against the
pruning rules on small schemas here, and against a real kube-apiserver in
tests/e2e/test_kuberay_pruning_e2e.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.api.models import RLExperiment
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all
from agentrl.render.kuberay import (
    FEATURES,
    KUBERAY_MIN_VERSION,
    explain_pruned,
    features_used,
    missing_features,
    pruned_fields,
)
from conftest import ROOT, example_paths, load_example, minimal_body
from kube_checks import (
    KUBERAY_SCHEMAS,
    kuberay_releases,
    rayjob_crd,
    rayjob_schema_errors,
    release_key,
)

DEFAULTS = OperatorDefaults(image="runtime@sha256:" + "1" * 64)
BUNDLE = collect_bundle_files()
RELEASES = kuberay_releases()
# Every optional lifecycle field, each set to a value that is rendered.
LIFECYCLE = {
    "suspend": {"suspend": True},
    "activeDeadlineSeconds": {"activeDeadlineSeconds": 86400},
    "startupDeadlineSeconds": {"startupDeadlineSeconds": 1800},
    "backoffLimit": {"backoffLimit": 2},
    "ttlSecondsAfterFinished": {"ttlSecondsAfterFinished": 3600},
    "scheduling.queueName": {"scheduling": {"queueName": "gpu-queue"}},
}
EVERYTHING = {k: v for spec in LIFECYCLE.values() for k, v in spec.items()}


def experiment(body: dict[str, Any]) -> RLExperiment:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return exp


def rayjob(body: dict[str, Any]) -> dict[str, Any]:
    return render_all(experiment(body), DEFAULTS, BUNDLE).rayjob


def with_spec(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["spec"].update(copy.deepcopy(extra))
    return out


def min_release() -> str:
    """The shared release directory of the stated minimum's minor line (1.6.0 -> v1.6.2:
    v1.6.0, v1.6.1 and v1.6.2 ship a byte-identical rayjobs.ray.io)."""
    major_minor = release_key(KUBERAY_MIN_VERSION)[:2]
    (found,) = [r for r in RELEASES if release_key(r)[:2] == major_minor]
    return found


# ---- the stated minimum ---------------------------------------------------------------


def test_chart_states_the_minimum_in_its_annotation() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "agentrl" / "Chart.yaml").read_text())
    assert chart["annotations"]["agentrl.io/kuberay-min-version"] == KUBERAY_MIN_VERSION
    assert "agentrl.io/requires" not in chart["annotations"]


def test_docs_state_the_minimum() -> None:
    for doc in ("README.md", "docs/releases.md", "charts/agentrl/README.md"):
        assert f"KubeRay >= {KUBERAY_MIN_VERSION}" in (ROOT / doc).read_text(), doc


def test_minimum_is_the_oldest_release_that_keeps_every_rendered_field() -> None:
    """Everything agentrl can render (every example with every lifecycle field) survives on
    the minimum and every later release, and something is lost on every older one."""
    jobs = [rayjob(with_spec(load_example(p.name), EVERYTHING)) for p in example_paths()]
    keeps = {r: all(not pruned_fields(j, rayjob_crd(r)) for j in jobs) for r in RELEASES}
    oldest = min((r for r, ok in keeps.items() if ok), key=release_key)
    assert oldest == min_release()
    assert all(ok == (release_key(r) >= release_key(oldest)) for r, ok in keeps.items()), keeps


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_each_example_keeps_every_field_on_the_minimum(path: Path) -> None:
    job = rayjob(load_example(path.name))
    assert pruned_fields(job, rayjob_crd(min_release())) == []
    assert rayjob_schema_errors(job, min_release()) == []


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_each_example_keeps_every_field_on_the_newest(path: Path) -> None:
    job = rayjob(load_example(path.name))
    assert pruned_fields(job, rayjob_crd()) == []


@pytest.mark.parametrize("release", [None, "min"], ids=["newest", "minimum"])
@pytest.mark.parametrize("field", sorted(LIFECYCLE))
def test_each_lifecycle_field_is_kept(field: str, release: str | None) -> None:
    if release == "min":
        release = min_release()
    job = rayjob(minimal_body(**LIFECYCLE[field]))
    assert pruned_fields(job, rayjob_crd(release)) == []


def test_vendored_crd_is_the_newest_releases() -> None:
    vendored = ROOT / "tests" / "data" / "kuberay" / "ray.io_rayjobs.yaml"
    newest = KUBERAY_SCHEMAS / RELEASES[-1] / "ray.io_rayjobs.yaml"
    assert vendored.read_bytes() == newest.read_bytes(), f"refresh {vendored} from {newest}"


# ---- features: which field needs which release -----------------------------------------


def test_each_feature_arrives_in_the_release_it_names() -> None:
    for feature in FEATURES:
        lacking = [r for r in RELEASES if feature in missing_features(rayjob_crd(r))]
        having = [r for r in RELEASES if r not in lacking]
        assert release_key(having[0])[:2] == release_key(feature.since)[:2], feature
        assert all(release_key(r) < release_key(having[0]) for r in lacking), feature


def test_every_field_an_old_release_drops_is_a_known_feature() -> None:
    """On every release before the minimum, each dropped field is explained by the spec
    field behind it, never by a bare RayJob path."""
    job = rayjob(with_spec(load_example(example_paths()[0].name), EVERYTHING))
    fields = {f.rayjob_field for f in FEATURES}
    for release in RELEASES:
        pruned = pruned_fields(job, rayjob_crd(release))
        assert set(pruned) <= fields, (release, pruned)
        assert set(pruned) == {f.rayjob_field for f in missing_features(rayjob_crd(release))}


def test_oldest_release_drops_both_lifecycle_fields_with_a_message_naming_the_spec() -> None:
    job = rayjob(minimal_body(startupDeadlineSeconds=600, backoffLimit=3))
    oldest = rayjob_crd(RELEASES[0])
    pruned = pruned_fields(job, oldest)
    assert pruned == [
        "spec.backoffLimit",
        "spec.submitterConfig",
        "spec.preRunningDeadlineSeconds",
    ]
    backoff, submitter, startup = explain_pruned(pruned)
    assert submitter.startswith("agentrl renders submitterConfig on every RayJob")
    assert startup.startswith(
        "spec.startupDeadlineSeconds needs KubeRay >= 1.6 (preRunningDeadlineSeconds); "
        "the installed rayjobs.ray.io CRD lacks it"
    )
    assert backoff.startswith("spec.backoffLimit needs KubeRay >= 1.2 (backoffLimit)")
    assert KUBERAY_MIN_VERSION in startup and KUBERAY_MIN_VERSION in backoff


def test_features_used_names_only_what_the_spec_relies_on() -> None:
    # backoffLimit 0 is KubeRay's own default; the submitter's retry budget is always ours.
    minimal = features_used(experiment(minimal_body()).spec)
    assert [f.rayjob_field for f in minimal] == ["spec.submitterConfig"]
    spec = experiment(minimal_body(startupDeadlineSeconds=60, backoffLimit=1)).spec
    assert [f.spec_field for f in features_used(spec)] == [
        "spec.backoffLimit",
        None,
        "spec.startupDeadlineSeconds",
    ]


def test_unknown_paths_are_explained_with_the_minimum() -> None:
    path = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.hostUsers"
    (message,) = explain_pruned([path])
    assert path in message and f"KubeRay >= {KUBERAY_MIN_VERSION}" in message
    # Indices do not hide a known feature.
    (known,) = explain_pruned(["spec.preRunningDeadlineSeconds"])
    assert known.startswith("spec.startupDeadlineSeconds")


# ---- the walk, rule by rule (k8s.io/apiextensions-apiserver pruning) --------------------


def crd_of(schema: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    return {
        "metadata": {"name": "things.example.io"},
        "spec": {
            "group": "example.io",
            "versions": [{"name": version, "served": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def obj(spec: Any, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "Thing", "metadata": {"name": "a"},
            "spec": spec, **extra}  # fmt: skip


def root(spec_schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": spec_schema}}


def test_unknown_keys_are_pruned_at_every_depth_outermost_only() -> None:
    schema = root({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "integer"}}}}})  # fmt: skip
    thing = obj({"a": {"b": 1, "c": {"deep": 1}}, "z": 2}, status={"x": 1})
    assert pruned_fields(thing, crd_of(schema)) == ["spec.a.c", "spec.z", "status"]


def test_an_object_without_properties_keeps_nothing() -> None:
    assert pruned_fields(obj({"a": 1}), crd_of(root({"type": "object"}))) == ["spec.a"]


def test_preserve_unknown_fields_keeps_unknown_keys_but_prunes_inside_known_ones() -> None:
    known = {"type": "object", "properties": {"k": {}}}
    schema = root({"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                   "properties": {"known": known}})  # fmt: skip
    thing = obj({"free": {"anything": [1, {"x": 2}]}, "known": {"k": 1, "bad": 2}})
    assert pruned_fields(thing, crd_of(schema)) == ["spec.known.bad"]


def test_additional_properties_declare_every_key_and_their_values_are_walked() -> None:
    schema = root({"type": "object", "additionalProperties": {
        "type": "object", "properties": {"cpu": {"type": "string"}}}})  # fmt: skip
    thing = obj({"gpu-pool": {"cpu": "1", "gpu": 8}, "cpu-pool": {"cpu": "2"}})
    assert pruned_fields(thing, crd_of(schema)) == ["spec.gpu-pool.gpu"]
    strings = root({"type": "object", "additionalProperties": {"type": "string"}})
    assert pruned_fields(obj({"any": "thing"}), crd_of(strings)) == []


def test_array_items_are_walked_with_their_index() -> None:
    schema = root({"type": "object", "properties": {"list": {"type": "array", "items": {
        "type": "object", "properties": {"name": {"type": "string"}}}}}})  # fmt: skip
    thing = obj({"list": [{"name": "a"}, {"name": "b", "extra": 1}]})
    assert pruned_fields(thing, crd_of(schema)) == ["spec.list[1].extra"]
    untyped = root({"type": "object", "properties": {"list": {"type": "array"}}})
    assert pruned_fields(obj({"list": [1, {"x": 1}]}), crd_of(untyped)) == ["spec.list[1].x"]
    preserved = root({"type": "object", "properties": {"list": {
        "type": "array", "x-kubernetes-preserve-unknown-fields": True}}})  # fmt: skip
    assert pruned_fields(obj({"list": [{"x": 1}]}), crd_of(preserved)) == []


def test_root_and_embedded_resources_keep_type_meta_and_decode_object_meta() -> None:
    embedded = {"type": "object", "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {"n": {}}}}}  # fmt: skip
    schema = root({"type": "object", "properties": {"template": embedded}})
    thing = obj(
        {"template": {"apiVersion": "v1", "kind": "Pod", "spec": {"n": 1, "m": 2},
                      "metadata": {"name": "x", "labels": {"a": "b"}, "colour": "red"}}},
    )  # fmt: skip
    thing["metadata"]["bogus"] = 1
    assert pruned_fields(thing, crd_of(schema)) == [  # in document order
        "metadata.bogus",
        "spec.template.spec.m",
        "spec.template.metadata.colour",
    ]


def test_pod_template_metadata_follows_kuberays_declared_fields() -> None:
    """KubeRay declares five fields in a pod template's metadata (it is not an embedded
    resource), so anything else there is dropped: the walk uses the schema, not ObjectMeta."""
    job = rayjob(minimal_body())
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    head["metadata"]["generateName"] = "x-"
    assert pruned_fields(job, rayjob_crd()) == [
        "spec.rayClusterSpec.headGroupSpec.template.metadata.generateName"
    ]


def test_a_version_the_crd_does_not_serve_is_refused() -> None:
    crd = crd_of(root({"type": "object"}), version="v1alpha1")
    with pytest.raises(ValueError, match=r"does not serve example.io/v1 \(served: v1alpha1\)"):
        pruned_fields(obj({}), crd)
    with pytest.raises(ValueError, match=r"is for group example\.io"):
        pruned_fields({**obj({}), "apiVersion": "ray.io/v1"}, crd_of(root({"type": "object"})))
