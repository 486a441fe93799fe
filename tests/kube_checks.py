"""Offline stand-ins for what a cluster would check: CRD schemas and KubeRay's controller.

- `to_jsonschema`: a Kubernetes structural schema -> JSON Schema that rejects unknown fields
  the way the apiserver prunes them (k8s-test-harness Q5 transform).
- `rayjob_schema_errors`: a rendered RayJob against KubeRay's own v1 CRD schema.
- `kuberay_releases` / `rayjob_crd`: the RayJob CRD of each KubeRay release (the shared
  per-release copies; the newest is also vendored under `tests/data/kuberay`).
- `kuberay_controller_errors`: the rules KubeRay checks only in its controller
  (`ray-operator/controllers/ray/utils/validation.go`), which would otherwise surface as
  `jobDeploymentStatus: ValidationFailed` after the objects were created.
- `core_errors`: core objects against Kubernetes 1.30's schemas (kubernetes-validate, strict).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from tests.support import upstream
from tests.support.shared import KUBERAY_SCHEMAS, require

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
RAYJOB_NAME_MAX = 47
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def kuberay_schemas_dir() -> Path:
    """The newest KubeRay CRDs: the snapshot folder's copy, or the one vendored next to these
    tests (a fetched snapshot root holds only the per-release copies)."""
    vendored = Path(__file__).parent / "data" / "kuberay"
    return KUBERAY_SCHEMAS if (KUBERAY_SCHEMAS / "ray.io_rayjobs.yaml").is_file() else vendored


def kuberay_releases() -> list[str]:
    """The KubeRay releases whose RayJob CRD is at hand ("v1.1.1", ...), oldest first."""
    releases = upstream.kuberay_releases()
    for release in releases:
        require(
            KUBERAY_SCHEMAS / release / "ray.io_rayjobs.yaml", "KubeRay's RayJob CRD per release"
        )
    return sorted(releases, key=release_key)


def release_key(release: str) -> tuple[int, ...]:
    """ "v1.6.2" or "1.6.2" -> (1, 6, 2), for ordering and comparing releases."""
    return tuple(int(part) for part in release.removeprefix("v").split("."))


@functools.cache
def _rayjob_crd(release: str | None) -> dict[str, Any]:
    directory = kuberay_schemas_dir() if release is None else KUBERAY_SCHEMAS / release
    text = (directory / "ray.io_rayjobs.yaml").read_text(encoding="utf-8")
    crd: dict[str, Any] = yaml.load(text, Loader=_YAML_LOADER)  # a 1.3 MB file; libyaml: 6x
    return crd


def rayjob_crd(release: str | None = None) -> dict[str, Any]:
    """The rayjobs.ray.io CRD of `release` ("v1.6.2"; the shared per-release copies), or the
    newest one (shared, else vendored) when None. A fresh copy, safe to mutate."""
    return copy.deepcopy(_rayjob_crd(release))


def to_jsonschema(schema: dict[str, Any]) -> dict[str, Any]:
    """Structural schema -> JSON Schema (draft 7) with pruning made strict."""
    node = copy.deepcopy(schema)
    _transform(node)
    return node


def _transform(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _transform(item)
        return
    if not isinstance(node, dict):
        return
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(bound) is True:  # OpenAPI 3.0 boolean form -> draft 7 number form
            node[bound] = node.pop(plain)
        elif node.get(bound) is False:
            del node[bound]
    for key in [k for k in node if k.startswith("x-kubernetes-")]:
        del node[key]
    if "properties" in node and not preserve and "additionalProperties" not in node:
        node["additionalProperties"] = False
    for key in ("properties", "patternProperties", "definitions"):
        for child in (node.get(key) or {}).values():
            _transform(child)
    for key in ("items", "additionalProperties", "not"):
        _transform(node.get(key))
    for key in ("anyOf", "allOf", "oneOf"):
        _transform(node.get(key))


def crd_version_schema(crd: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = found["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def _rayjob_validator(release: str | None = None) -> jsonschema.Draft7Validator:
    crd = _rayjob_crd(release)
    return jsonschema.Draft7Validator(to_jsonschema(crd_version_schema(crd, "v1")))


def schema_errors(validator: jsonschema.protocols.Validator, obj: Any) -> list[str]:
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    )


def rayjob_schema_errors(rayjob: dict[str, Any], release: str | None = None) -> list[str]:
    """Schema errors of a RayJob against the newest KubeRay CRD, or that of `release`."""
    return schema_errors(_rayjob_validator(release), rayjob)


def kuberay_controller_errors(rayjob: dict[str, Any]) -> list[str]:
    """validation.go's ValidateRayJobMetadata + ValidateRayJobSpec (+ the cluster spec)."""
    out: list[str] = []
    name = rayjob["metadata"]["name"]
    if len(name) > RAYJOB_NAME_MAX:
        out.append(f"RayJob name should be no more than {RAYJOB_NAME_MAX} characters")
    if not DNS1035.match(name) or len(name) > 63:
        out.append("RayJob name should be a valid DNS1035 label")
    spec = rayjob["spec"]
    shutdown = bool(spec.get("shutdownAfterJobFinishes"))
    if spec.get("suspend") and not shutdown:
        out.append("a RayJob with shutdownAfterJobFinishes false cannot be suspended")
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    if ttl < 0:
        out.append("TTLSecondsAfterFinished must be a non-negative integer")
    if ttl > 0 and not shutdown:
        out.append("ttlSecondsAfterFinished > 0 needs shutdownAfterJobFinishes")
    if spec.get("deletionStrategy") is not None and shutdown:
        out.append("deletionStrategy cannot be combined with shutdownAfterJobFinishes")
    if spec.get("submissionMode", "K8sJobMode") not in (
        "K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"
    ):  # fmt: skip
        out.append(f"unknown submissionMode {spec.get('submissionMode')!r}")
    if "rayClusterSpec" not in spec and not spec.get("clusterSelector"):
        out.append("one of RayClusterSpec or ClusterSelector must be set")
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        out.append("activeDeadlineSeconds must be a positive integer")
    if spec.get("backoffLimit") is not None and spec["backoffLimit"] < 0:
        out.append("backoffLimit must be a positive integer")
    if spec.get("runtimeEnvYAML"):  # dashboardclient.UnmarshalRuntimeEnvYAML: a YAML mapping
        try:
            runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
        except yaml.YAMLError:
            runtime_env = None
        if not isinstance(runtime_env, dict):
            out.append("failed to unmarshal RuntimeEnvYAML")
    if "rayClusterSpec" in spec:
        out.extend(_cluster_errors(spec["rayClusterSpec"]))
    return out


