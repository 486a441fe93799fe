"""Streamed answers (`stream: true`) that survive long generations.

The completion is parsed as a whole (reasoning and tool calls need every token), so the
content arrives at the end; until then, if the turn runs longer than `keepalive_s`, the
response starts and an SSE comment is written every `keepalive_s` so SDK read timeouts and
proxies do not cut a minutes-long generation (which would abort it). Errors before the
response started keep their HTTP status; after, they are sent in-band in the API's shape.
"""

from __future__ import annotations

import asyncio
from types import ModuleType

from aiohttp import web

from agentrl.bundle.gateway.chat import ApiError, ChatRequest, ModelOutput

KEEPALIVE = b": keep-alive\n\n"


async def _start(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


async def stream_turn(
    request: web.Request,
    front: ModuleType,
    turn: asyncio.Task[ModelOutput],
    req: ChatRequest,
    *,
    model: str,
    keepalive_s: float,
) -> tuple[web.StreamResponse, int]:
    """Answer `turn` as SSE; returns the response and the status to count it under."""
    resp: web.StreamResponse | None = None
    try:
        while not (await asyncio.wait({turn}, timeout=keepalive_s))[0]:
            resp = resp or await _start(request)
            await resp.write(KEEPALIVE)
        out = turn.result()
    except ApiError as err:
        if resp is None:
            raise
        await resp.write(front.stream_error(err))
        await resp.write_eof()
        return resp, err.status
    finally:
        if not turn.done():  # the client left or the session closed: abort the generation
            turn.cancel()
    resp = resp or await _start(request)
    await resp.write(b"".join(front.stream_events(out, model, req.include_usage)))
    await resp.write_eof()
    return resp, 200
