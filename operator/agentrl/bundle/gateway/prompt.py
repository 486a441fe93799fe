"""Prompt token ids for a session's next turn: cumulative extension or a full render.

Pure logic apart from the rendering itself, which `PromptRenderer` does inline or in a
worker process depending on its size. In cumulative token mode the next prompt is the
previous prompt + the previous completion (the ids the engine sampled, verbatim) + the
renderer's bridge for only the messages that are new since then, so a re-render can never
drift from what the model saw. A session can hold several conversations at once
(sub-agents), so each one is a `Chain` and a request extends the chain whose message
history it continues. When a client rewrote its history, or the renderer cannot prove a
bridge exact, the prompt falls back to a full render, and the reason is reported as a trace
break where that render does not hold the conversation's ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentrl.api import constants
from agentrl.bundle.gateway.render_pool import ContextFull, PromptRenderer
from agentrl.bundle.gateway.token_view import History, TokenView

log = logging.getLogger("agentrl.gateway")

MAX_CHAINS = 32  # conversations remembered per session (sub-agents, forks)


def fingerprint(value: Any) -> bytes:
    """Stable digest of a JSON-able value (keys sorted, so client key order does not matter)."""
    return sized_fingerprint(value)[0]


def sized_fingerprint(value: Any) -> tuple[bytes, int]:
    """The digest and the size of the JSON it was taken of (a measure of rendering work)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).digest(), len(data)


def reply_fingerprint(message: Mapping[str, Any], prefill: str = "") -> bytes:
    """What identifies an assistant reply as the agent echoes it back: its text (stripped) and
    its tool calls (arguments as JSON values), not the agent's re-serialisation of them.
    `prefill`: the start of the reply that the agent wrote itself (a prefilled turn), left out
    of an echo that begins with it, so that prefill + continuation matches the continuation."""
    text = str(message.get("content") or "")
    if prefill and text.startswith(prefill):
        text = text[len(prefill) :]
    calls = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(orjson.JSONDecodeError):
                args = orjson.loads(args)
        calls.append([fn.get("name"), args])
    return fingerprint([text.strip(), calls])


@dataclass
class Chain:
    """A conversation tip: the messages a turn was asked with and the exact ids it saw and
    sampled, `history[:prompt_len]` and `history[prompt_len:end]`. Tips of one conversation
    share `history`, packed ids (`token_view`) that are only ever appended to."""

    message_fps: list[bytes]
    history: History
    prompt_len: int
    completion_len: int
    tools_fp: bytes
    reply_fp: bytes  # the reply the agent got, to tell siblings with one prompt apart
    prefill: str = ""  # the start of that reply the agent wrote (prompt ids, not sampled)

    @property
    def end(self) -> int:
        return self.prompt_len + self.completion_len

    def prompt_ids(self) -> array[int]:
        return self.history[: self.prompt_len]

    def completion_ids(self) -> array[int]:
        return self.history[self.prompt_len : self.end]


@dataclass(frozen=True)
class PromptPlan:
    prompt_ids: array[int]
    message_fps: list[bytes]
    tools_fp: bytes
    extends: int | None  # index of the chain this turn continues, if any
    break_reason: str | None  # set when a turn that should have extended a chain could not
    prefill: str = ""  # the text of the reply's start the model continued (`continue_final`)


def _common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# Why a prompt was rendered in full where it should have extended its conversation (the
# reason of agentrl_trace_breaks_total, with the merge's own: `traces.BREAK_REASONS`); the
# labels' home is agentrl.api.constants, which the metrics pre-create from.
# several siblings fit the echo and none is its reply
AMBIGUOUS_FORK = constants.BREAK_AMBIGUOUS_FORK
# the client rewrote a conversation's history
HISTORY_REWRITE = constants.BREAK_HISTORY_REWRITE
# the conversation continues with other tools
TOOLS_CHANGED = constants.BREAK_TOOLS_CHANGED
# the full render does not hold the sampled ids
RETOKENIZE_DRIFT = constants.BREAK_RETOKENIZE_DRIFT
# no bridge proven, and the full render drifted
BRIDGE_REFUSED = constants.BREAK_BRIDGE_REFUSED
# the renderer's bridge broke its own contract
BRIDGE_MISMATCH = constants.BREAK_BRIDGE_MISMATCH
PROMPT_BREAK_REASONS = constants.PROMPT_BREAK_REASONS

