"""The RayJob's Ray-facing fields, read by Ray's and KubeRay's own parsing, and kept by every
KubeRay release agentrl supports.

- Where the driver runs: the entrypoint asks for a resource only the GPU workers advertise,
  and the job's runtime env keeps Ray from hiding their GPUs (tests/bundle/launch/
  test_driver_placement.py runs it on a two-node Ray).
- `rayStartParams.resources` in the format KubeRay itself writes: bash and Ray's `ray start`
  parser read it, and so does KubeRay's own read-back (which the old double-quoted format
  failed).
- The submitter survives a long run: its Job's backoffLimit, and no voluntary eviction of any
  pod of the gang.
- Per-release schemas: none of these fields is one a supported KubeRay's API server prunes.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from tests.support import kuberay_cli

from agentrl.api.constants import DRIVER_RAY_RESOURCE, HEAD_RAY_RESOURCE
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all
from agentrl.render.kuberay import KUBERAY_MIN_VERSION
from agentrl.render.rayjob import NO_EVICTION_ANNOTATIONS, SUBMITTER_BACKOFF_LIMIT
from conftest import TEST_IMAGE, minimal_body
from kube_checks import (
    kuberay_controller_errors,
    kuberay_releases,
    pod_templates,
    rayjob_schema_errors,
    release_key,
)

NOSET = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
# What this file adds to the RayJob; the per-release test checks each is kept.
FIELDS = (
    ("spec", "entrypointResources"),
    ("spec", "runtimeEnvYAML"),
    ("spec", "submitterConfig", "backoffLimit"),
)


def rayjob(body: dict[str, Any]) -> dict[str, Any]:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return render_all(exp, OperatorDefaults(image=TEST_IMAGE), collect_bundle_files()).rayjob


def groups(job: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cluster = job["spec"]["rayClusterSpec"]
    return cluster["headGroupSpec"], cluster["workerGroupSpecs"]


def test_the_entrypoint_asks_for_what_only_gpu_workers_have(example_body: dict[str, Any]) -> None:
    job = rayjob(example_body)
    head, workers = groups(job)
    submit = kuberay_cli.submit_options(job["spec"])
    wanted = submit["entrypoint_resources"]
    assert wanted == {DRIVER_RAY_RESOURCE: 1}
    assert (submit["entrypoint_num_cpus"], submit["entrypoint_num_gpus"]) == (None, None)
    on_head = kuberay_cli.ray_start_options(head["rayStartParams"])["resources"]
    assert on_head == {HEAD_RAY_RESOURCE: 1}  # the hub's marker, and no driver marker
    for group in workers:
        offered = kuberay_cli.ray_start_options(group["rayStartParams"])["resources"]
        assert offered[DRIVER_RAY_RESOURCE] >= wanted[DRIVER_RAY_RESOURCE]
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert any(k.endswith("gpu") and v > 0 for k, v in limits.items())
    # Ray runs it as given: the driver keeps the GPUs its pod exposes.
    assert submit["runtime_env"] == {"env_vars": {NOSET: "1"}}


def test_resources_are_in_kuberays_own_format(example_body: dict[str, Any]) -> None:
    head, workers = groups(rayjob(example_body))
    for params in [head["rayStartParams"], *(w["rayStartParams"] for w in workers)]:
        value = params["resources"]
        assert value.startswith("'") and value.endswith("'"), value  # as KubeRay writes it
        read_back = kuberay_cli.kuberay_resources_map(params)
        assert read_back == kuberay_cli.ray_start_options(params)["resources"]


def test_the_old_double_quoted_format_fails_kuberays_read_back() -> None:
    """What the head used to carry: bash and `ray start` took it, KubeRay's read-back did not."""
    old = {"resources": '"{\\"agentrl_head\\": 1}"'}
    assert kuberay_cli.ray_start_options(old)["resources"] == {HEAD_RAY_RESOURCE: 1}
    with pytest.raises(ValueError):
        kuberay_cli.kuberay_resources_map(old)


