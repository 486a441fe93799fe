"""What every agent backend promises the rollout: run one episode, return its reward.

The rollout never talks to AgentCore or an HTTP agent directly; it hands an `AgentRequest`
to an `AgentBackend` and gets an `AgentResult` or an `AgentError` naming a failure reason
(the label of `agentrl_failed_sessions_total`). Parsing the agent's result document is pure
and shared by both backends, so they agree on what a valid result is: the document that
agentcore-rl-toolkit's `@rollout_entrypoint` saves (docs/agents.md).

`poll_delays` is hand-written on purpose, next to stamina's retries elsewhere: waiting for
a result nobody pushes to us is a poll, not a retry of a failure, and stamina would log a
WARNING and count `stamina_retries_total` for every look (a thousand lines per step at 100
episodes). It follows the same rule as stamina's backoff: exponential, capped, jittered.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrl.bundle.failures import AGENT_ERROR, BAD_RESULT
from agentrl.bundle.redact import redact_values


class AgentError(Exception):
    """An episode's agent failed; `reason` is a short metric label (agent_error, bad_result...).
    `document` is the result document the agent sent, when it sent one (a rehearsal shows
    what was received, e.g. a reward written as a string)."""

    def __init__(
        self, reason: str, message: str, document: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.document = document
        self.via = ""  # how a refused document arrived, as AgentResult.via ("": none came)


@dataclass(frozen=True)
class AgentRequest:
    session_id: str  # also the agent-side session id (unguessable, >= 33 chars for AgentCore)
    payload: Mapping[str, Any] = field(repr=False)  # row metadata + "_rollout"; holds a token


@dataclass(frozen=True)
class AgentResult:
    reward: float
    document: Mapping[str, Any] = field(repr=False)  # the agent's whole result, for debugging
    # How the result reached us: HTTP "callback" or "poll" (the backstop); AgentCore "s3"
    # or "inline" (the invoke's answer). The rehearsal reports callbacks that never came.
    via: str = ""


@dataclass(frozen=True)
class PoolStats:
    size: int  # configured connections
    in_use: int  # connections checked out right now


class AgentBackend(Protocol):
    async def run(self, request: AgentRequest) -> AgentResult:
        """Start the agent, wait for its result, stop it. Cancelling the task stops the
        agent too (the stop is shielded, so it completes after the cancellation)."""
        ...

    async def stop(self, session_id: str) -> None:
        """Stop the episode's agent (AgentCore: StopRuntimeSession; HTTP: DELETE).
        Idempotent, best effort, never raises: an unknown or finished session is fine."""
        ...

    def pool_stats(self) -> PoolStats:
        """The backend's connection pool, for `agentrl_connection_pool_*`."""
        ...

    async def aclose(self) -> None: ...


# The part of a failed agent's own report that goes into the failure log line.
_DETAIL_CHARS = 300
# The episode's tokens an agent is handed in `_rollout`, which its report may quote.
_PAYLOAD_SECRETS = ("api_key", "callback_token")


def payload_secrets(payload: Mapping[str, Any]) -> tuple[str, ...]:
    """The secret values of an episode's payload (its gateway session's and callback's
    tokens), to redact from whatever the agent says back."""
    rollout = payload.get("_rollout")
    if not isinstance(rollout, Mapping):
        return ()
    return tuple(v for k in _PAYLOAD_SECRETS if isinstance(v := rollout.get(k), str) and v)


def parse_result(document: Any, secrets: Collection[str] = ()) -> AgentResult:
    """An agent's result document -> reward, or AgentError.

    `secrets` (the episode's tokens) are taken out of the agent's text before it is cut
    to length: a token the cut ran through would no longer match, and leave its start.

    The shape agentcore-rl-toolkit's `@rollout_entrypoint` saves: the handler's dict plus
    `status_code` (200 unless the handler set another) and `stop_reason`; a handler that
    raised is saved as `{"status_code": 500, "stop_reason": str(exc), "traceback": ...}`.
    The reward is `rewards` (a number, or per-step numbers whose last one counts) or
    `reward`. A `status_code` other than 200, or a non-empty `error` (agentrl's HTTP
    agents), is the agent reporting failure, and any reward next to it describes nothing.
    """
    if not isinstance(document, Mapping):
        raise AgentError(BAD_RESULT, f"result is not a JSON object: {type(document).__name__}")
    failure = reported_failure(document, secrets)
    if failure is not None:
        raise AgentError(AGENT_ERROR, failure, document)
    rewards = received_reward(document)
    if rewards is None:
        raise AgentError(
            BAD_RESULT,
            "result has no 'rewards' (return {'rewards': <number>} from the agent)",
            document,
        )
    if isinstance(rewards, list):
        if not rewards:
            raise AgentError(BAD_RESULT, "result has an empty 'rewards' list", document)
        rewards = rewards[-1]
    if isinstance(rewards, bool) or not isinstance(rewards, int | float):
        quoted = redact_values(repr(rewards), *secrets)[:80]
        raise AgentError(BAD_RESULT, f"result 'rewards' is not a number: {quoted}", document)
    try:
        reward = float(rewards)
    except OverflowError:  # a JSON integer past float's range (1e309 written out in digits)
        reward = math.inf
    if not math.isfinite(reward):
        raise AgentError(BAD_RESULT, f"result reward is not finite: {reward}", document)
    return AgentResult(reward=reward, document=document)


def received_reward(document: Mapping[str, Any]) -> Any:
    """The reward as the agent wrote it: `rewards`, else `reward` (None when neither)."""
    return document["rewards"] if "rewards" in document else document.get("reward")


def reported_failure(document: Mapping[str, Any], secrets: Collection[str] = ()) -> str | None:
    """The failure an agent reports in its result document, described in one line, the
    `secrets` redacted before the cut."""
    status = document.get("status_code")
    failed_status = status is not None and (isinstance(status, bool) or status != 200)
    error = document.get("error")
    if not failed_status and not error:
        return None
    # The traceback's last line names the exception type, which stop_reason lacks.
    trace = document.get("traceback")
    last = trace.strip().splitlines()[-1] if isinstance(trace, str) and trace.strip() else ""
    detail = last or str(error or document.get("stop_reason") or "no detail")
    where = f"status_code {status}" if failed_status else "error"
    detail = redact_values(detail, *secrets)[:_DETAIL_CHARS]
    return f"the agent reported a failure ({where}): {detail}"


def poll_delays(
    first: float, factor: float, cap: float, jitter: float, rng: random.Random | None = None
) -> Iterator[float]:
    """first, first*factor, ... capped at `cap`, each scaled by 1 +/- `jitter` (a fraction),
    so episodes started together do not look for their results in lockstep."""
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter is a fraction in [0, 1), got {jitter}")
    draw = rng or random.Random()
    base = first
    while True:
        yield base * draw.uniform(1 - jitter, 1 + jitter)
        base = min(cap, base * factor)
