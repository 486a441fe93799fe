"""The seam between the rollout function and the model gateway.

An episode opens a gateway session, hands its URL and bearer token to the agent, reads the
session's turns back once the agent is done, and closes it in every case; a batch ends
only once the model engines are idle. The rollout side
depends only on this protocol; the gateway implements it in process and over HTTP, and
tests use a double that speaks it.

HTTP agents post their results through the gateway too (`callback_url`): it is what agents
can reach, through its Service or `spec.gateway.publicUrl`, and it relays each result to
the listener the rollout registered (`CallbackRouting`).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentrl.api.constants import CALLBACK_PATH
from agentrl.bundle.traces import Turn


def secret_matches(presented: str | None, expected: str) -> bool:
    """Whether a presented token or `Authorization` header is `expected`, compared in
    constant time so it cannot be guessed byte by byte. Tokens are ASCII; a header with other
    bytes (undecodable ones arrive as surrogates, which cannot be encoded) is wrong, not an
    error."""
    return (
        presented is not None
        and presented.isascii()
        and hmac.compare_digest(presented.encode(), expected.encode())
    )


class SessionError(Exception):
    """The gateway refused or lost a session (duplicate id, unknown id, gateway down)."""


@dataclass(frozen=True)
class SessionHandle:
    session_id: str
    base_url: str  # OpenAI-style base URL for the agent, ending in /v1
    token: str  # bearer token the agent must present; never logged

    def __repr__(self) -> str:  # keep the token out of logs and tracebacks
        return f"SessionHandle(session_id={self.session_id!r}, base_url={self.base_url!r})"


@dataclass(frozen=True)
class QuiesceReport:
    """The engines at a batch's end: idle means nothing of the rollout's can still run there."""

    idle: bool
    in_flight: int  # engine calls the gateway still waits for
    engine_requests: int | None  # running + queued, summed over the engines; None: not reported
    workers: int  # engines aborted on


# The limits a full context may have met (`ContextFullCalls.limit`, the admin API's `limit`).
FullLimit = Literal["context", "kv_cache"]
CONTEXT_LIMIT: FullLimit = "context"
KV_CACHE_LIMIT: FullLimit = "kv_cache"
FULL_LIMITS: tuple[FullLimit, ...] = (CONTEXT_LIMIT, KV_CACHE_LIMIT)


@dataclass(frozen=True)
class ContextFullCalls:
    """A session's model calls whose prompt alone filled the model's context: each was
    answered with finish reason `length` and nothing sampled (in the trace, a turn with
    finish reason `traces.CONTEXT_FULL`, no completion)."""

    calls: int = 0
    prompt_tokens: int = 0  # the longest such prompt
    context_length: int = 0
    # Which limit `context_length` is: the model's context, or the engine's KV cache where
    # that holds less; None where the gateway could not tell (it knew no context), or an
    # older gateway that does not say.
    limit: FullLimit | None = None


class GatewaySessions(Protocol):
    async def create_session(
        self, session_id: str, sampling_params: Mapping[str, Any]
    ) -> SessionHandle:
        """Open a session; raises SessionError if the id is already in use."""
        ...

    async def get_turns(self, session_id: str) -> Sequence[Turn]:
        """The session's turns in the order they were made, a call refused for a full
        context among them as a `traces.CONTEXT_FULL` turn (nothing sampled)."""
        ...

    async def context_full(self, session_id: str) -> ContextFullCalls:
        """The session's calls that found the context full (read before closing it): an
        episode with no turn tells the user why."""
        ...

    async def close_session(self, session_id: str) -> None:
        """Close the session, aborting its in-flight requests; idempotent."""
        ...

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        """Batch end, no episode live: abort everything still running on the model engines
        and wait (at most `timeout_s`) until they are idle. Closing a session only queues
        aborts, and an abort that reaches an engine before its request is a no-op."""
        ...


def callback_url(gateway_url: str, session_id: str) -> str:
    """Where an HTTP agent posts the result of episode `session_id`: the gateway's URL as
    agents reach it (`RuntimeConfig.gateway_url`: `spec.gateway.publicUrl`, else the
    in-cluster Service), on the Service's port, whatever node the rollout runs on."""
    return f"{gateway_url.rstrip('/')}{CALLBACK_PATH}/{session_id}"


class CallbackRouting(Protocol):
    async def relay_callbacks_to(self, target: str) -> str:
        """Relay agents' result callbacks to `target` (`http://<host>:<port>`, the rollout's
        listener) from now on; the listener checks each session's callback token. Returns
        the gateway's URL as agents reach it, the base of `callback_url`."""
        ...