def test_the_runtime_env_yaml_is_what_kuberay_converts(example_body: dict[str, Any]) -> None:
    job = rayjob(example_body)
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"]) == {"env_vars": {NOSET: "1"}}
    assert kuberay_controller_errors(job) == []
    broken = {**job, "spec": {**job["spec"], "runtimeEnvYAML": "- not a mapping"}}
    assert kuberay_controller_errors(broken) == ["failed to unmarshal RuntimeEnvYAML"]


def test_the_submitter_and_every_pod_are_kept_through_a_long_run(
    example_body: dict[str, Any],
) -> None:
    job = rayjob(example_body)
    assert job["spec"]["submitterConfig"] == {"backoffLimit": SUBMITTER_BACKOFF_LIMIT}
    assert SUBMITTER_BACKOFF_LIMIT > 2  # KubeRay's default
    templates = pod_templates(job)
    assert len(templates) == 3  # head, GPU workers, submitter
    for template in templates:
        assert template["metadata"]["annotations"] == NO_EVICTION_ANNOTATIONS
    assert NO_EVICTION_ANNOTATIONS == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "karpenter.sh/do-not-disrupt": "true",
    }


# ---- per-release KubeRay schemas -------------------------------------------------------


def _accepts(release: str, job: dict[str, Any]) -> bool:
    return not rayjob_schema_errors(job, release)


