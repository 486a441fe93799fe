"""The RLExperiment CustomResourceDefinition, generated from the pydantic models.

One source of truth: the models define fields, types, ranges and defaults; this module turns
their JSON schema into a Kubernetes structural schema (refs inlined, no `title`, no
`default: null`, `x-kubernetes-preserve-unknown-fields` only on pass-through Kubernetes
objects) and adds what a schema cannot say: CEL rules for cross-field constraints and for
immutability. Lifecycle fields (suspend, deadlines, backoffLimit, TTL, scheduling) stay
mutable; everything that shapes the run is fixed at creation, since KubeRay does not apply
RayJob spec edits to a running cluster anyway. `crds/rlexperiments.agentrl.io.yaml` is this
module's output, checked in; a test fails when it drifts.
"""

from __future__ import annotations

import copy
from typing import Any

from agentrl.api import constants as c
from agentrl.api.kube_rules import DNS1035
from agentrl.api.models import RLExperimentSpec, RLExperimentStatus

Schema = dict[str, Any]

# Spec fields that shape the run and never change after creation. CEL cannot see inside the
# pass-through Kubernetes objects (volumes, tolerations, affinity: preserve-unknown-fields),
# so their immutability is the operator's to enforce; everything else the API server refuses.
IMMUTABLE_SPEC_FIELDS = (
    "model", "data", "agent", "grpo", "gateway", "resources", "runtime", "checkpoint", "tracking",
)  # fmt: skip
# The ones that may change: lifecycle and scheduling (Kueue flips `suspend` to admit a job).
MUTABLE_SPEC_FIELDS = (
    "suspend", "activeDeadlineSeconds", "startupDeadlineSeconds", "backoffLimit",
    "ttlSecondsAfterFinished", "scheduling",
)  # fmt: skip

# Directories agentrl mounts read-only or in memory (a CEL regex alternation).
AGENTRL_MOUNTS = "|".join((c.CONFIG_MOUNT_DIR, c.BUNDLE_MOUNT_DIR, c.SHM_MOUNT_DIR))
TRAIN_GPUS = "(self.nodes * self.gpusPerNode - (has(self.rolloutGpus) ? self.rolloutGpus : 0))"
MODEL_PARALLEL = "(self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.context)"

# (wire path under spec, rule, message): cross-field rules the apiserver enforces itself.
CEL_RULES: tuple[tuple[str, str, str], ...] = (
    ("agent", "has(self.agentCore) != has(self.http)",
     "set exactly one agent backend: agentCore or http"),
    ("resources", "self.colocate || has(self.rolloutGpus)",
     "rolloutGpus is required when colocate is false"),
    ("resources", "!self.colocate || !has(self.rolloutGpus)",
     "rolloutGpus is only used when colocate is false"),
    ("resources", "!has(self.rolloutGpus) || self.rolloutGpus < self.nodes * self.gpusPerNode",
     "rolloutGpus must leave GPUs for training"),
    ("resources", f"{TRAIN_GPUS} % {MODEL_PARALLEL} == 0",
     "training GPUs must be divisible by tensor x pipeline x context parallelism"),
    ("grpo", "!has(self.globalBatchSize) || "
     "(self.rolloutBatchSize * self.samplesPerPrompt) % self.globalBatchSize == 0",
     "globalBatchSize must divide rolloutBatchSize x samplesPerPrompt"),
    ("gateway.service", "self.type == 'LoadBalancer' || !has(self.loadBalancerSourceRanges) || "
     "size(self.loadBalancerSourceRanges) == 0",
     "loadBalancerSourceRanges is only used by a LoadBalancer service"),
    ("checkpoint", "!has(self.saveInterval) || has(self.path)",
     "checkpoint.path is required when saveInterval is set"),
    ("checkpoint", f"!has(self.path) || !self.path.matches('^({AGENTRL_MOUNTS})(/|$)')",
     "checkpoint.path must not be inside a directory agentrl mounts (read-only or in memory)"),
    ("resources", "!self.gpuResourceName.matches('^([^/]*[.])?kubernetes[.]io/')",
     "gpuResourceName must be a device plugin's resource, not a kubernetes.io one"),
)  # fmt: skip
ENV_ITEM_RULE = ("has(self.value) != has(self.valueFrom)", "set exactly one of value or valueFrom")
ROOT_RULES = (
    (f"self.metadata.name.size() <= {c.RAYJOB_NAME_MAX}",
     f"metadata.name must be at most {c.RAYJOB_NAME_MAX} characters (KubeRay's RayJob limit)"),
    (f"self.metadata.name.matches('{DNS1035.pattern}')",
     "metadata.name must be a DNS-1035 label: lower-case letters, digits, '-', "
     "starting with a letter"),
)  # fmt: skip
# Lists whose items are identified by a key (the apiserver rejects duplicate keys).
LIST_MAP_KEYS = {"data.eval": "name", "runtime.env": "name"}

