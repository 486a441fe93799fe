"""An episode whose deadline fires while its invoke is still in flight (a cold start).

Cancelling the episode cannot stop the pool thread that runs the blocking boto3 invoke; the
episode's stop goes out at once and, on a cold start, can reach AgentCore before the
invoke does: no session yet (ResourceNotFoundException, "nothing to free"), and the invoke
then starts one that would run, billed, until AgentCore's idle timeout. The fake client
below keeps that order: its invoke opens the session only when it returns, and its stop
refuses an unknown session as AgentCore does."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import botocore.exceptions

from agentrl.api.models import AgentCoreAgent
from agentrl.bundle.agents.agentcore import AgentCoreBackend, AgentCoreClients
from agentrl.bundle.agents.ratelimit import TpsLimiter
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec, run_episode

from .test_agentcore import NoSessions

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/math-agent-AbCdEf1234"
SPEC = AgentCoreAgent(runtimeArn=ARN, region="us-east-1", s3Bucket="rl-results")
GUARD_S = 10.0  # wall clock for a thread to get somewhere; never reached when it works


class ColdStartAgentCore:
    """invoke_agent_runtime blocks until `warm` is set, then the session exists (live)."""

    def __init__(self) -> None:
        self.invoking = threading.Event()
        self.warm = threading.Event()
        self.live: set[str] = set()
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def invoke_agent_runtime(self, *, runtimeSessionId: str, **_: Any) -> dict[str, Any]:
        self.invoking.set()
        assert self.warm.wait(GUARD_S)
        with self.lock:
            self.live.add(runtimeSessionId)
            self.calls.append("invoke returned")
        return {}

    def stop_runtime_session(self, *, runtimeSessionId: str, **_: Any) -> dict[str, Any]:
        with self.lock:
            if runtimeSessionId not in self.live:
                self.calls.append("stop: not found")
                error = {"Error": {"Code": "ResourceNotFoundException", "Message": "no session"}}
                raise botocore.exceptions.ClientError(error, "StopRuntimeSession")  # type: ignore[arg-type]
            self.live.discard(runtimeSessionId)
            self.calls.append("stop: stopped")
        return {}


async def test_a_session_whose_invoke_outlives_the_episode_is_stopped_when_it_returns() -> None:
    agentcore = ColdStartAgentCore()
    be = AgentCoreBackend(
        SPEC,
        exp_id="p",
        pool_size=4,
        clients=AgentCoreClients(invoke=agentcore, control=agentcore, s3=None),
        limiter=TpsLimiter(1000.0),
    )
    sessions = NoSessions()
    try:
        outcome = await run_episode(
            EpisodeInput("p", {"q": 1}, None, 0, 0),
            EpisodeSpec({"max_new_tokens": 8}, 8, 0.2, "m"),  # the deadline hits the cold start
            0,
            sessions,
            be,
        )
        assert outcome.failure == "timeout"
        assert agentcore.calls == ["stop: not found"]  # the first stop found nothing to free
    finally:
        agentcore.warm.set()  # the cold start ends: AgentCore now has the session
        await asyncio.wait_for(be.aclose(), GUARD_S)
    assert agentcore.calls == ["stop: not found", "invoke returned", "stop: stopped"]
    assert agentcore.live == set()  # nothing left running until the idle timeout
