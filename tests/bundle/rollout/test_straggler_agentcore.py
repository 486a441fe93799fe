"""A straggler cut on AgentCore: the real backend stops the cut episode's runtime session.

The AgentCore backend runs as in production against real botocore clients (botocore's
Stubber answers AgentCore and validates every parameter against the service model; S3 is
moto). Two groups of one episode, a batch of one, `carryOver`: the first episode's agent
answers "processing" and never writes a result (the backend polls S3 for it), the second
answers with its rewards inline. The limiter spaces the control calls (2/s), so the
invokes reach the Stubber in start order. Once the second group fills the batch, the first
is cut: the backend's cancellation path calls StopRuntimeSession for exactly that session.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws
from tests.support.metrics import LocalSink

from agentrl.api.models import AgentCoreAgent
from agentrl.bundle.agents.agentcore import AgentCoreBackend, AgentCoreClients, make_clients
from agentrl.bundle.agents.ratelimit import TpsLimiter
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import slime_types

from .doubles import FakeGateway, runtime_config
from .slime_upstream import buffered_source, write_rows

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/math-agent-AbCdEf1234"
SPEC = AgentCoreAgent(runtimeArn=ARN, region="us-east-1", s3Bucket="rl-results")
ARGS = SimpleNamespace(rollout_batch_size=1, rollout_max_response_len=64, rollout_temperature=1.0)


class Capture:
    """A Stubber expected parameter that matches anything and keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def __eq__(self, other: object) -> bool:
        self.seen.append(other)
        return True

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def answer(doc: Any) -> dict[str, Any]:
    raw = json.dumps(doc).encode()
    body = StreamingBody(io.BytesIO(raw), len(raw))
    return {"contentType": "application/json", "statusCode": 200, "response": body}


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentCoreClients]:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        made = make_clients(SPEC, pool_size=4)
        made.s3.create_bucket(Bucket=SPEC.s3_bucket)
        # One stubbed AgentCore client for invoke and stop (production makes two).
        yield AgentCoreClients(invoke=made.control, control=made.control, s3=made.s3)


def test_a_cut_agentcore_episode_has_its_runtime_session_stopped(
    clients: AgentCoreClients, tmp_path: Path
) -> None:
    invoked, stopped = Capture(), Capture()
    backend = AgentCoreBackend(
        SPEC, exp_id="agentrl/ns/exp", pool_size=4, clients=clients, limiter=TpsLimiter(2)
    )
    gateway = FakeGateway()
    config = runtime_config(
        timeout=600,
        rolloutBatchSize=1,
        samplesPerPrompt=1,
        overSamplingBatchSize=2,
        stragglerPolicy="carryOver",
    )

    async def build() -> RolloutContext:
        return RolloutContext(gateway, backend, asyncio.Semaphore(4))

    metrics = BundleMetrics()
    runtime = RolloutRuntime(build, LocalSink(metrics))
    install_runtime(runtime, config, slime_types(prefer_plain=True))
    source = buffered_source(
        "fa3c990", write_rows(tmp_path / "rows.jsonl", [{"q": "slow"}, {"q": "fast"}]), 1
    )
    control = clients.control
    invoke_params = {
        "agentRuntimeArn": ARN,
        "runtimeSessionId": invoked,
        "payload": ANY,
        "contentType": "application/json",
        "accept": "application/json",
    }
    stop_params = {"agentRuntimeArn": ARN, "runtimeSessionId": stopped}
    stop_answer = {"runtimeSessionId": "s" * 43, "statusCode": 200}
    try:
        with Stubber(control) as stub:
            stub.add_response(
                "invoke_agent_runtime", answer({"status": "processing"}), invoke_params
            )
            stub.add_response("invoke_agent_runtime", answer({"rewards": [1.0]}), invoke_params)
            stub.add_response("stop_runtime_session", stop_answer, stop_params)
            stub.add_response("stop_runtime_session", stop_answer, stop_params)

            out = generate_rollout(ARGS, 0, source)

            stub.assert_no_pending_responses()
    finally:
        install_runtime(None)
        runtime.close()

    slow_sid, fast_sid = invoked.seen
    assert [s.session_id for g in out.samples for s in g] == [fast_sid]
    assert stopped.seen == [fast_sid, slow_sid]  # the cut one stopped after the batch filled
    assert sorted(gateway.closed) == sorted([slow_sid, fast_sid]) and not gateway.open
    assert [[s.metadata["q"] for s in g] for g in source.buffer] == [["slow"]]
