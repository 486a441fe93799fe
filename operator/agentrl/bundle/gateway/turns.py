"""One model call of a session, end to end but HTTP-free: prompt, generate, record, parse.

Runs under the session's lock so a session's turns never interleave. The turn is recorded
exactly as the engine sampled it (ids and logprobs from `/generate`) before the completion
is parsed for the agent, so what the agent sees can never change what is trained on, and a
completion the parser chokes on is still recorded (and answered as plain text).

The context is honoured as slime's own agent adapter does (`call_sglang_generate` in
`slime/agent/adapters/common.py` at fa3c990 and 624b824): `max_new_tokens` is capped at the
context minus the prompt, so SGLang never refuses a long conversation, and a prompt that
leaves no room is answered at once with finish reason `length` and no content, never sent to
the engine. Nothing was sampled, so it is no turn of tokens; the session notes where it came
and which conversation it continued (`Session.context_full_at`), and the trace shows it
there as a `CONTEXT_FULL` turn whose ids are that conversation's so far, which ends that
conversation's segment truncated, as slime's adapter records the call. A prompt the engine
itself refuses as too long (SGLang's scheduler takes prompts only a few tokens short of the
context, or of its KV pool) is the same full context, answered and traced the same way;
slime's adapter answers the agent an error there (a 500) and records nothing. Where the
engine refuses prompt + max_new_tokens alone (the gateway knew no context, or speculative
decoding reserves tokens), the call is asked again for the room the refusal names, and a
context it names becomes the gateway's: the agent is answered as if the context were known.
So do the tokens it counts with every prompt (EAGLE's `num_reserved_tokens`, the input it
names less the prompt sent): later calls are capped that much lower, never refused again.
A full context names the limit it met (`Session.context_limit`): the model's context, or
the engine's KV cache where SGLang's scheduler refused less than the context the gateway
knows, so the episode's failure can name the one fix that helps.
"""

from __future__ import annotations

import logging
import secrets
from array import array
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentrl.bundle.gateway.chat import (
    ApiError,
    ChatRequest,
    ModelOutput,
    merge_sampling,
    output_from_parsed,
)
from agentrl.bundle.gateway.engine import EngineClient
from agentrl.bundle.gateway.prompt import PromptBuilder, record_turn, reply_fingerprint
from agentrl.bundle.gateway.render_pool import ContextFull
from agentrl.bundle.gateway.session_store import Session
from agentrl.bundle.gateway.sglang import Completion, EngineError, length_refusal
from agentrl.bundle.gateway.token_view import TokenView
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.session import CONTEXT_LIMIT, KV_CACHE_LIMIT, FullLimit
from agentrl.bundle.traces import ABORT, Turn

log = logging.getLogger("agentrl.gateway")

# Called with (prompt ids, completion ids so far) while a streamed turn generates; answers the
# event loop time before which it has no use for more tokens (None: as soon as they come).
OnTokens = Callable[[Sequence[int], list[int]], Awaitable[float | None]]