EXACT, CONTINUATION = 2, 1  # `_reply_match`: the echo is the reply / only its continuation


def _continuation(
    chains: Sequence[Chain], messages: Sequence[Mapping[str, Any]], fps: Sequence[bytes]
) -> int | str | None:
    """The chain this request continues (its messages, then its reply, then only non-assistant
    messages): the index, "ambiguous_fork" when several siblings fit and none by its reply
    (or several only by a continuation whose prefill the echo lacks), or None."""
    roles = [m.get("role") for m in messages]
    fits: list[tuple[int, int, int]] = []  # (how the reply matches, history length, index)
    for i, c in enumerate(chains):
        n = len(c.message_fps)
        if len(fps) <= n + 1 or roles[n] != "assistant" or "assistant" in roles[n + 1 :]:
            continue
        if list(fps[:n]) == c.message_fps:
            fits.append((_reply_match(c, messages[n]), n, i))
    if not fits:
        return None
    match, n, idx = max(fits)
    if match < EXACT and sum(1 for f in fits if f[:2] == (match, n)) > 1:
        # No sibling's reply is the echo, and several fit it as well as each other: guessing
        # could put one conversation's ids (a prefill it never sent) under another's.
        return AMBIGUOUS_FORK
    return idx


def _reply_match(chain: Chain, message: Mapping[str, Any]) -> int:
    """How the echoed `message` matches the reply `chain` got: EXACT (a prefilled turn's:
    prefill + continuation), CONTINUATION (a prefilled turn's continuation without the
    prefill, which the agent then dropped from its history: ranked below a sibling whose
    reply is the echo, as that conversation's ids never held the prefill), or 0."""
    if chain.reply_fp != reply_fingerprint(message, chain.prefill):
        return 0
    text = str(message.get("content") or "")
    return EXACT if text.startswith(chain.prefill) else CONTINUATION


def _rewrite(chains: Sequence[Chain], fps: Sequence[bytes]) -> bool:
    """True if a chain of the same conversation exists that this request does not continue."""
    for c in chains:
        common = _common_prefix(c.message_fps, fps)
        if common >= 1 and common < len(c.message_fps):  # same start, then diverges
            return True
        if common == len(c.message_fps) < len(fps):  # continues it, but not through its reply
            return True
    return False


