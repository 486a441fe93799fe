"""The model gateway: agents' OpenAI/Anthropic calls -> SGLang /generate, with exact token traces.

`GatewayServer` runs in the hub actor on the head pod; the rollout function talks to it with
`GatewayClient`. Both implement `agentrl.bundle.session.GatewaySessions`. See docs/gateway.md.

The names below load on first use, so a submodule (the render worker process, a pure
parser) can be imported without the server, aiohttp and the tokenizer stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.bundle.gateway.client import GatewayClient
    from agentrl.bundle.gateway.server import GatewayServer
    from agentrl.bundle.gateway.settings import GatewaySettings

__all__ = ["GatewayClient", "GatewayServer", "GatewaySettings"]
_HOMES = {
    "GatewayClient": "agentrl.bundle.gateway.client",
    "GatewayServer": "agentrl.bundle.gateway.server",
    "GatewaySettings": "agentrl.bundle.gateway.settings",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