class TurnRunner:
    def __init__(
        self,
        builder: PromptBuilder,
        engine: EngineClient,
        metrics: BundleMetrics,
        timeout_s: float,
        *,
        tokenizer: Any = None,  # for the text of each token when an agent asks for logprobs
        context_length: int | None = None,  # the engine's context; None: nothing is capped
        stream_interval: int = 64,  # tokens per engine chunk of a streamed turn (settings)
    ) -> None:
        self.tokenizer = tokenizer
        self.context_length = context_length
        # Tokens the engine counts with every prompt (EAGLE's draft tokens), learned from its
        # first refusal that names the input as it counted it; 0 until then.
        self.reserved_tokens = 0
        self.stream_interval = stream_interval
        self.builder = builder
        self.renderer = builder.renderer
        self.engine = engine
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.stop_ids = list(self.renderer.get_stop_token_ids())

    def sampling_params(
        self, req: ChatRequest, session: Session, prompt_tokens: int = 0
    ) -> dict[str, Any]:
        params = merge_sampling(req.sampling, session.sampling_params)
        if self.context_length is not None:  # the room left, as slime's adapter caps it
            room = self.context_length - self.reserved_tokens - prompt_tokens
            params["max_new_tokens"] = min(int(params.get("max_new_tokens", room)), room)
        params["stop_token_ids"] = sorted({*params.get("stop_token_ids", []), *self.stop_ids})
        # Keep special tokens and matched stops in the text so it agrees with the ids (as slime).
        params.setdefault("skip_special_tokens", False)
        params.setdefault("no_stop_trim", True)
        params.setdefault("spaces_between_special_tokens", False)
        return params

    async def run(
        self, session: Session, req: ChatRequest, on_tokens: OnTokens | None = None
    ) -> ModelOutput:
        async with session.lock:
            if session.closed:
                raise ApiError(
                    410, f"session {session.sid} is closed", kind="invalid_request_error"
                )
            try:
                plan = await self.builder.build(
                    session.chains, req.messages, req.tools, continue_final=req.continue_final
                )
            except ContextFull as full:
                return self._context_full(
                    session, full.tokens, full.limit, full.extends, "", met=CONTEXT_LIMIT
                )
            if plan.break_reason is not None:
                self.metrics.trace_breaks.labels(plan.break_reason).inc()
            session.n_requests += 1
            prompt: TokenView[int] = TokenView(plan.prompt_ids, len(plan.prompt_ids))
            if self.fills_with_reserved(len(prompt)) and self.context_length is not None:
                # What the engine's tokenizer manager would refuse as filling the context,
                # counting its reserved tokens: answered so without asking it.
                why = f" (with the {self.reserved_tokens} tokens the engine reserves)"
                return self._context_full(
                    session,
                    len(prompt),
                    self.context_length,
                    plan.extends,
                    why,
                    met=CONTEXT_LIMIT,
                )
            cap: int | None = None  # max_new_tokens the engine said fits, on a second try
            while True:
                rid = f"{session.sid}-{session.n_requests}-{secrets.token_hex(4)}"
                try:
                    done = await self._generate(session, req, prompt, rid, on_tokens, cap=cap)
                    break
                except EngineError as exc:
                    refusal = length_refusal(exc)
                    if refusal is None:
                        raise
                    if refusal.exact:
                        self.learn_context(refusal.context)
                        self.learn_reserved(refusal.input_tokens - len(prompt))
                    if refusal.fits and cap is None:
                        # Only prompt + max_new_tokens was too long: the gateway knew no
                        # context, or the engine reserves tokens for speculative decoding.
                        # Asked again for the room its refusal names, as when the gateway
                        # knows the context (nothing was sampled; a refusal comes first).
                        cap = refusal.context - refusal.input_tokens
                        continue
                    if refusal.fits:
                        raise
                    # SGLang refused the prompt itself as too long: its scheduler's limit is
                    # a few tokens short of the context (and the KV pool may set a lower
                    # one), so a prompt that passed the gateway's check can meet it. The
                    # same full context: answered and traced as the gateway's own check does.
                    return self._context_full(
                        session,
                        len(prompt),
                        refusal.context,
                        plan.extends,
                        f" (the engine: {exc.detail})",
                        met=self._limit_met(refusal.context, refusal.exact),
                    )
            # Recorded first: nothing that happens to the reply can lose a sampled turn.
            at = len(session.turns)
            session.turns.append(
                Turn(
                    prompt,
                    done.ids,
                    done.logprobs,
                    done.finish_reason,
                    weight_version=done.weight_version,
                )
            )
            self.metrics.generated_tokens.inc(len(done.ids))
            out = self.parse(done, prompt, req, session.sid)
            reply = reply_fingerprint(as_message(out))
            seen, sampled = record_turn(session.chains, plan, done.ids, reply)
            # The same ids, as views on the conversation's shared history, and the logprobs
            # packed too: what an open session keeps is 4 bytes a token, 8 a logprob.
            lps = (
                None
                if done.logprobs is None
                else TokenView(array("d", done.logprobs), len(done.logprobs))
            )
            session.turns[at] = Turn(
                seen, sampled, lps, done.finish_reason, weight_version=done.weight_version
            )
        if done.finish_reason == ABORT:
            # Not a weight update: slime's train.py changes weights only between rollout
            # steps, once the engines are idle. The partial turn stays recorded; the merge
            # masks it (traces.ABORTED), since the agent never sees it.
            raise ApiError(
                503,
                "the engine aborted this generation; retry",
                kind="api_error",
            )
        return out

    def learn_context(self, context: int) -> None:
        """The model's context as the engine named it refusing a call, when the gateway knew
        none (neither the spec nor config.json gave one): from now on every call is capped
        and checked against it, as if it had been known from the start."""
        if self.context_length is not None:
            return
        self.context_length = context
        if self.builder.render_with.max_tokens is None:
            self.builder.render_with.max_tokens = context
        log.warning(
            "gateway: the engine's context is %d tokens (it named it refusing a call too "
            "long for it); max_new_tokens is capped at the room left from now on (set "
            "spec.model.contextLength to cap from the first call)",
            context,
        )

    def learn_reserved(self, reserved: int) -> None:
        """The tokens the engine counted with a prompt beyond the prompt sent (SGLang's
        `num_reserved_tokens` under EAGLE speculative decoding), from its refusal naming the
        input as it counted it: from now on every call's budget leaves them out, so a call
        near the end of the context is not refused once and asked again for less."""
        if reserved <= self.reserved_tokens:
            return
        self.reserved_tokens = reserved
        log.warning(
            "gateway: the engine counts %d tokens with every prompt (speculative decoding "
            "reserves them); max_new_tokens is capped that much lower from now on",
            reserved,
        )

    def fills_with_reserved(self, prompt_tokens: int) -> bool:
        """Whether a prompt the gateway's own check passed fills the context once the
        engine's reserved tokens are counted with it, as SGLang's tokenizer manager counts
        them (`input + num_reserved_tokens >= context_len`): no room for a token."""
        context, reserved = self.context_length, self.reserved_tokens
        return bool(reserved) and context is not None and prompt_tokens + reserved >= context

    def _limit_met(self, holds: int, exact: bool) -> FullLimit | None:
        """Which limit a prompt the engine refused met, from what a request may hold there:
        the model's context (the tokenizer manager names it), or, from the scheduler's limit
        (the smaller of the context and the KV pool), the KV cache where that is less than
        the context the gateway knows; None where it knows none (it cannot tell)."""
        if exact:
            return CONTEXT_LIMIT
        if self.context_length is None:
            return None
        return KV_CACHE_LIMIT if holds < self.context_length else CONTEXT_LIMIT

    def _context_full(
        self,
        session: Session,
        tokens: int,
        limit: int,
        extends: int | None,
        why: str,
        *,
        met: FullLimit | None,
    ) -> ModelOutput:
        """A call whose prompt fills the context (`met`: which limit, None: unknown):
        counted, noted where it came in the trace with the conversation it continued, and
        answered finish reason `length`."""
        self.metrics.context_full_turns.inc()
        session.context_full += 1
        session.context_full_tokens = max(session.context_full_tokens, tokens)
        session.context_length = limit
        # Calls that met different limits (one prompt over the context, another over a
        # smaller KV pool) need both fixes: unknown from then on, not the last one's.
        if session.context_full > 1 and session.context_limit != met:
            met = None
        session.context_limit = met
        # The ids of the turn whose conversation it continued (none: a new one), so the
        # trace ends that conversation's segment truncated, not another's.
        tip: Sequence[int] = ()
        if extends is not None:
            chain = session.chains[extends]
            tip = TokenView(chain.history, chain.end)
        session.context_full_at.append((len(session.turns), tip))
        log.info(
            "gateway: session %s: the prompt (%d tokens) fills the context (%d)%s; "
            "answered with finish reason length",
            session.sid,
            tokens,
            limit,
            why,
        )
        return ModelOutput("", None, finish_reason="length", prompt_tokens=tokens)

    async def _generate(
        self,
        session: Session,
        req: ChatRequest,
        prompt: TokenView[int],
        rid: str,
        on_tokens: OnTokens | None,
        *,
        cap: int | None = None,  # at most this many new tokens (what the engine said fits)
    ) -> Completion:
        params = self.sampling_params(req, session, len(prompt))
        if cap is not None:
            params["max_new_tokens"] = min(int(params.get("max_new_tokens", cap)), cap)
        if on_tokens is None:
            return await self.engine.generate(
                prompt, params, rid, self.timeout_s, routing_key=session.sid
            )

        async def progress(ids: list[int]) -> float | None:
            return await on_tokens(prompt, ids)

        params.setdefault("stream_interval", self.stream_interval)
        return await self.engine.generate_stream(
            prompt, params, rid, self.timeout_s, on_tokens=progress, routing_key=session.sid
        )

    def parse(
        self, done: Completion, prompt_ids: Sequence[int], req: ChatRequest, sid: str = ""
    ) -> ModelOutput:
        reasoning: str | None = None
        try:
            parsed = self.renderer.parse_response(
                done.ids, tools=req.tools or None, prompt_ids=prompt_ids
            )
            content, calls = output_from_parsed(parsed, req.parse_tools)
            reasoning = parsed.reasoning_content or None
        except Exception as exc:  # e.g. RecursionError on absurdly nested tool-call JSON
            log.warning(
                "gateway: session %s: the renderer could not parse a completion of %d "
                "tokens (%s); answering it as plain text",
                sid,
                len(done.ids),
                type(exc).__name__,
            )
            content, calls = self.plain_text(done.ids), []
        stop = done.matched_stop
        if isinstance(stop, str) and stop and content.endswith(stop):
            content = content[: -len(stop)]  # as the APIs promise; the trace keeps the tokens
        return ModelOutput(
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason=done.finish_reason,
            matched_stop=done.matched_stop,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(done.ids),
            token_logprobs=self.token_logprobs(done) if req.logprobs else None,
        )

    def plain_text(self, ids: list[int]) -> str:
        """The completion as text, special tokens (stop, tags) included, as it was sampled."""
        if self.tokenizer is None:
            return ""
        return str(self.tokenizer.decode(ids))

    def token_logprobs(self, done: Completion) -> list[tuple[str, float]] | None:
        if done.logprobs is None or self.tokenizer is None:
            return None
        return [
            (self.tokenizer.decode([t]), lp) for t, lp in zip(done.ids, done.logprobs, strict=True)
        ]


def as_message(out: ModelOutput) -> dict[str, Any]:
    """The reply as an assistant message, the form the agent will echo back."""
    calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in out.tool_calls]
    return {"role": "assistant", "content": out.content, "tool_calls": calls}
