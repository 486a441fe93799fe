"""The model gateway: agents' OpenAI/Anthropic calls -> SGLang /generate, with exact token traces.

`GatewayServer` runs in the hub actor on the head pod; the rollout function talks to it with
`GatewayClient`. Both implement `agentrl.bundle.session.GatewaySessions`. See docs/gateway.md.
"""

from agentrl.bundle.gateway.client import GatewayClient
from agentrl.bundle.gateway.service import GatewayServer
from agentrl.bundle.gateway.settings import GatewaySettings

__all__ = ["GatewayClient", "GatewayServer", "GatewaySettings"]
