"""What every agent backend promises the rollout: run one episode, return its reward.

The rollout never talks to AgentCore or an HTTP agent directly; it hands an `AgentRequest`
to an `AgentBackend` and gets an `AgentResult` or an `AgentError` naming a failure reason
(the label of `agentrl_failed_sessions_total`). Parsing the agent's result document is pure
and shared by both backends, so they agree on what a valid result is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class AgentError(Exception):
    """An episode's agent failed; `reason` is a short metric label (agent_error, bad_result...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class AgentRequest:
    session_id: str  # also the agent-side session id (unguessable, >= 33 chars for AgentCore)
    payload: Mapping[str, Any] = field(repr=False)  # row metadata + "_rollout"; holds a token


@dataclass(frozen=True)
class AgentResult:
    reward: float
    document: Mapping[str, Any] = field(repr=False)  # the agent's whole result, for debugging


@dataclass(frozen=True)
class PoolStats:
    size: int  # configured connections
    in_use: int  # connections checked out right now


class AgentBackend(Protocol):
    async def run(self, request: AgentRequest) -> AgentResult:
        """Start the agent, wait for its result, stop it (in every case). Cancellable."""
        ...

    def pool_stats(self) -> PoolStats:
        """The backend's connection pool, for `agentrl_connection_pool_*`."""
        ...

    async def aclose(self) -> None: ...


def parse_result(document: Any) -> AgentResult:
    """An agent's result document -> reward, or AgentError.

    Accepted shape (agentcore-rl-toolkit's): `{"rewards": float | [float, ...],
    "status_code": int?, "error": str?}`; a list means per-step rewards and the last counts.
    """
    if not isinstance(document, Mapping):
        raise AgentError("bad_result", f"result is not a JSON object: {type(document).__name__}")
    status = document.get("status_code", 200)
    if document.get("error") or (isinstance(status, int) and status >= 400):
        detail = str(document.get("error") or "")[:200]
        raise AgentError("agent_error", f"agent reported failure (status {status}): {detail}")
    rewards = document.get("rewards", document.get("reward"))
    if isinstance(rewards, list):
        if not rewards:
            raise AgentError("bad_result", "result has an empty 'rewards' list")
        rewards = rewards[-1]
    if isinstance(rewards, bool) or not isinstance(rewards, int | float):
        raise AgentError("bad_result", f"result 'rewards' is not a number: {rewards!r:.80}")
    reward = float(rewards)
    if not math.isfinite(reward):
        raise AgentError("bad_result", f"result reward is not finite: {reward}")
    return AgentResult(reward=reward, document=document)


def backoff_delays(first: float, factor: float, cap: float) -> Iterator[float]:
    """0.5, 0.75, 1.125, ... capped: how often to look for a result nobody pushed to us."""
    delay = first
    while True:
        yield delay
        delay = min(cap, delay * factor)
