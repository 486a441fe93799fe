"""The operator's own settings, parsed from an environment mapping (the chart sets them).

Parsed once at startup; a bad value stops the operator with a message naming the variable,
rather than running with a guess. That holds for the policy above all: an unreadable
`AGENTRL_POLICY` never falls back to a looser one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentrl.api.policy import BASELINE, Policy, PolicyError, load_policy, policy_warnings
from agentrl.controller.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, Timing
from agentrl.render.defaults import DEFAULT_IMAGE, OperatorDefaults

logger = logging.getLogger(__name__)

# How the operator reaches an experiment's metrics port: the metrics Service the renderer
# creates (`{service}` is its name).
DEFAULT_METRICS_URL = "http://{service}.{namespace}.svc:{port}/metrics"
# Where users open an experiment's Ray dashboard. KubeRay reports the head Service inside the
# cluster (`<svc>.<ns>.svc.cluster.local:8265`), which no browser outside it reaches; a
# template turns it into a URL that does, e.g. the API server's service proxy through
# `kubectl proxy`, or the platform's own ingress. Keys: namespace, experiment, cluster (the
# RayCluster), service (the head Service), address (KubeRay's host:port).
DEFAULT_RAY_DASHBOARD_URL = "http://{address}"
RAY_DASHBOARD_KEYS = ("namespace", "experiment", "cluster", "service", "address")
# The policy as JSON (the chart's `policy` value); unset or empty: the baseline default.
ENV_POLICY = "AGENTRL_POLICY"
# The Lease replicas elect a leader on (the chart names it after the release).
DEFAULT_LEASE_NAME = "agentrl-operator"
LEASE_TIMING_ENV = ("AGENTRL_LEASE_DURATION_SECONDS", "AGENTRL_RENEW_DEADLINE_SECONDS",
                    "AGENTRL_RETRY_PERIOD_SECONDS")  # fmt: skip


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    image: str | None = DEFAULT_IMAGE  # None: experiments must set spec.runtime.image
    ray_version: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    extra_labels: dict[str, str] = field(default_factory=dict)
    metrics_port: int = 8080  # the operator's own /metrics
    liveness_endpoint: str = "http://0.0.0.0:8081/healthz"
    sweep_interval: float = 30.0  # progress scrape + deadline check, seconds
    scrape_timeout: float = 3.0
    scrape_concurrency: int = 8
    reconcile_concurrency: int = 4  # spec reconciles at once (CPU-bound: render + encode)
    # Seconds a pod may sit in ContainerCreating before its events are read for a volume or
    # sandbox that holds it (an image pull of tens of GB is slow but not stuck: no such event).
    stuck_creating_after: float = 300.0
    # Seconds a pod may wait Unschedulable before it is stuck, counted from its PodScheduled
    # condition's lastTransitionTime: long enough for an autoscaler to bring up a GPU node.
    stuck_unschedulable_after: float = 900.0
    metrics_url: str = DEFAULT_METRICS_URL  # format keys: service, namespace, port, name
    ray_dashboard_url: str = DEFAULT_RAY_DASHBOARD_URL  # format keys: RAY_DASHBOARD_KEYS
    policy: Policy = BASELINE  # what experiments may ask for (agentrl.api.policy)
    # Leader election (agentrl.controller.leader): off, this process always acts (one replica).
    leader_election: bool = False
    lease_name: str = DEFAULT_LEASE_NAME
    lease_namespace: str | None = None  # None: the namespace of the credentials (in a pod, its own)
    lease_timing: Timing = field(default_factory=Timing)

    def defaults(self) -> OperatorDefaults:
        return OperatorDefaults(
            image=self.image,
            ray_version=self.ray_version,
            image_pull_secrets=self.image_pull_secrets,
            extra_labels=dict(self.extra_labels),
        )


def _list(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _number(env: Mapping[str, str], key: str, default: float, minimum: float) -> float:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(f"{key}={raw!r} must be at least {minimum:g}")
    return value


def _flag(env: Mapping[str, str], key: str) -> bool:
    raw = (env.get(key) or "").strip().lower()
    if raw in ("", "false", "0", "no"):
        return False
    if raw in ("true", "1", "yes"):
        return True
    raise ConfigError(f"{key}={env.get(key)!r}: write true or false")


def _timing(env: Mapping[str, str]) -> Timing:
    lease_key, renew_key, retry_key = LEASE_TIMING_ENV
    lease = _number(env, lease_key, LEASE_DURATION, 1)
    if lease != int(lease):
        raise ConfigError(f"{lease_key}={env.get(lease_key)!r}: whole seconds (the Lease "
                          "records an integer)")  # fmt: skip
    timing = Timing(lease_duration=int(lease),
                    renew_deadline=_number(env, renew_key, RENEW_DEADLINE, 0.001),
                    retry_period=_number(env, retry_key, RETRY_PERIOD, 0.001))  # fmt: skip
    if problems := timing.problems():
        raise ConfigError(f"{', '.join(LEASE_TIMING_ENV)}: {'; '.join(problems)}")
    return timing


def _labels(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _list(raw):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"AGENTRL_EXTRA_LABELS item {item!r}: write key=value")
        out[key] = value
    return out


def ray_dashboard_link(
    template: str, key: tuple[str, str], address: str, cluster: str | None
) -> str:
    """The Ray dashboard URL users open, from KubeRay's in-cluster address."""
    service = address.split(":", 1)[0].split(".", 1)[0]
    return template.format(namespace=key[0], experiment=key[1], cluster=cluster or "",
                           service=service, address=address)  # fmt: skip


