"""How the gateway is configured, and how that follows from the experiment's runtime config.

The hub on the head pod builds `GatewaySettings` from the `RuntimeConfig` the operator wrote
plus the address of slime's router (known only once slime has started its engines); tests
and the benchmarks build it directly. Knobs the experiment spec owns (`spec.gateway`, the
model id agents are told) are carried as the spec's own objects, so their defaults live in
one place, the API models; the rest are the gateway's own.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

from yarl import URL

from agentrl.api.models import AgentSpec, GatewaySpec
from agentrl.api.runtime import RuntimeConfig

# The model id agents are told when the spec does not say (spec.agent.modelId's default).
DEFAULT_MODEL_ID: str = AgentSpec.model_fields["model_id"].default


def default_render_workers() -> int:
    """Processes rendering large prompts: half the CPUs, 1 to 4 (the head pod has 8 by
    default; the event loop, the hub and the driver need the rest)."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


@dataclass(frozen=True)
class GatewaySettings:
    router_url: str  # slime's router (or one SGLang engine): /generate, /workers
    tokenizer_path: str  # HF checkpoint dir (tokenizer.json) or hub id
    renderer_family: str = "auto"  # a `renderers` family name ("qwen3", "glm-4.5", ...)
    host: str = "127.0.0.1"
    port: int | None = None  # bind port; None: spec.port (0 picks a free port, for tests)
    # The admin API's own listener. 0: a free port the OS picks, announced to the rollout
    # through the hub; no Service names it, so no LoadBalancer can reach it.
    admin_port: int = 0
    tool_call_parser: str | None = None  # only used by the "default" (chat-template) family
    reasoning_parser: str | None = None  # idem
    spec: GatewaySpec = field(default_factory=GatewaySpec)  # spec.gateway, defaults included
    model_id: str = DEFAULT_MODEL_ID  # spec.agent.modelId: what /v1/models lists and echoes
    # spec.model.contextLength; None: the checkpoint's config.json says (see `context`)
    context_length: int | None = None
    public_base_url: str | None = None  # how agents reach us; defaults to http://host:port
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    request_timeout_s: float = 900.0  # one engine call; on expiry it is aborted on every worker
    stream_keepalive_s: float = 10.0  # SSE comment interval while a streamed turn runs
    # Tokens per engine stream chunk (SGLang's `stream_interval` sampling parameter) for a
    # streamed turn whose session sets none: every chunk costs the engine and the gateway a
    # round of work, and an agent reads the text no faster.
    stream_interval: int = 64
    # Connections (`connections.py`, docs/gateway.md): a request's headers must arrive within
    # header_timeout_s of its first byte, its body within body_timeout_s; a connection idle
    # between requests is closed after idle_timeout_s (longer than agent SDKs keep an idle
    # pooled one); at most max_connections are open per listener.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    max_connections: int = 4096
    render_workers: int = field(default_factory=default_render_workers)

    def __post_init__(self) -> None:
        if self.request_timeout_s <= 0:
            raise ValueError("GatewaySettings.request_timeout_s must be > 0")
        if self.stream_interval < 1:
            raise ValueError("GatewaySettings.stream_interval must be >= 1")
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GatewaySettings.{name} must be > 0")
        if self.max_connections < 1:
            raise ValueError("GatewaySettings.max_connections must be >= 1")
        if self.render_workers < 1:
            raise ValueError("GatewaySettings.render_workers must be >= 1")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError("GatewaySettings.context_length must be >= 2 or None")
        if not self.router_url.startswith(("http://", "https://")):
            raise ValueError(
                f"GatewaySettings.router_url must be an http(s) URL: {self.router_url!r}"
            )

    @property
    def bind_port(self) -> int:
        return self.spec.port if self.port is None else self.port

    @classmethod
    def from_runtime_config(
        cls,
        config: RuntimeConfig,
        router_url: str,
        *,
        host: str = "0.0.0.0",  # the head pod serves agents outside it
        admin_token: str | None = None,
    ) -> GatewaySettings:
        model = config.spec.model
        token = admin_token if admin_token is not None else secrets.token_urlsafe(32)
        return cls(
            router_url=router_url.rstrip("/"),
            tokenizer_path=model.path,
            renderer_family=model.renderer_family or "auto",
            host=host,
            tool_call_parser=model.tool_call_parser,
            reasoning_parser=model.reasoning_parser,
            spec=config.spec.gateway,
            model_id=config.spec.agent.model_id,
            context_length=model.context_length,
            public_base_url=config.gateway_url.rstrip("/"),
            admin_token=token,
        )

    @property
    def base_url(self) -> str:
        """Where agents reach the gateway (no trailing slash)."""
        if self.public_base_url:
            return self.public_base_url.rstrip("/")
        return str(URL.build(scheme="http", host=self.host, port=self.bind_port))
