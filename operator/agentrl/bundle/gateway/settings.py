"""How the gateway is configured, and how that follows from the experiment's runtime config.

The hub on the head pod builds `GatewaySettings` from the `RuntimeConfig` the operator wrote
plus the address of slime's router (known only once slime has started its engines); tests
and the benchmark build it directly.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Literal

from agentrl.api.constants import GATEWAY_PORT_DEFAULT
from agentrl.api.runtime import RuntimeConfig

LogLevel = Literal["debug", "info", "warning", "error"]


@dataclass(frozen=True)
class GatewaySettings:
    router_url: str  # slime's router (or one SGLang engine): /generate, /workers
    tokenizer_path: str  # HF checkpoint dir (tokenizer.json) or hub id
    renderer_family: str = "auto"  # a `renderers` family name ("qwen3", "glm-4.5", ...)
    host: str = "127.0.0.1"
    port: int = GATEWAY_PORT_DEFAULT  # 0 picks a free port (tests)
    tool_call_parser: str | None = None  # only used by the "default" (chat-template) family
    reasoning_parser: str | None = None  # idem
    cumulative_token_mode: bool = False
    log_level: LogLevel = "warning"
    max_in_flight: int = 1024  # model requests in flight before new ones get 429
    public_base_url: str | None = None  # how agents reach us; defaults to http://host:port
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    request_timeout_s: float = 900.0  # one engine call; on expiry it is aborted on every worker
    model_name: str = "agentrl"  # the model id echoed to agents
    stream_keepalive_s: float = 10.0  # SSE comment interval while a streamed turn runs

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError("GatewaySettings.max_in_flight must be >= 1")
        if self.request_timeout_s <= 0:
            raise ValueError("GatewaySettings.request_timeout_s must be > 0")
        if not self.router_url.startswith(("http://", "https://")):
            raise ValueError(
                f"GatewaySettings.router_url must be an http(s) URL: {self.router_url!r}"
            )

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
        gw = config.spec.gateway
        token = admin_token if admin_token is not None else secrets.token_urlsafe(32)
        return cls(
            router_url=router_url.rstrip("/"),
            tokenizer_path=model.path,
            renderer_family=model.renderer_family or "auto",
            host=host,
            port=gw.port,
            tool_call_parser=model.tool_call_parser,
            reasoning_parser=model.reasoning_parser,
            cumulative_token_mode=gw.cumulative_token_mode,
            log_level=gw.log_level,
            max_in_flight=gw.max_in_flight,
            public_base_url=config.gateway_url.rstrip("/"),
            admin_token=token,
        )

    @property
    def base_url(self) -> str:
        """Where agents reach the gateway (no trailing slash)."""
        if self.public_base_url:
            return self.public_base_url.rstrip("/")
        return f"http://{self.host}:{self.port}"
