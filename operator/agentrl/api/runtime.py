"""The runtime config: what the operator hands to the code inside the Ray cluster.

The renderer serialises a `RuntimeConfig` into the runtime-config ConfigMap; the launcher
and the rollout function parse it back with the same model. It never holds a secret value:
secrets reach the pods as environment variables from `secretKeyRef`, and the config only
names those variables. Nor does it hold `runtime.env` (`config_spec`): those values reach
the pods as container env, and a ConfigMap is readable by anyone who may read ConfigMaps in
the namespace, so a plain-text value that should have been a Secret stays out of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from pydantic import Field

from agentrl.api.constants import METRICS_PORT
from agentrl.api.models import Model, RLExperimentSpec

# Environment variables that carry secret values into the Ray containers.
ENV_WANDB_API_KEY: Final = "WANDB_API_KEY"
ENV_HTTP_HEADER_PREFIX: Final = "AGENTRL_HTTP_HEADER_"


def http_header_env_name(index: int) -> str:
    """The env var that holds the value of `agent.http.headers[index]`."""
    return f"{ENV_HTTP_HEADER_PREFIX}{index}"


def runtime_secret_env_names(spec: RLExperimentSpec) -> list[str]:
    """The `runtime.env` variables whose value comes from a Secret, by name only: the config
    leaves `runtime.env` out, so without these names the launcher could not tell a secret
    under an ordinary name (a Sentry DSN, a database URL) from any other variable."""
    return [e.name for e in spec.runtime.env if e.value_from is not None]


def config_spec(spec: RLExperimentSpec) -> RLExperimentSpec:
    """The spec as the runtime config carries it: without `runtime.env` (no code in the pods
    reads it from the config; the containers get it as env)."""
    return spec.model_copy(update={"runtime": spec.runtime.model_copy(update={"env": []})})


class RuntimeConfig(Model):
    experiment: str
    namespace: str
    uid: str | None = None
    bundle_version: str
    spec: RLExperimentSpec
    gateway_url: str = Field(description="how agents outside the head pod reach the gateway")
    metrics_port: int = METRICS_PORT
    # Env var names (not values) the bundle reads secrets from.
    wandb_api_key_env: str | None = None
    http_header_envs: dict[str, str] = Field(
        default_factory=dict, description="header name -> env var holding its value"
    )
    runtime_secret_envs: list[str] = Field(
        default_factory=list, description="spec.runtime.env variables set from a Secret"
    )

    def to_json(self) -> str:
        return json.dumps(self.dump(), indent=2, sort_keys=True)

    @classmethod
    def load(cls, path: str | Path) -> RuntimeConfig:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
