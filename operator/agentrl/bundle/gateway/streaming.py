"""Streamed answers (`stream: true`): reasoning and content as they are sampled, in time
linear in the answer's length.

The engine is called with `/generate` streaming. The sampled ids are decoded incrementally
(`Detokenizer`: a few tokens of context, never the whole answer), and the new text goes to
the channel (reasoning or content) that the renderer's own parser last found open. The
parser itself (the same one as the final answer's) runs on the whole completion only when
its structure may have changed: a token that is not plain text (an added token such as
`</think>` or `<tool_call>`, never the stop token, which the final answer parses) or a
reasoning tag spelled as text, at most once per 1/8 growth of the answer. Text near the end
is held back (a tag may be half sampled), and only extensions of what was already sent go
out, so the stream never has to take anything back; tool calls go out once complete, at the
end. If nothing happens for `keepalive_s`, an SSE comment keeps SDK read timeouts and proxies
from cutting a long generation (which would abort it). Errors before the first byte keep
their HTTP status; after it they are sent in-band in the API's shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from aiohttp import web

from agentrl.bundle.gateway.chat import ApiError, ChatRequest, ModelOutput
from agentrl.bundle.gateway.tokenizer import added_token_ids

KEEPALIVE = b": keep-alive\n\n"
HOLD_BACK = 16  # characters kept until more text (or the end) shows they are not a tag
REPARSE_GROWTH = 8  # a full parse at most once per 1/8 growth of the completion
TEXT_MARKERS = ("<think>", "</think>")  # reasoning tags some families read from text
CONTEXT_TOKENS = 4  # tokens decoded before the new ones, so each piece decodes in context
FLUSH_EVERY_S = 0.05  # deltas go out at most this often
# A read that wakes for the next flush may come a hair early (timer rounding): flush then
# rather than arm a timer for the rest.
FLUSH_EARLY_S = 0.001


class Detokenizer:
    """The text of a growing list of ids, one new piece per call, each decoded with a few
    tokens of context (a tokenizer may spell a token differently at the start of a text, and
    a character may span tokens: a piece that ends inside one waits for the next token)."""

    def __init__(self, tokenizer: Any) -> None:
        self.decode = tokenizer.decode
        self.start = 0  # context: ids[start:read] were decoded already
        self.read = 0
        self.pieces: list[str] = []

    def feed(self, ids: list[int]) -> str:
        if len(ids) <= self.read:
            return ""
        before = str(self.decode(ids[self.start : self.read])) if self.read > self.start else ""
        text = str(self.decode(ids[self.start :]))
        if len(text) <= len(before) or text.endswith("\ufffd") or not text.startswith(before):
            return ""  # a character is still incomplete
        piece = text[len(before) :]
        self.read = len(ids)
        self.start = max(self.start, self.read - CONTEXT_TOKENS)
        self.pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        if len(self.pieces) > 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""


class DeltaTracker:
    """What of each channel (reasoning, content) was sent, and what waits: only extensions of
    what was sent go out, and the last `HOLD_BACK` characters wait until more text (or the
    end) shows they are not the start of a tag. Appending costs the new text only."""

    def __init__(self) -> None:
        self.sent: dict[str, list[str]] = {"reasoning": [], "content": []}
        self.waiting = {"reasoning": "", "content": ""}  # after what was sent, left-stripped

    def sent_text(self, channel: str) -> str:
        parts = self.sent[channel]
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    def _flush(self, channel: str, final: bool) -> str:
        waiting = self.waiting[channel]
        out = waiting if final else waiting[: max(0, len(waiting) - HOLD_BACK)]
        if out:
            self.sent[channel].append(out)
            self.waiting[channel] = waiting[len(out) :]
        return out

    def set(self, channel: str, text: str, final: bool = False) -> str | None:
        """The channel's whole text (from a parse): the new part to send, or None when it no
        longer extends what was sent (the parse changed its mind: wait for the end)."""
        text = text.lstrip()
        sent = self.sent_text(channel)
        if not text.startswith(sent):
            return None
        self.waiting[channel] = text[len(sent) :]
        return self._flush(channel, final)

    def append(self, channel: str, text: str) -> str:
        """More text of the channel, right after what it had."""
        if not self.sent[channel] and not self.waiting[channel]:
            text = text.lstrip()
        self.waiting[channel] += text
        return self._flush(channel, False)

    def update(
        self, reasoning: str, content: str, final: bool = False, reasoning_done: bool = False
    ) -> list[tuple[str, str]]:
        """Deltas for both channels' whole texts; `reasoning_done` flushes the reasoning
        before content starts."""
        out = [
            ("reasoning", self.set("reasoning", reasoning, final or reasoning_done)),
            ("content", self.set("content", content, final)),
        ]
        return [(ch, d) for ch, d in out if d]


class Preview:
    """The deltas a growing completion shows, kept up to date in time linear in its length
    (see the module docstring). Best effort: the final answer is always parsed whole."""

    def __init__(
        self,
        renderer: Any,
        tokenizer: Any,
        req: ChatRequest,
        prompt_ids: Sequence[int],
        stop_ids: Collection[int] = (),
    ) -> None:
        self.renderer, self.req, self.prompt_ids = renderer, req, prompt_ids
        self.detok = Detokenizer(tokenizer) if tokenizer is not None else None
        markers = added_token_ids(tokenizer) if tokenizer is not None else None
        # Without a tokenizer to tell plain text apart, every token counts as structure.
        self.markers = None if markers is None else frozenset(markers) - frozenset(stop_ids)
        self.tracker = DeltaTracker()
        self.done = 0  # ids seen
        self.parsed_at = -1  # ids at the last whole parse
        self.dirty = True  # the structure may have changed since then
        self.channel: str | None = None  # where plain text goes; None: nowhere until a parse
        self.tail = ""  # the end of the text, to find a tag split between pieces
        self.broken = False

    def update(self, ids: list[int]) -> list[tuple[str, str]]:
        if self.broken or len(ids) <= self.done:
            return []
        try:
            return self._update(ids)
        except Exception:  # a preview never fails the turn: the final parse answers it
            self.broken = True
            return []

    def _update(self, ids: list[int]) -> list[tuple[str, str]]:
        new = ids[self.done :]
        self.done = len(ids)
        if self.markers is None or not self.markers.isdisjoint(new):
            self.dirty = True
        piece = self.detok.feed(ids) if self.detok is not None else ""
        if piece:  # a tag spelled as text, ending in the new piece (it may start before)
            window = self.tail + piece
            since = len(self.tail)
            if any(window.find(m, max(0, since - len(m) + 1)) >= 0 for m in TEXT_MARKERS):
                self.dirty = True
            self.tail = window[-16:]
        if self.dirty:
            if len(ids) < self.parsed_at + max(1, self.parsed_at // REPARSE_GROWTH):
                return []  # parsed recently: wait for the answer to grow first
            return self._parse(ids)
        if self.channel is None or not piece:
            return []
        delta = self.tracker.append(self.channel, piece)
        return [(self.channel, delta)] if delta else []

    def _parse(self, ids: list[int]) -> list[tuple[str, str]]:
        parsed = self.renderer.parse_response(
            ids, tools=self.req.tools or None, prompt_ids=self.prompt_ids
        )
        self.parsed_at, self.dirty = len(ids), False
        texts = {"reasoning": parsed.reasoning_content or "", "content": parsed.content or ""}
        # Once the reasoning is closed (or the answer began) it cannot grow: send all of it.
        done = parsed.reasoning_complete is True or bool(texts["content"] or parsed.tool_calls)
        # The channel plain text would extend; none once a tool call began (sent at the end).
        channel = None if parsed.tool_calls else "content" if done else "reasoning"
        if channel is not None:
            texts[channel] = texts[channel].rstrip()  # its blanks come back from the text below
        deltas: list[tuple[str, str]] = []
        for name, text in texts.items():
            delta = self.tracker.set(name, text, final=name == "reasoning" and done)
            if delta:
                deltas.append((name, delta))
            elif delta is None and name == channel:
                channel = None  # the parse no longer extends what was sent: wait for the end
        # Plain text extends the open channel only if the parse's text for it is the end of
        # the decoded text (up to the trailing blanks, which the parser may strip and which
        # then go back to the channel). A parser that cannot tell whether reasoning is open
        # has not chosen a channel until one of them shows text: parse again as it grows.
        self.channel = None
        if channel is None or self.detok is None:
            return deltas
        if parsed.reasoning_complete is None and not texts[channel]:
            self.dirty = True
            return deltas
        text = self.detok.text
        kept = text.rstrip()
        if kept.endswith(texts[channel]):
            self.channel = channel
            delta = self.tracker.append(channel, text[len(kept) :])
            if delta:
                deltas.append((channel, delta))
        return deltas


class LiveStream:
    """One client's SSE response, fed by the engine stream and closed with the parsed answer.
    Deltas go out at most every `FLUSH_EVERY_S` (a reader sees no difference; a fast engine's
    many chunks then cost one decode and one write)."""

    def __init__(
        self,
        request: web.Request,
        writer: Any,
        renderer: Any,
        req: ChatRequest,
        *,
        tokenizer: Any = None,
        stop_ids: Collection[int] = (),
    ) -> None:
        self.request, self.writer, self.renderer, self.req = request, writer, renderer, req
        self.tokenizer, self.stop_ids = tokenizer, stop_ids
        self.resp: web.StreamResponse | None = None
        self.begun = False
        self.preview: Preview | None = None  # made with the first tokens (it needs the prompt)
        self.ids: list[int] = []  # the newest ids the engine reported
        self.prompt_tokens = 0
        self.lock = asyncio.Lock()
        self.gone = False  # the client closed the connection
        self.flush_at = 0.0  # the next flush may not come earlier
        self._timer: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task[None] | None = None

    @property
    def status(self) -> int:
        return 499 if self.gone else 200

    async def _write(self, data: bytes, prompt_tokens: int = 0) -> None:
        async with self.lock:
            await self._write_locked(data, prompt_tokens)

    async def _write_locked(self, data: bytes, prompt_tokens: int = 0) -> None:
        """Write, starting the response first; a vanished client only sets `gone`."""
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

    async def on_tokens(self, prompt_ids: Sequence[int], ids: list[int]) -> float | None:
        """The ids sampled so far (a list that only grows); what they add goes out now, or
        when the last flush is `FLUSH_EVERY_S` old. Returns when the next flush may come:
        the engine stream is read no sooner (its chunks wait in the connection)."""
        if self.gone:
            return None
        if self.preview is None:
            self.preview = Preview(
                self.renderer, self.tokenizer, self.req, prompt_ids, self.stop_ids
            )
        self.ids, self.prompt_tokens = ids, len(prompt_ids)
        loop = asyncio.get_running_loop()
        wait = self.flush_at - loop.time()
        if wait <= FLUSH_EARLY_S:
            await self._flush()
        elif self._timer is None and (self._flusher is None or self._flusher.done()):
            self._timer = loop.call_later(wait, self._wake)
        return self.flush_at

    def _wake(self) -> None:
        self._timer = None
        self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        async with self.lock:
            self.flush_at = asyncio.get_running_loop().time() + FLUSH_EVERY_S
            assert self.preview is not None
            deltas = self.preview.update(self.ids)
            if deltas:
                frames = b"".join(self.writer.delta(ch, d) for ch, d in deltas)
                await self._write_locked(frames, self.prompt_tokens)

    async def settle(self) -> None:
        """No flush pending or running (before the last write, and when the turn ends)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flusher is not None and not self._flusher.done():
            await asyncio.wait({self._flusher})

    async def keepalive(self) -> None:
        await self._write(KEEPALIVE)

    async def finish(self, out: ModelOutput) -> web.StreamResponse:
        await self.settle()
        tracker = self.preview.tracker if self.preview is not None else DeltaTracker()
        deltas = tracker.update(out.reasoning or "", out.content, final=True)
        body = b"".join(self.writer.delta(ch, d) for ch, d in deltas) + self.writer.end(out)
        await self._write(body, out.prompt_tokens)
        assert self.resp is not None
        if not self.gone:
            await self.resp.write_eof()
        return self.resp

    async def fail(self, err: ApiError) -> web.StreamResponse:
        await self.settle()
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
        await live.settle()  # no flush left to write after the response ended
    resp = await live.finish(out)
    return resp, live.status
