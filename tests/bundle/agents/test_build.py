"""`build_backend` picks the spec's backend and sizes its pool from the spec."""

from __future__ import annotations

import pytest

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.agents import build_backend
from agentrl.bundle.agents.agentcore import AgentCoreBackend
from agentrl.bundle.agents.http import HttpAgentBackend

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/agent-AbCd"


def config(agent: dict[str, object], header_envs: dict[str, str] | None = None) -> RuntimeConfig:
    return RuntimeConfig.model_validate(
        {
            "experiment": "exp",
            "namespace": "ns",
            "bundleVersion": "t",
            "gatewayUrl": "http://gw",
            "httpHeaderEnvs": header_envs or {},
            "spec": {
                "model": {"path": "/m", "type": "qwen2.5-0.5B"},
                "data": {"train": "/d.jsonl"},
                "agent": agent,
                "grpo": {"numRollouts": 1},
            },
        }
    )


async def test_agentcore_backend_with_the_pool_derived_from_max_concurrent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    agent = {
        "agentCore": {"runtimeArn": ARN, "region": "us-east-1", "s3Bucket": "bkt"},
        "maxConcurrent": 32,
    }
    backend = await build_backend(config(agent))
    assert isinstance(backend, AgentCoreBackend)
    assert backend.pool_stats().size == 32
    assert backend.exp_id == "agentrl/ns/exp"  # the toolkit's exp_id: namespace/name
    await backend.aclose()


async def test_http_backend_reads_header_values_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = {"http": {"url": "http://agent:8080/run"}, "maxPoolConnections": 8}
    envs = {"X-Api-Key": "AGENTRL_HTTP_HEADER_0"}
    with pytest.raises(ValueError, match="AGENTRL_HTTP_HEADER_0"):
        await build_backend(config(agent, envs), listen_host="127.0.0.1")
    monkeypatch.setenv("AGENTRL_HTTP_HEADER_0", "k")
    backend = await build_backend(config(agent, envs), listen_host="127.0.0.1")
    assert isinstance(backend, HttpAgentBackend) and backend.pool_stats().size == 8
    await backend.aclose()


class Relay:
    """The gateway's admin client, as far as the backend's callback relay needs it."""

    def __init__(self) -> None:
        self.targets: list[str] = []

    async def relay_callbacks_to(self, target: str) -> str:
        self.targets.append(target)
        return "http://gw/agentrl/callback"


async def test_the_pods_and_the_rehearsal_build_one_rollout_context() -> None:
    """`build_context` is the rollout's one builder of its backend and concurrency, and
    `agentrl rehearse` calls it rather than a copy of it."""
    from agentrl.bundle.rehearse import run
    from agentrl.bundle.rollout.runtime import build_context

    assert run.build_context is build_context
    relay = Relay()
    agent = {"http": {"url": "http://agent:8080/run"}, "maxConcurrent": 3}
    ctx = await build_context(
        config(agent), relay, listen_host="127.0.0.1", advertise_host="127.0.0.1"
    )
    try:
        assert ctx.sessions is relay and isinstance(ctx.backend, HttpAgentBackend)
        assert ctx.semaphore._value == 3  # one maxConcurrent for train and eval
        assert relay.targets and relay.targets[0].startswith("http://127.0.0.1:")
    finally:
        await ctx.backend.aclose()