def _without(job: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = yaml.safe_load(yaml.safe_dump(job))
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    if path[:-1] and not node:  # an emptied parent object goes too
        parent = out
        for key in path[:-2]:
            parent = parent[key]
        del parent[path[-2]]
    return dict(out)


def _oldest_accepting(job: dict[str, Any]) -> str | None:
    return next((r for r in kuberay_releases() if _accepts(r, job)), None)


def test_the_fields_raise_no_kuberay_minimum(example_body: dict[str, Any]) -> None:
    """Every release that keeps the rest of the RayJob keeps these fields too, the newest
    keeps them all, and so does the declared minimum (the schemas are one per minor line)."""
    assert len(kuberay_releases()) >= 2, kuberay_releases()
    job = rayjob(example_body)
    rest = job
    for path in FIELDS:
        rest = _without(rest, path)
    oldest = _oldest_accepting(rest)
    assert oldest is not None
    assert _oldest_accepting(job) == oldest, "a field above needs a newer KubeRay than the rest"
    assert _accepts(kuberay_releases()[-1], job)
    assert release_key(oldest)[:2] <= release_key(KUBERAY_MIN_VERSION)[:2], oldest


def test_a_release_without_submitter_config_would_prune_it() -> None:
    """The check above can fail: v1.1.1 has no submitterConfig."""
    assert "v1.1.1" in kuberay_releases(), kuberay_releases()
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x"}}
    job["spec"] = {"entrypoint": "true", "submitterConfig": {"backoffLimit": 20}}
    assert not _accepts("v1.1.1", job)
    assert _accepts(kuberay_releases()[-1], job)


def test_pods_carry_the_spec_labels_annotations_and_per_group_placement(
    example_body: dict[str, Any],
) -> None:
    """Platform settings reach every pod KubeRay makes, per group, and the RayJob still
    validates against KubeRay's CRD; agentrl's own labels stay, its annotations yield."""
    body = copy.deepcopy(example_body)
    body["spec"]["runtime"]["podLabels"] = {"example.com/cost-centre": "ml-42"}
    body["spec"]["runtime"]["podAnnotations"] = {"karpenter.sh/do-not-disrupt": "false",
                                                 "example.com/owner": "team-rl"}  # fmt: skip
    head_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node-pool", "operator": "In", "values": ["cpu-ondemand"]}]}]}}}  # fmt: skip
    res = body["spec"].setdefault("resources", {})
    res["priorityClassName"] = "gpu-training"
    res.setdefault("head", {}).update(affinity=head_affinity, priorityClassName="rl-control")
    job = rayjob(body)
    head, (workers,) = groups(job)
    submitter = job["spec"]["submitterPodTemplate"]
    for template in (head["template"], workers["template"], submitter):
        meta = template["metadata"]
        assert meta["labels"]["example.com/cost-centre"] == "ml-42"
        assert meta["labels"]["agentrl.io/experiment"] == body["metadata"]["name"]
        assert meta["annotations"]["karpenter.sh/do-not-disrupt"] == "false"  # the spec's
        assert meta["annotations"]["example.com/owner"] == "team-rl"
        safe_to_evict = "cluster-autoscaler.kubernetes.io/safe-to-evict"
        assert meta["annotations"][safe_to_evict] == NO_EVICTION_ANNOTATIONS[safe_to_evict]
    for template in (head["template"], submitter):
        assert template["spec"]["affinity"] == head_affinity
        assert template["spec"]["priorityClassName"] == "rl-control"
    assert workers["template"]["spec"]["priorityClassName"] == "gpu-training"
    assert "affinity" not in workers["template"]["spec"]
    assert rayjob_schema_errors(job) == []


def test_the_head_takes_the_workers_priority_class_unless_it_has_its_own(
    example_body: dict[str, Any],
) -> None:
    body = copy.deepcopy(example_body)
    body["spec"].setdefault("resources", {})["priorityClassName"] = "gpu-training"
    body["spec"]["resources"].get("head", {}).pop("priorityClassName", None)
    head, (workers,) = groups(rayjob(body))
    assert head["template"]["spec"]["priorityClassName"] == "gpu-training"
    assert workers["template"]["spec"]["priorityClassName"] == "gpu-training"


# Env a user might set, and whether KubeRay's ValidateRayClusterSpec refuses it in the head pod
# (RAY_REDIS_ADDRESS without gcsFaultToleranceOptions, any REDIS_USERNAME, autoscaler v2 on
# a cluster without enableInTreeAutoscaling).
USER_ENV = (
    ("RAY_REDIS_ADDRESS", "redis:6379", True),
    ("REDIS_USERNAME", "ray", True),
    ("RAY_enable_autoscaler_v2", "1", True),
    ("RAY_enable_autoscaler_v2", "true", True),
    ("RAY_enable_autoscaler_v2", "0", False),
    ("RAY_DEDUP_LOGS", "0", False),
)


@pytest.mark.parametrize(("name", "value", "kuberay_refuses"), USER_ENV)
def test_env_kuberay_refuses_is_refused_before_the_rayjob(
    name: str, value: str, kuberay_refuses: bool
) -> None:
    body = minimal_body(runtime={"env": [{"name": name, "value": value}]})
    exp, problems = parse_experiment(body)
    refused = [p for p in problems if p.severity == "error"]
    if not kuberay_refuses:
        assert exp is not None and not refused, problems
        job = render_all(exp, OperatorDefaults(image=TEST_IMAGE), collect_bundle_files()).rayjob
        assert kuberay_controller_errors(job) == []
        return
    assert [p.path for p in refused] == ["spec.runtime.env[0].name"], problems
    assert "KubeRay refuses" in refused[0].message and refused[0].hint.startswith("remove it")
    # What KubeRay would have done with it: the same spec, rendered without the check.
    job = rayjob(minimal_body())
    head, _ = groups(job)
    head["template"]["spec"]["containers"][0]["env"].append({"name": name, "value": value})
    assert kuberay_controller_errors(job) != []


def test_the_submitter_command_keeps_kuberays_submit_once_guard() -> None:
    """KubeRay v1.6.2 fills in its own submitter command only when the container has none
    (rayjob_controller.go, configureSubmitterContainer); agentrl's replaces it (so that a log
    stream ending early does not end the run: tests/render/test_render_submitter.py) and
    keeps its guard: `ray job submit --submission-id` runs only when `ray job status` does
    not know the job, so none of the submitter Job's retries starts a second driver."""
    job = rayjob(minimal_body())
    (container,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    (script,) = container["args"]
    lines = [line.strip() for line in script.splitlines()]
    guard = lines.index('if ! ray job status --address "$addr" "$id" >/dev/null 2>&1; then')
    assert lines[guard + 1].startswith("ray job submit ") and lines[guard + 2] == "fi"
    assert sum("ray job submit" in line for line in lines) == 1
    assert '--submission-id "$id"' in lines[guard + 1]
    assert job["spec"]["submitterConfig"]["backoffLimit"] > 1  # retries happen: the reason
