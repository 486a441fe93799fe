"""Streamed answers (`stream: true`): reasoning and content as they are sampled.

The engine is called with `/generate` streaming; every so often the ids sampled so far are
parsed by the renderer (the same parser as the final answer) and whatever grew in the
reasoning or the content is sent. Text near the end is held back (a tag may be half
sampled), and only extensions of what was already sent go out, so the stream never has to
take anything back; tool calls go out once complete, at the end. If nothing happens for
`keepalive_s`, an SSE comment keeps SDK read timeouts and proxies from cutting a long
generation (which would abort it). Errors before the first byte keep their HTTP status;
after it they are sent in-band in the API's shape.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from agentrl.bundle.gateway.chat import ApiError, ChatRequest, ModelOutput

KEEPALIVE = b": keep-alive\n\n"
HOLD_BACK = 16  # characters kept until more text (or the end) shows they are not a tag
PARSE_EVERY_S = 0.2  # re-parse at most this often, unless many tokens arrived


class DeltaTracker:
    """What of each channel (reasoning, content) was sent; yields only safe extensions."""

    def __init__(self) -> None:
        self.sent = {"reasoning": "", "content": ""}

    def _grow(self, channel: str, text: str, final: bool) -> str:
        text = text.lstrip()
        safe = text if final else text[: max(0, len(text) - HOLD_BACK)]
        sent = self.sent[channel]
        if len(safe) <= len(sent) or not safe.startswith(sent):
            return ""  # nothing new, or the parse changed its mind: wait for the end
        self.sent[channel] = safe
        return safe[len(sent) :]

    def update(
        self, reasoning: str, content: str, final: bool = False, reasoning_done: bool = False
    ) -> list[tuple[str, str]]:
        """Deltas to send; `reasoning_done` flushes the reasoning before content starts."""
        out = [
            ("reasoning", self._grow("reasoning", reasoning, final or reasoning_done)),
            ("content", self._grow("content", content, final)),
        ]
        return [(ch, d) for ch, d in out if d]


class LiveStream:
    """One client's SSE response, fed by the engine stream and closed with the parsed answer."""

    def __init__(self, request: web.Request, writer: Any, renderer: Any, req: ChatRequest) -> None:
        self.request, self.writer, self.renderer, self.req = request, writer, renderer, req
        self.resp: web.StreamResponse | None = None
        self.begun = False
        self.tracker = DeltaTracker()
        self.lock = asyncio.Lock()
        self.parsed_at = (0, 0.0)  # tokens and time of the last parse
        self.gone = False  # the client closed the connection

    @property
    def status(self) -> int:
        return 499 if self.gone else 200

    async def _write(self, data: bytes, prompt_tokens: int = 0) -> None:
        """Write, starting the response first; a vanished client only sets `gone`."""
        async with self.lock:
            if self.gone:
                return
            if self.resp is None:
                self.resp = web.StreamResponse(
                    headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
                )
                await self.resp.prepare(self.request)
            if data is not KEEPALIVE and not self.begun:
                self.begun = True
                data = self.writer.begin(prompt_tokens) + data
            try:
                await self.resp.write(data)
            except ConnectionError:
                self.gone = True

    async def on_tokens(self, prompt_ids: list[int], ids: list[int]) -> None:
        if self.gone:
            return
        n, now = len(ids), time.monotonic()
        last_n, last_t = self.parsed_at
        if n - last_n < max(8, last_n // 8) and now - last_t < PARSE_EVERY_S:
            return  # parsing is O(tokens): bound how often a long completion is re-parsed
        self.parsed_at = (n, now)
        try:
            parsed = self.renderer.parse_response(
                ids, tools=self.req.tools or None, prompt_ids=prompt_ids
            )
        except Exception:  # the final parse falls back to plain text; never lose the turn
            return
        # Once the reasoning is closed (or the answer began) it cannot grow: send all of it.
        done = parsed.reasoning_complete is True or bool(parsed.content or parsed.tool_calls)
        deltas = self.tracker.update(
            parsed.reasoning_content or "", parsed.content or "", reasoning_done=done
        )
        if deltas:
            await self._write(
                b"".join(self.writer.delta(ch, d) for ch, d in deltas), len(prompt_ids)
            )

    async def keepalive(self) -> None:
        await self._write(KEEPALIVE)

    async def finish(self, out: ModelOutput) -> web.StreamResponse:
        deltas = self.tracker.update(out.reasoning or "", out.content, final=True)
        body = b"".join(self.writer.delta(ch, d) for ch, d in deltas) + self.writer.end(out)
        await self._write(body, out.prompt_tokens)
        assert self.resp is not None
        if not self.gone:
            await self.resp.write_eof()
        return self.resp

    async def fail(self, err: ApiError) -> web.StreamResponse:
        if self.resp is None:
            raise err  # nothing sent yet: a plain HTTP error with its status
        await self._write(self.writer.error(err))
        if not self.gone:
            await self.resp.write_eof()
        return self.resp


async def stream_turn(
    live: LiveStream, turn: asyncio.Task[ModelOutput], keepalive_s: float
) -> tuple[web.StreamResponse, int]:
    """Drive `turn` to the end over `live`; returns the response and the status to count."""
    try:
        while not (await asyncio.wait({turn}, timeout=keepalive_s))[0]:
            await live.keepalive()
            if live.gone:  # nobody to answer: stop generating (finally aborts it)
                assert live.resp is not None
                return live.resp, 499
        out = turn.result()
    except ApiError as err:
        resp = await live.fail(err)
        return resp, 499 if live.gone else err.status
    finally:
        if not turn.done():  # the client left or the session closed: abort the generation
            turn.cancel()
    resp = await live.finish(out)
    return resp, live.status
