"""slime's rollout function: `--rollout-function-path agentrl.bundle.rollout.generate_rollout`.

Each call runs one batch of agent episodes (train) or every eval set (eval) on the
process's rollout runtime, built on the first call: the hub actor on the head pod
(metrics, gateway), a `GatewayClient` to the gateway, the agent backend the spec names,
and one `maxConcurrent` semaphore shared by train and eval. slime's types are touched only
when the batch is handed back (`types.slime_types`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.driver import eval_batch, train_batch
from agentrl.bundle.rollout.inputs import load_runtime_config
from agentrl.bundle.rollout.router import router_url
from agentrl.bundle.rollout.runtime import MetricsSink, RolloutRuntime, build_context
from agentrl.bundle.rollout.types import SlimeTypes, slime_types

__all__ = ["generate_rollout", "install_runtime", "shutdown_runtime"]

# The interface the HTTP agents' callback listener binds (all of them by default; tests
# bind loopback only). The gateway relays the agents' callbacks to it.
ENV_BIND_HOST = "AGENTRL_BIND_HOST"

log = logging.getLogger("agentrl.rollout")

_lock = threading.Lock()
# The process's runtime (slot 0), built on the first call; a list, not a global rebind.
_state: list[tuple[RolloutRuntime, RuntimeConfig, SlimeTypes]] = []


def install_runtime(
    runtime: RolloutRuntime | None,
    config: RuntimeConfig | None = None,
    types: SlimeTypes | None = None,
) -> None:
    """Use this runtime for the next calls (tests, benchmarks); None forgets the current one."""
    with _lock:
        _state.clear()
        if runtime is not None and config is not None:
            _state.append((runtime, config, types or slime_types()))


def shutdown_runtime() -> None:
    """Close the process's runtime (backend pools, listener, gateway client) and forget it."""
    with _lock:
        states = list(_state)
        _state.clear()
    for runtime, _, _ in states:
        runtime.close()


def _production_runtime(args: Any) -> tuple[RolloutRuntime, RuntimeConfig, SlimeTypes]:
    import ray

    from agentrl.bundle.gateway import GatewayClient
    from agentrl.bundle.hub import HubSink, ensure_hub, node_ip

    config = load_runtime_config()
    hub = ensure_hub(config)
    admin_url, admin_token = ray.get(hub.start_gateway.remote(router_url(args)))
    sink: MetricsSink = HubSink(hub)

    async def build() -> RolloutContext:
        listen = os.environ.get(ENV_BIND_HOST, "0.0.0.0")
        # Agents call back to this node: its address, unless bound to one interface.
        advertise = node_ip() if listen == "0.0.0.0" else listen
        # HTTP agents post results to the gateway, which relays them to this listener.
        sessions = GatewayClient(admin_url, admin_token)
        return await build_context(config, sessions, listen_host=listen, advertise_host=advertise)

    return RolloutRuntime(build, sink), config, slime_types()


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's contract: train -> RolloutFnTrainOutput, eval -> RolloutFnEvalOutput."""
    with _lock:
        if not _state:
            _state.append(_production_runtime(args))
        runtime, config, types = _state[0]
    if evaluation:
        return runtime.call(eval_batch(runtime, config, rollout_id, types))
    return runtime.call(train_batch(runtime, config, args, rollout_id, data_source, types=types))