def read_policy(raw: str | None) -> Policy:
    """The policy from `AGENTRL_POLICY` (JSON); unset or blank: the baseline default."""
    if raw is None or not raw.strip():
        return BASELINE
    try:
        doc = json.loads(raw)
    except ValueError as err:
        raise ConfigError(f"{ENV_POLICY} is not JSON ({err})") from None
    try:
        policy = load_policy(doc, ENV_POLICY)
    except PolicyError as err:
        raise ConfigError(str(err)) from None
    for warning in policy_warnings(policy):
        logger.warning("%s: %s", ENV_POLICY, warning)
    return policy


def load(env: Mapping[str, str]) -> OperatorConfig:
    """Read AGENTRL_* variables; everything has a default."""
    url = env.get("AGENTRL_METRICS_URL") or DEFAULT_METRICS_URL
    try:
        url.format(service="s", namespace="n", port=1, name="x")
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(f"AGENTRL_METRICS_URL={url!r}: bad placeholder {err}") from None
    ray_url = env.get("AGENTRL_RAY_DASHBOARD_URL") or DEFAULT_RAY_DASHBOARD_URL
    try:
        ray_url.format(**dict.fromkeys(RAY_DASHBOARD_KEYS, "x"))
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(
            f"AGENTRL_RAY_DASHBOARD_URL={ray_url!r}: bad placeholder {err} (use "
            + ", ".join("{" + k + "}" for k in RAY_DASHBOARD_KEYS)
            + ")"
        ) from None
    return OperatorConfig(
        namespaces=_list(env.get("AGENTRL_NAMESPACES", "")),
        image=env.get("AGENTRL_IMAGE") or DEFAULT_IMAGE,
        ray_version=env.get("AGENTRL_RAY_VERSION") or None,
        image_pull_secrets=_list(env.get("AGENTRL_IMAGE_PULL_SECRETS", "")),
        extra_labels=_labels(env.get("AGENTRL_EXTRA_LABELS", "")),
        metrics_port=int(_number(env, "AGENTRL_METRICS_PORT", 8080, 0)),
        liveness_endpoint=env.get("AGENTRL_LIVENESS_ENDPOINT") or "http://0.0.0.0:8081/healthz",
        sweep_interval=_number(env, "AGENTRL_SWEEP_INTERVAL", 30.0, 0.05),
        scrape_timeout=_number(env, "AGENTRL_SCRAPE_TIMEOUT", 3.0, 0.05),
        scrape_concurrency=int(_number(env, "AGENTRL_SCRAPE_CONCURRENCY", 8, 1)),
        reconcile_concurrency=int(_number(env, "AGENTRL_RECONCILE_CONCURRENCY", 4, 1)),
        stuck_creating_after=_number(env, "AGENTRL_STUCK_CREATING_SECONDS", 300.0, 0),
        stuck_unschedulable_after=_number(env, "AGENTRL_STUCK_UNSCHEDULABLE_SECONDS", 900.0, 0),
        metrics_url=url,
        ray_dashboard_url=ray_url,
        policy=read_policy(env.get(ENV_POLICY)),
        leader_election=_flag(env, "AGENTRL_LEADER_ELECTION"),
        lease_name=env.get("AGENTRL_LEASE_NAME") or DEFAULT_LEASE_NAME,
        lease_namespace=env.get("AGENTRL_LEASE_NAMESPACE") or None,
        lease_timing=_timing(env),
    )
