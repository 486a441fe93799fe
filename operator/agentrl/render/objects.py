"""The ConfigMaps and the Service of an experiment, and `render_all`: every child, by role.

ConfigMaps come first (the pods mount them), then the Service, then the RayJob, so KubeRay
never starts a pod whose volumes do not exist yet.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agentrl.api.constants import (
    ANNOTATION_BUNDLE_VERSION,
    API_VERSION,
    CONFIG_FILE_NAME,
    GATEWAY_PORT_NAME,
    KIND,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    METRICS_PORT,
    METRICS_PORT_NAME,
)
from agentrl.api.models import RLExperiment
from agentrl.api.runtime import ENV_WANDB_API_KEY, RuntimeConfig, http_header_env_name
from agentrl.api.validation import errors, validate_experiment
from agentrl.render import bundle, names, pods, provenance
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.rayjob import COMPONENT_HEAD, render_rayjob

Obj = dict[str, Any]


def gateway_url(exp: RLExperiment) -> str:
    """How agents reach the gateway: the user's public URL, else the in-cluster Service."""
    gw = exp.spec.gateway
    if gw.public_url:
        return gw.public_url.rstrip("/")
    return f"http://{names.service_name(exp)}.{exp.metadata.namespace}.svc:{gw.port}"


def runtime_config(exp: RLExperiment, defaults: OperatorDefaults) -> RuntimeConfig:
    spec = exp.spec
    headers: dict[str, str] = {}
    if spec.agent.http is not None:
        headers = {h.name: http_header_env_name(i) for i, h in enumerate(spec.agent.http.headers)}
    return RuntimeConfig(
        experiment=exp.metadata.name,
        namespace=exp.metadata.namespace,
        uid=exp.metadata.uid,
        bundle_version=defaults.bundle_version,
        spec=spec,
        gateway_url=gateway_url(exp),
        wandb_api_key_env=ENV_WANDB_API_KEY if spec.tracking.wandb is not None else None,
        http_header_envs=headers,
    )


def metadata(exp: RLExperiment, defaults: OperatorDefaults, name: str) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": exp.metadata.namespace,
        "labels": pods.labels(exp, defaults),
    }
    if exp.metadata.uid:
        meta["ownerReferences"] = [owner_reference(exp)]
    return meta


def owner_reference(exp: RLExperiment) -> Obj:
    """Garbage collection: deleting the experiment deletes every child."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": exp.metadata.name,
        "uid": exp.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def config_map(exp: RLExperiment, defaults: OperatorDefaults) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(exp, defaults, names.config_map_name(exp)),
        "data": {CONFIG_FILE_NAME: runtime_config(exp, defaults).to_json()},
    }


def bundle_config_map(exp: RLExperiment, defaults: OperatorDefaults, code: bundle.Bundle) -> Obj:
    """The immutable code ConfigMap: one zip archive, mounted and first on PYTHONPATH."""
    meta = metadata(exp, defaults, names.bundle_config_map_name(exp, code.digest))
    meta["annotations"] = {ANNOTATION_BUNDLE_VERSION: defaults.bundle_version}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "immutable": True,
        "binaryData": dict(code.binary_data),
    }


def service(exp: RLExperiment, defaults: OperatorDefaults) -> Obj:
    gw = exp.spec.gateway
    meta = metadata(exp, defaults, names.service_name(exp))
    if gw.service.annotations:
        meta["annotations"] = dict(gw.service.annotations)
    spec: Obj = {
        "type": gw.service.type,
        # Our own pod labels: KubeRay names the RayCluster itself (and renames it on retry).
        "selector": {LABEL_EXPERIMENT: exp.metadata.name, LABEL_COMPONENT: COMPONENT_HEAD},
        "ports": [
            {"name": GATEWAY_PORT_NAME, "port": gw.port, "targetPort": GATEWAY_PORT_NAME,
             "protocol": "TCP"},
            {"name": METRICS_PORT_NAME, "port": METRICS_PORT, "targetPort": METRICS_PORT_NAME,
             "protocol": "TCP"},
        ],
    }  # fmt: skip
    if gw.service.load_balancer_source_ranges:
        spec["loadBalancerSourceRanges"] = list(gw.service.load_balancer_source_ranges)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


@dataclass(frozen=True)
class Children:
    """Every object an experiment owns, by role. Iterating gives them in apply order."""

    config: Obj  # the runtime-config ConfigMap
    bundle: Obj  # the bundle-code ConfigMap (immutable, named by content)
    service: Obj  # the gateway and metrics Service
    rayjob: Obj

    @property
    def prerequisites(self) -> tuple[Obj, Obj, Obj]:
        """What the RayJob's pods mount or are selected by: created before the RayJob."""
        return (self.config, self.bundle, self.service)

    def __iter__(self) -> Iterator[Obj]:
        return iter((*self.prerequisites, self.rayjob))


def render_all(
    exp: RLExperiment,
    defaults: OperatorDefaults,
    bundle_files: bundle.Bundle | Mapping[str, str],
) -> Children:
    """Every child of the experiment, exactly as the operator applies it.

    Children carry a controller owner reference when `exp.metadata.uid` is known, and the
    RayJob the annotations later reconciles compare against (`provenance.stamp`). An
    experiment with validation errors is refused (ValueError): nothing half-valid is rendered.
    Pass a `Bundle` when rendering many experiments from the same sources (the operator).
    """
    problems = errors(validate_experiment(exp))
    if problems:
        raise ValueError("invalid experiment: " + "; ".join(str(p) for p in problems))
    code = (
        bundle_files if isinstance(bundle_files, bundle.Bundle) else bundle.Bundle.of(bundle_files)
    )
    bundle_cm = bundle_config_map(exp, defaults, code)
    job_meta = metadata(exp, defaults, names.rayjob_name(exp))
    job = render_rayjob(exp, defaults, job_meta, bundle_cm["metadata"]["name"])
    # Independent trees: callers (patches) may mutate one object safely. The pod templates
    # share parts, so they are copied; the bundle ConfigMap already is fresh (its one value
    # is a str).
    config, svc, job = (_tree(config_map(exp, defaults)), _tree(service(exp, defaults)),
                        _tree(job))  # fmt: skip
    provenance.stamp(job, exp.spec)
    return Children(config=config, bundle=bundle_cm, service=svc, rayjob=job)


def _tree(value: Any) -> Any:
    """A copy of a JSON-like tree: copy.deepcopy's result for dicts, lists and scalars, at a
    third of its cost (no memo, no dispatch); the operator renders every experiment."""
    if isinstance(value, dict):
        return {k: _tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tree(v) for v in value]
    return value
