"""Agent backends: where an episode's agent runs (AgentCore runtime or any HTTP agent).

`build_backend` picks the one the experiment's spec names; everything else in the rollout
sees only the `AgentBackend` protocol.
"""

from __future__ import annotations

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.agents.base import (
    AgentBackend,
    AgentError,
    AgentRequest,
    AgentResult,
    PoolStats,
    parse_result,
)
from agentrl.bundle.session import CallbackRouting

__all__ = [
    "AgentBackend",
    "AgentError",
    "AgentRequest",
    "AgentResult",
    "PoolStats",
    "build_backend",
    "parse_result",
]


async def build_backend(
    config: RuntimeConfig,
    *,
    callbacks: CallbackRouting | None = None,
    listen_host: str = "0.0.0.0",
    advertise_host: str = "127.0.0.1",
) -> AgentBackend:
    """The experiment's backend, ready to run episodes (HTTP: its callback listener is up).

    HTTP agents post results to the gateway, which `callbacks` (the gateway, or its admin
    client) is told to relay to the listener, under the URL it answers with (how agents
    reach the gateway). Without `callbacks` they post to the listener directly, which only
    agents that reach this node can do."""
    agent = config.spec.agent
    pool_size = agent.effective_max_pool_connections
    if agent.agent_core is not None and agent.http is None:
        from agentrl.bundle.agents.agentcore import AgentCoreBackend, experiment_id

        return AgentCoreBackend(
            agent.agent_core,
            exp_id=experiment_id(config.namespace, config.experiment),
            pool_size=pool_size,
        )
    if agent.http is not None and agent.agent_core is None:
        from agentrl.bundle.agents.http import CallbackListener, HttpAgentBackend, header_env_values

        headers = header_env_values(config.http_header_envs)
        listener = CallbackListener(listen_host, 0, advertise_host)
        await listener.start()
        base = listener.url
        if callbacks is not None:
            try:
                base = await callbacks.relay_callbacks_to(listener.url)
            except BaseException:
                await listener.stop()
                raise
        return HttpAgentBackend(
            agent.http,
            headers=headers,
            listener=listener,
            pool_size=pool_size,
            callback_base=base,
        )
    raise ValueError(
        "spec.agent: set exactly one of agentCore or http (the runtime config names "
        f"{'both' if agent.agent_core and agent.http else 'neither'})"
    )
