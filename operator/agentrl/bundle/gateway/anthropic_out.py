"""Anthropic messages front end, answers: the message, its SSE stream and errors (pure).

The model's reasoning comes back as a `thinking` block, its text as a `text` block and each
parsed tool call as a `tool_use` block, streamed as deltas while they are sampled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from agentrl.bundle.gateway.chat import ApiError, ModelOutput, new_id

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    410: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def _stop(out: ModelOutput) -> tuple[str, str | None]:
    if out.tool_calls:
        return "tool_use", None
    if out.finish_reason == "length":
        return "max_tokens", None
    if isinstance(out.matched_stop, str):
        return "stop_sequence", out.matched_stop
    return "end_turn", None


def _blocks(out: ModelOutput) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if out.reasoning:
        blocks.append({"type": "thinking", "thinking": out.reasoning, "signature": ""})
    if out.content or not out.tool_calls:
        blocks.append({"type": "text", "text": out.content})
    for c in out.tool_calls:
        args = c.arguments if isinstance(c.arguments, dict) else {"_raw": c.arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": "toolu_" + c.id.removeprefix("call_"),
                "name": c.name,
                "input": args,
            }
        )
    return blocks


def response(out: ModelOutput, model: str) -> dict[str, Any]:
    stop_reason, stop_sequence = _stop(out)
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(out),
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {"input_tokens": out.prompt_tokens, "output_tokens": out.completion_tokens},
    }


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class StreamWriter:
    """SSE events of one streamed message: message_start, a thinking and a text block filled
    by deltas as they are sampled, tool_use blocks, message_delta, message_stop."""

    def __init__(self, model: str, include_usage: bool = True) -> None:
        self.id, self.model = new_id("msg_"), model
        self.index = -1  # the open block, if `self.open` is set
        self.open: str | None = None

    def begin(self, prompt_tokens: int) -> bytes:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 0},
        }
        return _sse("message_start", {"type": "message_start", "message": message})

    def _switch(self, kind: str | None) -> bytes:
        out = b""
        if self.open is not None:
            out += _sse("content_block_stop", {"type": "content_block_stop", "index": self.index})
        self.open = kind
        if kind is not None:
            self.index += 1
            empty = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "reasoning"
                else {"type": "text", "text": ""}
            )
            out += _sse(
                "content_block_start",
                {"type": "content_block_start", "index": self.index, "content_block": empty},
            )
        return out

    def delta(self, channel: str, text: str) -> bytes:
        head = self._switch(channel) if channel != self.open else b""
        body = (
            {"type": "thinking_delta", "thinking": text}
            if channel == "reasoning"
            else {"type": "text_delta", "text": text}
        )
        return head + _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": self.index, "delta": body},
        )

    def _tool_use(self, block: dict[str, Any]) -> bytes:
        """One complete tool_use block: start, its input as one JSON delta, stop."""
        self.index += 1
        i = self.index
        delta = {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}
        start = {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}
        return (
            _sse("content_block_start", start)
            + _sse(
                "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
            )
            + _sse("content_block_stop", {"type": "content_block_stop", "index": i})
        )

    def end(self, out: ModelOutput) -> bytes:
        parts = [self._switch(None)]
        if self.index < 0 and not out.tool_calls:  # an empty answer is still one text block
            parts += [self._switch("content"), self._switch(None)]
        parts += [self._tool_use(b) for b in _blocks(out) if b["type"] == "tool_use"]
        stop_reason, stop_sequence = _stop(out)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"output_tokens": out.completion_tokens},
        }
        parts += [_sse("message_delta", delta), _sse("message_stop", {"type": "message_stop"})]
        return b"".join(parts)

    def error(self, err: ApiError) -> bytes:
        """An error after the stream started: Anthropic's in-band `error` event."""
        return _sse("error", error_body(err))


def error_body(err: ApiError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(
        err.status, "api_error" if err.status >= 500 else "invalid_request_error"
    )
    return {"type": "error", "error": {"type": kind, "message": err.message}}
