"""The runtime config: what the operator hands to the code inside the Ray cluster.

The renderer serialises a `RuntimeConfig` into the runtime-config ConfigMap; the launcher
and the rollout function parse it back with the same model. It never holds a secret value:
secrets reach the pods as environment variables from `secretKeyRef`, and the config only
names those variables.
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

    def to_json(self) -> str:
        return json.dumps(self.dump(), indent=2, sort_keys=True)

    @classmethod
    def load(cls, path: str | Path) -> RuntimeConfig:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
