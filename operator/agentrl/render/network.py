"""How the experiment's head pod is reached: the gateway Service and the metrics Service.

They are two Services because they face two audiences. The gateway Service carries the agent
API only (model calls, and HTTP agents' result callbacks, which the gateway relays to the
rollout), and may be a LoadBalancer when agents run outside the cluster (an AgentCore
runtime, an HTTP agent elsewhere). The metrics port serves `/metrics` without
authentication, so it has its own Service that is always ClusterIP: the operator's progress
scrape reads it there, and the PodMonitor scrapes the pod's named port directly. Both select
the head pod by agentrl's own labels, which survive KubeRay renaming the RayCluster on a
retry.

The gateway's admin API (sessions, turns, engine quiesce, where callbacks go) listens on a
port of its own that the OS picks and the hub announces to the rollout through Ray; no
Service here names it, so a LoadBalancer reaches only the agent API. It also stays behind its
own 256-bit token.
"""

from __future__ import annotations

from typing import Any

from agentrl.api.constants import (
    GATEWAY_PORT_NAME,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    METRICS_PORT,
    METRICS_PORT_NAME,
)
from agentrl.api.models import RLExperiment
from agentrl.render.rayjob import COMPONENT_HEAD

Obj = dict[str, Any]


def head_selector(exp: RLExperiment) -> dict[str, str]:
    """Our own pod labels: KubeRay names the RayCluster itself (and renames it on retry)."""
    return {LABEL_EXPERIMENT: exp.metadata.name, LABEL_COMPONENT: COMPONENT_HEAD}


def gateway_service(exp: RLExperiment, metadata: Obj) -> Obj:
    """The agent API's Service; `metadata` is the children's common metadata."""
    gw = exp.spec.gateway
    meta = dict(metadata)
    if gw.service.annotations:
        meta["annotations"] = dict(gw.service.annotations)
    spec: Obj = {
        "type": gw.service.type,
        "selector": head_selector(exp),
        "ports": [{"name": GATEWAY_PORT_NAME, "port": gw.port, "targetPort": GATEWAY_PORT_NAME,
                   "protocol": "TCP"}],
    }  # fmt: skip
    if gw.service.load_balancer_source_ranges:
        spec["loadBalancerSourceRanges"] = list(gw.service.load_balancer_source_ranges)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def metrics_service(exp: RLExperiment, metadata: Obj) -> Obj:
    """The metrics port's Service: ClusterIP whatever the gateway's type, no annotations
    (a cloud load-balancer annotation is meant for the gateway only)."""
    spec: Obj = {
        "type": "ClusterIP",
        "selector": head_selector(exp),
        "ports": [{"name": METRICS_PORT_NAME, "port": METRICS_PORT,
                   "targetPort": METRICS_PORT_NAME, "protocol": "TCP"}],
    }  # fmt: skip
    return {"apiVersion": "v1", "kind": "Service", "metadata": dict(metadata), "spec": spec}