# `kubectl get rlx`. A column takes one JSONPath, so "12/200" is a status field of its own.
# Priority 1 columns show with `-o wide`.
PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Rollout", "type": "string", "jsonPath": ".status.progress.rolloutText",
     "description": "training rollouts finished of grpo.numRollouts"},
    {"name": "Reward", "type": "number", "jsonPath": ".status.progress.trainReward",
     "description": "mean reward of the last training rollout"},
    {"name": "Eval", "type": "number", "jsonPath": ".status.progress.evalReward",
     "description": "mean reward of the last evaluation"},
    {"name": "Recent Fail Ratio", "type": "number",
     "jsonPath": ".status.progress.failedSessionRatio",
     "description": "failed / finished training episodes since the operator's previous "
                    "progress read (every sweep interval)"},
    {"name": "Step Time", "type": "number", "jsonPath": ".status.progress.stepSeconds",
     "priority": 1, "description": "seconds per rollout step, smoothed"},
    {"name": "ETA", "type": "string", "jsonPath": ".status.progress.eta", "priority": 1,
     "description": "when the last rollout should finish at the current pace"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip


def structural(model_schema: Schema) -> Schema:
    """A pydantic JSON schema -> Kubernetes structural schema."""
    defs = model_schema.get("$defs", {})
    return _clean(model_schema, defs)


def _clean(node: Schema, defs: Schema) -> Schema:
    node = copy.deepcopy(node)
    node.pop("$defs", None)
    any_of = node.get("anyOf")
    if any_of and {"type": "null"} in any_of:  # Optional[X]: absent, not null
        rest = [s for s in any_of if s != {"type": "null"}]
        node.pop("anyOf")
        if len(rest) == 1:
            node = {**rest[0], **node}
        else:
            node["anyOf"] = rest
    if "$ref" in node:  # inline, keeping the field's own description/default
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**copy.deepcopy(target), **node}
    node.pop("title", None)
    if "default" in node and node["default"] is None:
        node.pop("default")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[plain] = node.pop(bound)
            node[bound] = True
    if node.get("type") == "object":
        _clean_object(node, defs)
    if "items" in node:
        node["items"] = _clean(node["items"], defs)
    return node


def _clean_object(node: Schema, defs: Schema) -> None:
    extra = node.pop("additionalProperties", None)
    props = node.get("properties")
    if props is not None:
        required = set(node.get("required", []))
        for name, child in list(props.items()):
            cleaned = _clean(child, defs)
            # A nested object with its own defaults: default {} lets the apiserver fill them.
            if name not in required and "$ref" in child and "default" not in cleaned:
                cleaned["default"] = {}
            props[name] = cleaned
    elif extra is True or extra is None:
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, dict):
        node["additionalProperties"] = _clean(extra, defs)


def _at(schema: Schema, dotted: str) -> Schema:
    node = schema
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


def _add_rule(node: Schema, rule: str, message: str) -> None:
    node.setdefault("x-kubernetes-validations", []).append({"rule": rule, "message": message})


def spec_schema() -> Schema:
    spec = structural(RLExperimentSpec.model_json_schema(by_alias=True, mode="validation"))
    for path, rule, message in CEL_RULES:
        _add_rule(_at(spec, path), rule, message)
    _add_rule(_at(spec, "runtime.env")["items"], *ENV_ITEM_RULE)
    for path, key in LIST_MAP_KEYS.items():
        node = _at(spec, path)
        node["x-kubernetes-list-type"] = "map"
        node["x-kubernetes-list-map-keys"] = [key]
    for name in IMMUTABLE_SPEC_FIELDS:
        _add_rule(
            spec["properties"][name],
            "self == oldSelf",
            f"spec.{name} is immutable; create a new experiment (only suspend, deadlines, "
            "backoffLimit, ttlSecondsAfterFinished and scheduling may change)",
        )
    return spec


def status_schema() -> Schema:
    status = structural(RLExperimentStatus.model_json_schema(by_alias=True, mode="validation"))
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return status


def openapi_schema() -> Schema:
    root: Schema = {
        "type": "object",
        "description": "GRPO reinforcement learning of an LLM agent, run as a KubeRay RayJob.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
    }
    for rule, message in ROOT_RULES:
        _add_rule(root, rule, message)
    return root


def crd() -> Schema:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {c.LABEL_PART_OF: c.MANAGED_BY},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": ["agentrl"],
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }
