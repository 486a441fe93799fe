"""One episode: gateway session -> agent -> turns -> merged samples, session closed always.

An episode that fails for any reason still yields exactly one zero-gradient sample (loss
mask all 0, `remove_sample` set, reward 0 as a stand-in), so its group keeps its size and
slime's rollout-count arithmetic never shifts. The sample names the reason
(`failures.SAMPLE_KEY`): every reason is an infrastructure failure, which the reward
post-process leaves out of the group's statistics (`spec.grpo.failedEpisodes`). The reason is
returned to the caller, which counts it and logs it once with the session id.

Every turn records the policy that sampled it (`Turn.policy_version`): the step the episode
ran in, since slime updates the engines' weights only between steps and every step ends with
the engines idle (`driver.settle_engines`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentrl.bundle.agents.base import AgentBackend, AgentError, AgentRequest
from agentrl.bundle.failures import (
    AGENT_ERROR,
    EMPTY_MERGE,
    GATEWAY_ERROR,
    INTERNAL,
    NO_TURNS,
    SAMPLE_KEY,
    TIMEOUT,
)
from agentrl.bundle.redact import describe_error, redact_values
from agentrl.bundle.rollout.types import SampleFields, Status
from agentrl.bundle.session import (
    CONTEXT_LIMIT,
    KV_CACHE_LIMIT,
    ContextFullCalls,
    GatewaySessions,
    SessionError,
)
from agentrl.bundle.traces import (
    ABORT,
    MergeStats,
    Segment,
    merge_turns_with_stats,
    reached_agent,
)

log = logging.getLogger("agentrl.rollout")

# The sample metadata key slime's RolloutManager reads as a multi-turn sample's number of
# rounds, for every sample as soon as the first one has it:
# https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/ray/rollout.py#L788-L790
# https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/ray/rollout.py#L710-L712
ROUND_NUMBER = "round_number"


@dataclass(frozen=True)
class EpisodeInput:
    """One row of the batch on plain types (from a slime Sample or an eval JSONL row)."""

    prompt: Any
    metadata: Mapping[str, Any]
    label: Any
    group_index: int
    index: int
    prompt_tokens: Sequence[int] = ()


@dataclass(frozen=True)
class EpisodeSpec:
    """What every episode of one batch shares."""

    sampling_params: Mapping[str, Any]  # SGLang names: temperature, top_p, max_new_tokens
    max_response_len: int | None
    timeout_s: float
    model_id: str
    policy_version: int = 0  # the rollout step: whose weights the engines hold


@dataclass
class EpisodeOutcome:
    session_id: str
    samples: list[SampleFields]
    reward: float
    failure: str | None  # None = succeeded
    message: str = ""
    error: BaseException | None = None  # an unexpected error, logged with its traceback
    merge: MergeStats | None = None  # what merging the turns counted (breaks, masking...)
    seconds: float = 0.0  # wall time from getting a slot to the end (set by the batch)
    policy_version: int = 0  # the step it ran in (its turns' policy)
    # Whether any of its sequences was truncated (hit maxResponseLength or finished
    # `length`), those left out of `samples` because they train nothing included: eval
    # reports it per episode, and which sequences slime gets must not change it.
    truncated: bool = False


def new_session_id() -> str:
    """Unguessable (192 bits), 48 lowercase hex characters.

    Hex, not URL-safe base64: the id is AgentCore's `runtimeSessionId` (33-256 characters,
    and the session ids the service returns match `[a-zA-Z0-9][a-zA-Z0-9-_]*`, which a base64
    id starting with `-` or `_` would not), a path segment of the toolkit's S3 result key and
    a gateway URL segment; hex is safe in all three.
    """
    return secrets.token_hex(24)


def agent_sampling_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang sampling names -> the OpenAI-style names an agent passes to the gateway."""
    out = {k: v for k, v in params.items() if k not in ("max_new_tokens", "top_k")}
    if "max_new_tokens" in params:
        out["max_tokens"] = params["max_new_tokens"]
    return out


def build_payload(
    inp: EpisodeInput, sid: str, handle_url: str, token: str, spec: EpisodeSpec
) -> dict[str, Any]:
    """The row's metadata verbatim (shallow copy) plus `_rollout`, what the agent needs."""
    payload = dict(inp.metadata)
    payload["_rollout"] = {
        "session_id": sid,
        "base_url": handle_url,
        "api_key": token,
        "model_id": spec.model_id,
        "sampling_params": agent_sampling_params(spec.sampling_params),
    }
    return payload


def segment_samples(
    inp: EpisodeInput,
    segments: Sequence[Segment],
    sid: str,
    reward: float,
    rollout_id: int,
    *,
    policy_version: int = 0,
) -> list[SampleFields]:
    """One sample per segment that trains a token. A segment with none (an aborted turn the
    agent retried, a turn with unusable logprobs) is left out while another segment trains.
    It would not move its group's mean or std (rewards are normalised per episode) and
    carries no gradient, but slime would still run it through the model, count it in its
    per-sample figures (response lengths, truncated ratio), and, under
    `--calculate-per-token-loss`, as one token of the step's normaliser (`clamp_min(mask
    sum, 1)`), diluting every trained token. An episode none of whose segments trains
    (every completion of other weights or with unusable logprobs) keeps one, its last (the
    conversation as it ended), as a failed episode keeps one stand-in: its reward still
    counts once in its group's statistics, and one sample with no gradient dilutes the
    step's loss once, not once per segment. (One whose every call the engine aborted never
    gets here: no completion reached its agent, so it fails as `no_turns`.) Whether the
    episode was truncated is read from all its segments (`EpisodeOutcome.truncated`)."""
    trained = [(i, seg) for i, seg in enumerate(segments) if 1 in seg.loss_mask]
    kept = trained or list(enumerate(segments))[-1:]
    return [
        SampleFields(
            group_index=inp.group_index,
            index=inp.index,
            prompt=inp.prompt,
            # The merge built these lists for this episode alone: no copies.
            tokens=seg.tokens,
            response_length=seg.response_length,
            loss_mask=seg.loss_mask,
            rollout_log_probs=seg.logprobs,
            weight_versions=tuple(seg.weight_versions),
            reward=reward,
            status=Status.TRUNCATED if seg.truncated else Status.COMPLETED,
            rollout_id=rollout_id,
            session_id=sid,
            label=inp.label,
            metadata={
                **dict(inp.metadata),
                # The row's metadata is the user's and may hold any key; this one tells the
                # reward post-process a failure (`failures.sample_failure`), so a task
                # outcome says it has none whatever its row carried.
                SAMPLE_KEY: None,
                "gateway_session_id": sid,
                "segment_index": i,
                "num_turns": seg.num_turns,
                # slime reads this key of every sample once the first sample has it (its
                # multi-turn metric: the rounds in the sequence), so a row's own value must
                # not reach it: rows without one made slime's conversion raise KeyError.
                ROUND_NUMBER: seg.num_turns,
                "raw_reward": reward,
                "policy_version": (
                    policy_version if seg.policy_version is None else seg.policy_version
                ),
            },
        )
        for i, seg in kept
    ]


def failed_sample(inp: EpisodeInput, sid: str, reason: str, rollout_id: int) -> SampleFields:
    """A zero-gradient stand-in: the prompt's tokens and one masked response slot."""
    prompt = list(inp.prompt_tokens) or [0]  # slime's Dataset leaves tokens empty
    return SampleFields(
        group_index=inp.group_index,
        index=inp.index,
        prompt=inp.prompt,
        tokens=[*prompt, 0],
        response_length=1,
        loss_mask=[0],
        rollout_log_probs=[0.0],
        reward=0.0,
        # FAILED, not ABORTED: slime re-queues ABORTED samples as partial rollouts.
        status=Status.FAILED,
        rollout_id=rollout_id,
        session_id=sid,
        remove_sample=True,
        label=inp.label,
        metadata={
            **dict(inp.metadata),
            "gateway_session_id": sid,
            SAMPLE_KEY: reason,
            ROUND_NUMBER: 0,
            "raw_reward": 0.0,
        },
    )


async def run_episode(
    inp: EpisodeInput,
    spec: EpisodeSpec,
    rollout_id: int,
    sessions: GatewaySessions,
    backend: AgentBackend,
    *,
    session_id: str | None = None,
) -> EpisodeOutcome:
    """`session_id`: the caller's `new_session_id()`, so that it can name the episode if
    the episode is cancelled (no outcome then); a fresh one when None."""
    sid = session_id or new_session_id()
    outcome = await _run(inp, spec, rollout_id, sessions, backend, sid=sid)
    outcome.policy_version = spec.policy_version
    return outcome


async def _run(
    inp: EpisodeInput,
    spec: EpisodeSpec,
    rollout_id: int,
    sessions: GatewaySessions,
    backend: AgentBackend,
    *,
    sid: str,
) -> EpisodeOutcome:
    deadline = asyncio.timeout(spec.timeout_s)
    try:
        async with deadline:
            reward, segments, stats = await _play(inp, spec, sid, sessions, backend)
    except TimeoutError as exc:
        if deadline.expired():
            msg = f"no result within {spec.timeout_s:g}s"
            return _failed(inp, sid, rollout_id, TIMEOUT, msg)
        # Some other clock ran out before the episode's (never reported as the deadline).
        outcome = _failed(inp, sid, rollout_id, INTERNAL, describe_error(exc, 300))
        outcome.error = exc
        return outcome
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # cancelled (a cut, the batch's end): the caller counts it
        # Nobody cancelled this episode: its backend raised CancelledError on its own
        # (awaiting a thread-pool future that the executor's shutdown cancelled does). Left
        # to propagate, it would end the episode's task as cancelled with no outcome, and a
        # train step would wait for that slot forever.
        msg = (
            "the agent backend raised CancelledError although the episode was not cancelled "
            "(an executor shut down under it, or a bug in the backend)"
        )
        outcome = _failed(inp, sid, rollout_id, INTERNAL, msg)
        outcome.error = exc
        return outcome
    except AgentError as exc:
        return _failed(inp, sid, rollout_id, exc.reason, str(exc))
    except SessionError as exc:
        return _failed(inp, sid, rollout_id, GATEWAY_ERROR, str(exc))
    except _EpisodeFailure as exc:
        outcome = _failed(inp, sid, rollout_id, exc.reason, str(exc))
        outcome.merge = exc.stats
        return outcome
    except Exception as exc:  # a bug must not take the batch down; it is counted and logged
        # Never repr: an aiohttp response error's repr lists the request headers (API keys).
        outcome = _failed(inp, sid, rollout_id, INTERNAL, describe_error(exc, 300))
        outcome.error = exc
        return outcome
    samples = segment_samples(
        inp, segments, sid, reward, rollout_id, policy_version=spec.policy_version
    )
    truncated = any(seg.truncated for seg in segments)
    return EpisodeOutcome(sid, samples, reward, failure=None, merge=stats, truncated=truncated)


class _EpisodeFailure(Exception):
    def __init__(self, reason: str, message: str, stats: MergeStats | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.stats = stats


async def _play(
    inp: EpisodeInput,
    spec: EpisodeSpec,
    sid: str,
    sessions: GatewaySessions,
    backend: AgentBackend,
) -> tuple[float, list[Segment], MergeStats]:
    try:
        handle = await sessions.create_session(sid, spec.sampling_params)
        payload = build_payload(inp, sid, handle.base_url, handle.token, spec)
        try:
            result = await backend.run(AgentRequest(session_id=sid, payload=payload))
        except AgentError as exc:
            # The agent's own report may quote its payload: the session's token stays out of
            # the failure's log line and the rehearsal's report.
            exc.args = (redact_values(str(exc), handle.token),)
            raise
        except TimeoutError as exc:
            # The episode deadline reaches us as a cancellation, so this is the backend's
            # own clock: one of its requests to the agent timed out.
            raise AgentError(
                AGENT_ERROR,
                f"a request of the agent backend timed out ({describe_error(exc)}) "
                f"before the episode deadline of {spec.timeout_s:g}s",
            ) from exc
        turns = [
            t if t.policy_version is not None else replace(t, policy_version=spec.policy_version)
            for t in await sessions.get_turns(sid)
        ]
        # No completion reached the agent from a call whose prompt filled the context (a
        # CONTEXT_FULL turn: nothing sampled, answered `length` and empty) or one the engine
        # aborted (answered 503: the agent never saw it). An episode of those alone has no
        # turn: its reward owes nothing to the model's output, so, counted as a task outcome,
        # it would shape its siblings' advantages (slime's own rollout never scores an
        # aborted sample: generate_and_rm returns it before the reward model). Why is read
        # before the session closes.
        answered = any(map(reached_agent, turns))
        full = await sessions.context_full(sid) if not answered else None
    finally:
        # Shielded so a cancelled or timed-out episode still frees its gateway session.
        await asyncio.shield(_close(sessions, sid))
    if not answered:
        aborted = sum(t.finish_reason == ABORT for t in turns)
        raise _EpisodeFailure(NO_TURNS, _no_turns_message(full, aborted))
    segments, stats = merge_turns_with_stats(turns, spec.max_response_len)
    if not segments:
        msg = f"{len(turns)} turn(s) merged into no sample (prompt over budget or nothing sampled)"
        raise _EpisodeFailure(EMPTY_MERGE, msg, stats)
    return result.reward, segments, stats


def _no_turns_message(full: ContextFullCalls | None, aborted: int = 0) -> str:
    """Why an episode has no turn: the agent never called the model, or (not its fault)
    the engine aborted every call it made, or every prompt it sent already filled the
    model's context, so nothing could be sampled; both where both happened."""
    if full is None or not full.calls:
        if aborted:
            return (
                f"the engine aborted every model call of the agent ({aborted}; each answered "
                "503, no completion reached the agent), so its reward owes nothing to the "
                "model's output"
            )
        return "the agent finished without calling the model"
    if aborted:
        # Both: the aborted calls' part first, then the context's with its fix.
        return (
            f"the engine aborted {aborted} model call(s) of the agent (answered 503) and "
            + _context_full_message(full, "every other")
        )
    return _context_full_message(full, "every")


def _context_full_message(full: ContextFullCalls, every: str) -> str:
    # The session's context_length is what a request may hold on the engine: the model's
    # context, or, where SGLang's scheduler refused the prompt, the smaller of it and the
    # engine's KV cache pool. The gateway says which where it can tell (`limit`): only the
    # fix that helps is named then, both where it cannot.
    sizes = f"the longest prompt: {full.prompt_tokens} tokens"
    outcome = "so nothing was sampled (the agent was answered finish_reason length)"
    kv_fix = (
        "give each engine more KV cache (a larger --sglang-mem-fraction-static in "
        "spec.runtime.extraArgs, or more spec.resources.rolloutGpusPerEngine)"
    )
    if full.limit == CONTEXT_LIMIT:
        return (
            f"{every} model call ({full.calls}) had a prompt that filled the model's context of "
            f"{full.context_length} tokens ({sizes}), {outcome}; shorten the row's prompt or "
            "raise spec.model.contextLength"
        )
    if full.limit == KV_CACHE_LIMIT:
        return (
            f"{every} model call ({full.calls}) had a prompt that filled the "
            f"{full.context_length} tokens the engine's KV cache holds for a request, less "
            f"than the model's context ({sizes}), {outcome}; shorten the row's prompt or "
            f"{kv_fix}"
        )
    return (
        f"{every} model call ({full.calls}) had a prompt that filled the {full.context_length} "
        "tokens a request may hold on the engine (the model's context, or the engine's KV "
        f"cache where that is smaller; {sizes}), {outcome}; shorten the row's prompt, or "
        "raise spec.model.contextLength if that is the model's context, else "
        f"{kv_fix}"
    )


_close_failures = [0]  # process-wide; only the first is a warning (the rest repeat it)


async def _close(sessions: GatewaySessions, sid: str) -> None:
    try:
        await sessions.close_session(sid)
    except Exception as exc:  # best effort: the episode's own outcome is already decided
        _close_failures[0] += 1
        level = logging.WARNING if _close_failures[0] == 1 else logging.DEBUG
        log.log(
            level,
            "episode %s: closing the gateway session failed: %r "
            "(further close failures are logged at debug level)",
            sid,
            exc,
        )


def _failed(inp: EpisodeInput, sid: str, rollout_id: int, reason: str, msg: str) -> EpisodeOutcome:
    sample = failed_sample(inp, sid, reason, rollout_id)
    return EpisodeOutcome(session_id=sid, samples=[sample], reward=0.0, failure=reason, message=msg)
