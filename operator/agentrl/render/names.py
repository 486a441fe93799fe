"""Deterministic, DNS-safe names of every child object of an experiment.

The experiment name is already checked (`agentrl.api.rules.name_fits`) to be a DNS-1035 label
of at most 47 characters, KubeRay's cap for RayJob names; every suffix here is short enough
that the derived names stay within their own limits (63 for Services, 253 for ConfigMaps).
The RayJob carries the experiment's own name, so `kubectl get rayjob NAME` finds it.
"""

from __future__ import annotations

from agentrl.api.constants import EXTRA_CODE_VOLUME_PREFIX
from agentrl.api.models import RLExperiment

CONFIG_SUFFIX = "-config"
BUNDLE_SUFFIX = "-bundle-"
SERVICE_SUFFIX = "-gateway"
METRICS_SERVICE_SUFFIX = "-metrics"
# Hex digits of the bundle content hash kept in the bundle ConfigMap name.
BUNDLE_HASH_LEN = 10


def rayjob_name(exp: RLExperiment) -> str:
    return exp.metadata.name


def config_map_name(exp: RLExperiment) -> str:
    return f"{exp.metadata.name}{CONFIG_SUFFIX}"


def bundle_config_map_name(exp: RLExperiment, content_hash: str) -> str:
    """Named by content: a new operator version never rewrites a running experiment's code."""
    return f"{exp.metadata.name}{BUNDLE_SUFFIX}{content_hash[:BUNDLE_HASH_LEN]}"


def service_name(exp: RLExperiment) -> str:
    """The gateway's Service: the agent API, and nothing else (it may be a LoadBalancer)."""
    return f"{exp.metadata.name}{SERVICE_SUFFIX}"


def metrics_service_name(exp: RLExperiment) -> str:
    """The always cluster-internal Service of the head pod's metrics port."""
    return metrics_service_of(exp.metadata.name)


def metrics_service_of(experiment: str) -> str:
    """`metrics_service_name` from the experiment's name alone: the operator reads the
    metrics of a running experiment whose spec it no longer accepts (a tightened policy)."""
    return f"{experiment}{METRICS_SERVICE_SUFFIX}"


def extra_code_volume_name(index: int) -> str:
    return f"{EXTRA_CODE_VOLUME_PREFIX}{index}"
