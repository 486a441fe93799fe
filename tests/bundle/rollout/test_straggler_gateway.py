"""A straggler cut through the real gateway: its engine request is aborted, nothing leaks.

The gateway runs for real in front of the protocol-level SGLang stub in slow mode (one
token an hour), reached over its admin API by `GatewayClient`; slime's own data source
(fa3c990, from the snapshot) feeds `generate_rollout`. Two groups of one episode for a
batch of one, `carryOver`: the straggler's agent asks the model and waits; the other
episode returns as soon as that request is running on the engine (without a model call of
its own, so it fails as `no_turns`: the engine is too slow for anything to finish, and
what is tested here is the straggler). Filling the batch then cuts the straggler: its
agent is cancelled, its gateway session closed, which aborts its request on the engine by
rid, and its prompt goes back to slime's buffer. Only real waits: a request reaching the
stub; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.agents.base import AgentRequest, AgentResult
from agentrl.bundle.gateway import GatewayClient, GatewayServer, GatewaySettings
from agentrl.bundle.gateway.tokenizer import load_tokenizer
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import slime_types

from .doubles import ChatAgent, runtime_config
from .slime_upstream import buffered_source, write_rows
from .test_batch_end import Cluster

ARGS = SimpleNamespace(rollout_batch_size=1, rollout_max_response_len=64, rollout_temperature=1.0)


class FastOrSlowAgent(ChatAgent):
    """`q == "slow"`: one chat call (it never finishes on the slow engine). Otherwise:
    return once the slow episode's request is running on the engine."""

    def __init__(self, engine: Any) -> None:
        super().__init__(turns=1)
        self.engine = engine
        self.cancelled: list[str] = []

    async def run(self, request: AgentRequest) -> AgentResult:
        if request.payload["q"] == "slow":
            try:
                return await super().run(request)
            except asyncio.CancelledError:
                self.cancelled.append(request.session_id)
                raise
        async with asyncio.timeout(30):
            # The stub only records requests in a list; there is no event to wait on.
            while not self.engine().requests:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        return AgentResult(reward=1.0, document={})


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Cluster, FastOrSlowAgent, BundleMetrics]]:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    config = runtime_config(
        timeout=600,
        rolloutBatchSize=1,
        samplesPerPrompt=1,
        overSamplingBatchSize=2,
        stragglerPolicy="carryOver",
    )
    cluster = Cluster()
    agent = FastOrSlowAgent(lambda: cluster.engine)
    cluster.agent = agent

    async def build() -> RolloutContext:
        vocab = len(load_tokenizer(str(checkpoint)).get_vocab())
        cluster.engine = StubEngine(vocab_size=vocab, token_delay_s=3600.0)
        cluster.router = StubRouter([await cluster.engine.start()])
        await cluster.router.start()
        settings = GatewaySettings(
            router_url=cluster.router.url,
            tokenizer_path=str(checkpoint),
            renderer_family="qwen3",
            port=0,
            admin_token="admin-secret",
        )
        cluster.gateway = GatewayServer(settings, BundleMetrics())
        await cluster.gateway.start()
        client = GatewayClient(f"http://127.0.0.1:{cluster.gateway.admin_port}", "admin-secret")
        return RolloutContext(client, agent, asyncio.Semaphore(4))

    metrics = BundleMetrics()
    runtime = RolloutRuntime(build, LocalSink(metrics))
    install_runtime(runtime, config, slime_types(prefer_plain=True))
    try:
        yield cluster, agent, metrics
    finally:
        install_runtime(None)
        runtime.call(cluster.stop())
        runtime.close()


def test_a_cut_straggler_has_its_engine_request_aborted_and_its_prompt_returned(
    rig: tuple[Cluster, FastOrSlowAgent, BundleMetrics], tmp_path: Path
) -> None:
    cluster, agent, metrics = rig
    rows = write_rows(tmp_path / "rows.jsonl", [{"q": "slow"}, {"q": "fast"}])
    source = buffered_source("fa3c990", rows, 1)

    out = generate_rollout(ARGS, 0, source)

    assert [[s.metadata["q"] for s in g] for g in out.samples] == [["fast"]]
    engine, gateway = cluster.engine, cluster.gateway
    assert engine is not None and gateway is not None
    (sent,) = engine.requests
    assert sent["rid"] in engine.aborted  # by rid, when the episode closed its session
    assert engine._live == {}  # nothing of the step still runs on the engine
    assert len(agent.cancelled) == 1 and len(gateway.store) == 0  # no session leaked
    assert [[s.metadata["q"] for s in g] for g in source.buffer] == [["slow"]]
    value = metrics.registry.get_sample_value(
        "agentrl_aborted_episodes_total", {"split": "train", "reason": "batch_full"}
    )
    assert value == 1.0
    assert metrics.registry.get_sample_value("agentrl_groups_total", {"outcome": "carried_over"})