def _cluster_errors(cluster: dict[str, Any]) -> list[str]:
    out: list[str] = []
    head = cluster["headGroupSpec"]
    groups = [("Head", head), *((w["groupName"], w) for w in cluster.get("workerGroupSpecs", []))]
    for name, group in groups:
        if not group["template"].get("spec", {}).get("containers"):
            out.append(f"{name}: group should have at least one container")
        params = group.get("rayStartParams") or {}
        if any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")) and (
            group.get("resources")
        ):
            out.append(f"{name}: resources set in both rayStartParams and resources")
        if "labels" in params:
            out.append(f"{name}: rayStartParams['labels'] is not supported")
        for key, value in (group.get("labels") or {}).items():
            if not QUALIFIED_NAME.match(key) or not LABEL_VALUE.match(value):
                out.append(f"{name}: invalid Ray label {key}={value}")
    workers = cluster.get("workerGroupSpecs", [])
    names = [w["groupName"] for w in workers]
    if len(set(names)) != len(names):
        out.append("worker group names must be unique")
    for w in workers:
        if not w.get("minReplicas", 0) <= w.get("replicas", 0) <= w.get("maxReplicas", 2**31):
            out.append(f"{w['groupName']}: replicas outside [minReplicas, maxReplicas]")
    head_env = head["template"]["spec"]["containers"][0].get("env", [])
    head_env_names = {e["name"] for e in head_env}
    if "gcsFaultToleranceOptions" not in cluster and "RAY_REDIS_ADDRESS" in head_env_names:
        out.append("RAY_REDIS_ADDRESS set while GcsFaultToleranceOptions is not set")
    if "REDIS_USERNAME" in head_env_names:
        out.append("cannot set redis username in environment variables")
    if not cluster.get("enableInTreeAutoscaling") and any(
        e["name"] == "RAY_enable_autoscaler_v2" and e.get("value") in ("1", "true")
        for e in head_env
    ):
        out.append("RAY_enable_autoscaler_v2 set while enableInTreeAutoscaling is false")
    return out


def core_errors(obj: dict[str, Any], version: str = "1.30.0") -> list[str]:
    """kubernetes-validate, strict (unknown fields are errors)."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [str(exc)]
    return []


def pod_templates(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template inside a RayJob (head, worker groups, submitter)."""
    cluster = rayjob["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [w["template"] for w in cluster.get("workerGroupSpecs", [])]
    if "submitterPodTemplate" in rayjob["spec"]:
        templates.append(rayjob["spec"]["submitterPodTemplate"])
    return templates


# ---- structural defaulting and CEL, as the apiserver applies them --------------------


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Structural defaulting: fill absent properties that declare a `default`, recursively."""
    if isinstance(obj, dict) and "properties" in schema:
        for name, child in schema["properties"].items():
            if name not in obj and "default" in child:
                obj[name] = copy.deepcopy(child["default"])
            if name in obj:
                obj[name] = apply_defaults(child, obj[name])
    elif isinstance(obj, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key in obj:
            obj[key] = apply_defaults(schema["additionalProperties"], obj[key])
    elif isinstance(obj, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in obj]
    return obj


def cel_violations(
    schema: dict[str, Any], obj: Any, old: Any = None, path: str = ""
) -> list[tuple[str, str]]:
    """(path, message) of every x-kubernetes-validations rule that fails on `obj`.

    Transition rules (those naming oldSelf) run only where an old value exists, as in the
    apiserver; list items are matched to old items by position.
    """
    import celpy

    out: list[tuple[str, str]] = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue
        activation = {"self": celpy.json_to_cel(obj)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = env.program(env.compile(rule["rule"])).evaluate(activation)
        if not isinstance(result, celpy.celtypes.BoolType) or not bool(result):
            out.append((path or "<root>", rule["message"]))
    if isinstance(obj, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in obj:
                prior = old.get(name) if isinstance(old, dict) else None
                out += cel_violations(child, obj[name], prior, f"{path}.{name}".lstrip("."))
    elif isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            prior = old[i] if isinstance(old, list) and i < len(old) else None
            out += cel_violations(schema["items"], item, prior, f"{path}[{i}]")
    return out
