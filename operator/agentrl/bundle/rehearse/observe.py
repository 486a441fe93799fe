"""What a rehearsal sees of each episode, without changing what the episode does.

The episode runs exactly as in the pods (`rollout.episode.run_episode`); two thin wrappers
around the parts it talks to take notes on the way:
- `ObservedSessions` wraps the rollout's `GatewayClient` (the gateway's admin API, as in
  the pods). When an episode closes its session, it first reads the session's record in
  the in-process gateway: what the agent's calls on its URL were answered, why turns were
  refused, and the turns themselves (a failed episode never fetches them).
- `ObservedBackend` wraps the agent backend: the `_rollout.base_url` the agent was handed,
  the result document as received (also when it is refused: a reward sent as a string),
  and how it arrived (HTTP callback or poll, AgentCore S3 or inline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.bundle.agents.base import (
    AgentBackend,
    AgentError,
    AgentRequest,
    AgentResult,
    PoolStats,
)
from agentrl.bundle.gateway.session_store import SessionStore
from agentrl.bundle.session import (
    ContextFullCalls,
    GatewaySessions,
    QuiesceReport,
    SessionError,
    SessionHandle,
)
from agentrl.bundle.traces import Turn


@dataclass
class Seen:
    """One episode, as the rehearsal observed it."""

    base_url: str = ""  # what `_rollout.base_url` said
    answers: dict[int, int] = field(default_factory=dict)  # gateway: HTTP status -> calls
    refusals: dict[str, int] = field(default_factory=dict)  # gateway: failed turns by code
    last_refusal: str = ""
    context_full: int = 0  # gateway: turns answered `length` because the context was full
    turns: list[Turn] = field(default_factory=list)
    document: Mapping[str, Any] | None = None  # the agent's result document, if one came
    via: str = ""  # how the result arrived ("" when none did)

    @property
    def calls(self) -> int:
        """Requests the agent sent to its session URL (with the right id), any outcome."""
        return sum(self.answers.values())


class Observations:
    """Session id -> `Seen`, filled by both wrappers."""

    def __init__(self) -> None:
        self.by_sid: dict[str, Seen] = {}

    def __getitem__(self, sid: str) -> Seen:
        return self.by_sid.setdefault(sid, Seen())


class ObservedSessions:
    """`GatewaySessions` over the admin API, noting each session's record before it closes."""

    def __init__(self, inner: GatewaySessions, store: SessionStore, seen: Observations) -> None:
        self._inner = inner
        self._store = store
        self._seen = seen

    async def create_session(
        self, session_id: str, sampling_params: Mapping[str, Any]
    ) -> SessionHandle:
        return await self._inner.create_session(session_id, sampling_params)

    async def get_turns(self, session_id: str) -> Sequence[Turn]:
        return await self._inner.get_turns(session_id)

    async def context_full(self, session_id: str) -> ContextFullCalls:
        return await self._inner.context_full(session_id)

    async def close_session(self, session_id: str) -> None:
        try:
            session = self._store.get(session_id)
        except SessionError:
            pass  # never opened (the gateway refused it), or closed already
        else:
            seen = self._seen[session_id]
            seen.answers = dict(session.answers)
            seen.refusals = dict(session.refusals)
            seen.last_refusal = session.last_refusal
            seen.context_full = session.context_full
            seen.turns = list(session.turns)
        await self._inner.close_session(session_id)

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        return await self._inner.quiesce_engines(timeout_s)


class ObservedBackend:
    """The experiment's agent backend, noting what each episode's agent got and gave."""

    def __init__(self, inner: AgentBackend, seen: Observations) -> None:
        self.inner = inner
        self._seen = seen

    async def run(self, request: AgentRequest) -> AgentResult:
        seen = self._seen[request.session_id]
        rollout = request.payload.get("_rollout")
        if isinstance(rollout, Mapping):
            seen.base_url = str(rollout.get("base_url", ""))
        try:
            result = await self.inner.run(request)
        except AgentError as exc:
            seen.document, seen.via = exc.document, exc.via
            raise
        seen.document, seen.via = result.document, result.via
        return result

    async def stop(self, session_id: str) -> None:
        await self.inner.stop(session_id)

    def pool_stats(self) -> PoolStats:
        return self.inner.pool_stats()

    async def aclose(self) -> None:
        await self.inner.aclose()
