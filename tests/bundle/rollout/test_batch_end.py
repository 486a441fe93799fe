"""A batch ends only once the model engines are idle (slime offloads or updates them next).

End to end through `generate_rollout`: the real gateway in front of the protocol-level
SGLang stub in slow mode, reached over the admin API by `GatewayClient`, and an agent that
makes one chat call which never finishes before the episode's 1 s deadline. The stub is set
so that aborts by request id miss, as they do in SGLang when the abort arrives before the
request (a no-op there): only the batch end's abort-all can stop the generation. The
deadline is the only wall-clock wait (the episode must time out for real); nothing asserts
on timing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway import GatewayClient, GatewayServer, GatewaySettings
from agentrl.bundle.gateway.tokenizer import load_tokenizer
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.driver import QUIESCE_TIMEOUT_S, eval_batch, train_batch
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import slime_types

from .doubles import ChatAgent, FakeGateway, runtime_config, stub_runtime

ARGS = SimpleNamespace(rollout_batch_size=1, rollout_max_response_len=64, rollout_temperature=1.0)


@dataclass
class Cluster:
    engine: StubEngine | None = None
    router: StubRouter | None = None
    gateway: GatewayServer | None = None
    agent: ChatAgent = field(default_factory=ChatAgent)

    async def stop(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
        if self.router is not None:
            await self.router.stop()
        if self.engine is not None:
            await self.engine.stop()


class Source:
    """slime's data source reduced to what the rollout reads: one group of one sample."""

    def get_samples(self, n: int) -> list[list[Any]]:
        sample = SimpleNamespace(prompt="p", metadata={"q": "task 1"}, group_index=0, index=0)
        return [[sample] for _ in range(n)]


@pytest.fixture
def rollout(tmp_path: Path) -> Iterator[tuple[RolloutRuntime, Cluster]]:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"prompt": "q", "metadata": {"q": "task 2"}}) + "\n")
    config = runtime_config(
        timeout=1, eval_sets=[{"name": "e", "path": str(eval_file), "samplesPerPrompt": 1}]
    )
    cluster = Cluster()

    async def build() -> RolloutContext:  # runs on the runtime's own loop, like production
        vocab = len(load_tokenizer(str(checkpoint)).get_vocab())
        # Slow mode: one token an hour, so the episode's request is still running at its
        # deadline; and aborts by rid miss, so only an abort-all can stop it.
        cluster.engine = StubEngine(vocab_size=vocab, token_delay_s=3600.0, miss_rid_aborts=True)
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
        return RolloutContext(client, cluster.agent, asyncio.Semaphore(4))

    runtime = RolloutRuntime(build, LocalSink(BundleMetrics()))
    install_runtime(runtime, config, slime_types(prefer_plain=True))
    try:
        yield runtime, cluster
    finally:
        install_runtime(None)
        runtime.call(cluster.stop())
        runtime.close()


@pytest.mark.parametrize("evaluation", [False, True])
def test_a_timed_out_episodes_request_is_aborted_and_drained_before_the_batch_returns(
    rollout: tuple[RolloutRuntime, Cluster], evaluation: bool
) -> None:
    _, cluster = rollout
    out = generate_rollout(ARGS, 0, Source(), evaluation=evaluation)

    engine = cluster.engine
    assert engine is not None and cluster.gateway is not None
    if evaluation:  # a failed eval episode is counted, not averaged in (its set: no entry)
        assert "e" not in out.data and out.metrics["eval/e/failed_ratio"] == 1.0
    else:
        failed = [s for g in out.samples for s in g]
        assert [s.metadata["episode_error"] for s in failed] == ["timeout"]
    (sent,) = engine.requests
    rid = sent["rid"]
    # The request was aborted, and nothing runs on the engine once the batch is back.
    assert rid in engine.aborted and "*" in engine.aborted
    assert engine._live == {} and rid in engine.sampled  # it finished (as aborted) there
    assert cluster.gateway._engine is not None and cluster.gateway._engine.in_flight == 0


async def test_train_and_eval_batches_settle_the_engines_after_every_session_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each batch asks the gateway once, after the last session closed; if the engines do
    not go idle in time, one warning says so and the batch is still returned."""
    gateway = FakeGateway()
    config = runtime_config(eval_sets=[])
    types = slime_types(prefer_plain=True)
    with stub_runtime(gateway) as runtime:
        await train_batch(runtime, config, ARGS, 3, Source(), types=types)
        assert gateway.quiesced == [QUIESCE_TIMEOUT_S]
        assert gateway.open_at_quiesce == [0]  # every episode had closed its session
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

        gateway.engines_idle = False
        with caplog.at_level(logging.WARNING, logger="agentrl.rollout"):
            await train_batch(runtime, config, ARGS, 4, Source(), types=types)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "Rollout 4: engines not idle" in warnings[0]
        assert "engines report 3 request(s) on 2 worker(s)" in warnings[0]


async def test_an_eval_batch_settles_the_engines_once_after_all_its_sets(tmp_path: Path) -> None:
    rows = tmp_path / "eval.jsonl"
    rows.write_text(json.dumps({"prompt": "q", "metadata": {"behavior": "ok"}}) + "\n")
    sets = [{"name": n, "path": str(rows), "samplesPerPrompt": 2} for n in ("a", "b")]
    gateway = FakeGateway()
    with stub_runtime(gateway) as runtime:
        out = await eval_batch(
            runtime, runtime_config(eval_sets=sets), 5, slime_types(prefer_plain=True)
        )
    assert set(out.data) == {"a", "b"}
    assert gateway.quiesced == [QUIESCE_TIMEOUT_S] and gateway.open_at_quiesce == [0]


async def test_eval_samples_carry_the_policy_of_the_weights_they_ran_on(tmp_path: Path) -> None:
    """slime's train.py evaluates rollout 0 before training (the weights train step 0 samples
    with), and rollout N after step N trained and pushed its weights (those of step N + 1).
    Eval samples carried N there, one behind the weights they ran on, as the
    --save-debug-rollout-data dumps showed. The calls come here in train.py's order."""
    rows = tmp_path / "eval.jsonl"
    rows.write_text(json.dumps({"prompt": "q", "metadata": {"behavior": "ok"}}) + "\n")
    sets = [{"name": "a", "path": str(rows), "samplesPerPrompt": 2}]
    config = runtime_config(eval_sets=sets)
    types = slime_types(prefer_plain=True)
    seen: list[tuple[str, int, set[int]]] = []
    with stub_runtime(FakeGateway()) as runtime:

        async def evaluate(rollout_id: int) -> None:
            out = await eval_batch(runtime, config, rollout_id, types)
            versions = {s.metadata["policy_version"] for s in out.data["a"]["samples"]}
            seen.append(("eval", rollout_id, versions))

        # --eval-interval 1: eval(0) before training, then after every step.
        for rollout_id in range(2):
            if rollout_id == 0:
                await evaluate(0)
            out = await train_batch(runtime, config, ARGS, rollout_id, Source(), types=types)
            samples = [s for g in out.samples for s in g]
            seen.append(("train", rollout_id, {s.metadata["policy_version"] for s in samples}))
            await evaluate(rollout_id)
    assert seen == [("eval", 0, {0}), ("train", 0, {0}), ("eval", 0, {1}),
                    ("train", 1, {1}), ("eval", 1, {2})]  # fmt: skip