class PromptBuilder:
    """Builds the next prompt with a `renderers` Renderer (wrapped in a `PromptRenderer`,
    which decides where the rendering runs)."""

    def __init__(self, render: PromptRenderer | Any, cumulative: bool) -> None:
        self.render_with = render if isinstance(render, PromptRenderer) else PromptRenderer(render)
        self.renderer = self.render_with.renderer
        self.cumulative = cumulative
        self.mismatch_logged = False  # a renderer whose bridge drifted is named once

    async def build(
        self,
        chains: Sequence[Chain],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        continue_final: bool = False,
    ) -> PromptPlan:
        """`continue_final`: the last message is the start of the assistant's reply (a
        prefill), which the model continues; the turn is then matched, and recorded, as the
        request before it, so the agent's echo of prefill + continuation as one reply
        extends it."""
        sized = [sized_fingerprint(m) for m in messages]
        fps = [fp for fp, _ in sized]
        tools_fp, tools_size = sized_fingerprint(tools or [])
        work = sum(n for _, n in sized) + tools_size

        async def full() -> array[int]:
            return await self.render_with.render(
                messages, tools, work, continue_final=continue_final
            )

        # The agent echoes a prefilled reply as prefill + continuation: its chain remembers the
        # prefill, so the echo matches the reply it got (the continuation).
        prefill = str(messages[-1].get("content") or "") if continue_final else ""
        asked = messages[:-1] if continue_final else messages
        fps = fps[:-1] if continue_final else fps
        live = [c for c in chains if c.tools_fp == tools_fp]
        idx = _continuation(live, asked, fps)
        if not isinstance(idx, int):
            reason = idx or (HISTORY_REWRITE if _rewrite(live, fps) else None)
            if reason is None and len(live) < len(chains) and _rewrite(chains, fps):
                reason = TOOLS_CHANGED
            return PromptPlan(await full(), fps, tools_fp, None, reason, prefill)
        extends = chains.index(live[idx])
        chain = live[idx]
        prev = chain.history[: chain.end]

        async def checked(reason: str) -> tuple[array[int], str | None]:
            """The full render, and `reason` only where it does not hold the conversation's
            ids: where it does, the merge extends the conversation, so nothing broke."""
            ids = await full()
            return ids, (None if ids[: len(prev)] == prev else reason)

        try:
            if not self.cumulative or continue_final:  # a prefill: a full render, checked
                ids, drift = await checked(RETOKENIZE_DRIFT)
                return PromptPlan(ids, fps, tools_fp, extends, drift, prefill)
            first_new = len(chain.message_fps) + 1
            bridged = await self.render_with.bridge(
                chain.prompt_ids(),
                chain.completion_ids(),
                messages[first_new:],
                tools,
                sum(n for _, n in sized[first_new:]),
            )
            if bridged is None:
                # No bridge proven (the chat-template family never bridges; qwen3 re-renders
                # at a new user query): the full render is the prompt.
                ids, drift = await checked(BRIDGE_REFUSED)
                return PromptPlan(ids, fps, tools_fp, extends, drift)
            if bridged[: len(prev)] != prev:
                # The renderer broke its own contract (a bug in it): its bridge is never
                # trained on, and the bug is logged once; the turn is a break only where the
                # full render drifts too.
                if not self.mismatch_logged:
                    self.mismatch_logged = True
                    log.warning(
                        "renderer %s bridged a turn to a prompt that does not begin with the "
                        "conversation's ids; such turns are rendered in full",
                        type(self.renderer).__name__,
                    )
                ids, drift = await checked(BRIDGE_MISMATCH)
                return PromptPlan(ids, fps, tools_fp, extends, drift)
            return PromptPlan(bridged, fps, tools_fp, extends, None)
        except ContextFull as exc:
            exc.extends = extends  # the conversation the full context cut (the trace names it)
            raise

    async def count(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        continue_final: bool = False,
    ) -> int:
        """Tokens of a full render with the generation prompt (or up to a prefill), of any
        length (Claude Code asks before it compacts a conversation that no longer fits)."""
        work = len(orjson.dumps(messages)) + len(orjson.dumps(tools or []))
        ids = await self.render_with.render(
            messages, tools, work, bounded=False, continue_final=continue_final
        )
        return len(ids)


def _fork(chains: Sequence[Chain], base: Chain | None, prompt: array[int]) -> History:
    """A new history for `prompt`, sharing the longest prefix it has with a known one (the
    chain it was meant to extend, else any: sub-agents share their system prompt)."""
    best, cut = None, 0
    seen: set[int] = set()
    for chain in [base] if base is not None else chains:
        if id(chain.history) in seen:
            continue
        seen.add(id(chain.history))
        n = chain.history.shared_with(prompt, chain.end)
        if n > cut:
            best, cut = chain, n
    if best is None:
        return History(array("i", prompt))
    return History(prompt[cut:], best.history, cut)


def record_turn(
    chains: list[Chain], plan: PromptPlan, completion_ids: Sequence[int], reply_fp: bytes
) -> tuple[TokenView[int], TokenView[int]]:
    """Add the turn as a new tip (earlier tips stay, so a retried turn bridges the same way)
    and return its prompt and completion as views on the conversation's shared history."""
    prompt = plan.prompt_ids
    base = chains[plan.extends] if plan.extends is not None else None
    if (
        base is not None
        and len(base.history) == base.end
        and prompt[: base.end] == (base.history[: base.end])
    ):
        history = base.history  # the usual case: append to the conversation's ids
        history.extend(prompt[base.end :])
    else:  # a new conversation, a drifted render, or a fork off an older tip
        history = _fork(chains, base, prompt)
    history.extend(completion_ids)
    view = TokenView(history, len(prompt)), TokenView(history, len(completion_ids), len(prompt))
    chain = Chain(
        list(plan.message_fps),
        history,
        len(prompt),
        len(completion_ids),
        plan.tools_fp,
        reply_fp,
        plan.prefill,
    )
    key = (chain.message_fps, chain.tools_fp, reply_fp, plan.prefill)
    for i, c in enumerate(chains):  # an exact repeat (same prompt, same reply): one tip suffices
        if (c.message_fps, c.tools_fp, c.reply_fp, c.prefill) == key:
            chains[i] = chain
            return view
    chains.append(chain)
    if len(chains) > MAX_CHAINS:
        del chains[0]
    return view
