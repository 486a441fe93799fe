"""Anthropic messages front end: request translation and response shapes (pure).

Accepts what the official `anthropic` SDK and Claude Code send: a `system` string or text
blocks, content blocks (text, thinking, tool_use, tool_result; `cache_control` ignored),
`tools` with `input_schema`, `tool_choice`, `stop_sequences`, `stream`. Thinking blocks in
the history become the assistant's `reasoning_content`; the model's reasoning comes back as
a `thinking` block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from agentrl.bundle.gateway.chat import (
    ApiError,
    ChatRequest,
    ModelOutput,
    bad_request,
    new_id,
    number,
    positive_int,
    stop_list,
    text_of,
)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    410: "not_found_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def _tool_result_text(block: Mapping[str, Any], p: str) -> str:
    return text_of(block.get("content"), f"{p}.content")


def _assistant(blocks: list[Any], p: str) -> dict[str, Any]:
    text, thinking, calls = [], [], []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            text.append(str(b.get("text", "")))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(str(b.get("thinking", "")))
        elif kind == "tool_use":
            if not isinstance(b.get("name"), str):
                raise bad_request(f"{p}[{j}].name", "is required for tool_use blocks")
            calls.append(
                {
                    "type": "function",
                    "id": str(b.get("id") or ""),
                    "function": {"name": b["name"], "arguments": b.get("input") or {}},
                }
            )
        else:
            raise bad_request(
                f"{p}[{j}].type", f"block type {kind!r} is not supported in assistant messages"
            )
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user(blocks: list[Any], p: str) -> list[dict[str, Any]]:
    """Tool results become tool messages (in order), the remaining text one user message."""
    out: list[dict[str, Any]] = []
    text: list[str] = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "tool_result":
            out.append(
                {
                    "role": "tool",
                    "content": _tool_result_text(b, f"{p}[{j}]"),
                    "tool_call_id": str(b.get("tool_use_id") or ""),
                }
            )
        elif kind == "text":
            text.append(str(b.get("text", "")))
        else:
            raise bad_request(
                f"{p}[{j}].type",
                f"block type {kind!r} is not supported (text and tool_result only)",
            )
    if text or not out:
        out.append({"role": "user", "content": "".join(text)})
    return out


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad_request("messages", "must be a non-empty list")
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        out.append({"role": "system", "content": text_of(system, "system")})
    for i, m in enumerate(msgs):
        p = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise bad_request(f"{p}.role", f'must be "user" or "assistant", got {role!r}')
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise bad_request(f"{p}.content", "must be a string or a list of content blocks")
        out.extend(
            [_assistant(blocks, f"{p}.content")]
            if role == "assistant"
            else _user(blocks, f"{p}.content")
        )
    return out


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request("tools", "must be a list")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise bad_request(f"tools[{i}].name", "is required")
        out.append(
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {"type": "object"},
                },
            }
        )
    return out or None


def _parse_tools(body: Mapping[str, Any], tools: list[dict[str, Any]] | None) -> bool:
    choice = body.get("tool_choice")
    if choice is None:
        return tools is not None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise bad_request("tool_choice.type", 'must be "auto", "any", "tool" or "none"')
    if kind == "tool" and not any(t["function"]["name"] == choice.get("name") for t in tools or []):
        raise bad_request("tool_choice.name", f"{choice.get('name')!r} is not in tools")
    return kind != "none" and tools is not None


def parse_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request("body", "must be a JSON object")
    max_tokens = positive_int(body, "max_tokens")
    if max_tokens is None:
        raise bad_request("max_tokens", "is required")
    tools = _tools(body)
    sampling: dict[str, Any] = {"max_new_tokens": max_tokens}
    for key, value in (
        ("temperature", number(body, "temperature", 0, 1)),
        ("top_p", number(body, "top_p", 0, 1)),
        ("top_k", positive_int(body, "top_k")),
        ("stop", stop_list(body.get("stop_sequences"), "stop_sequences")),
    ):
        if value is not None:
            sampling[key] = value
    return ChatRequest(
        messages=_messages(body),
        tools=tools,
        parse_tools=_parse_tools(body, tools),
        sampling=sampling,
        stream=bool(body.get("stream")),
        model=str(body.get("model") or ""),
    )


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

    def end(self, out: ModelOutput) -> bytes:
        parts = [self._switch(None)]
        if self.index < 0 and not out.tool_calls:  # an empty answer is still one text block
            parts += [self._switch("content"), self._switch(None)]
        for block in _blocks(out):
            if block["type"] != "tool_use":
                continue
            self.index += 1
            parts.append(
                _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": self.index,
                        "content_block": {**block, "input": {}},
                    },
                )
            )
            delta = {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block["input"]).decode(),
            }
            parts.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": self.index, "delta": delta},
                )
            )
            parts.append(
                _sse("content_block_stop", {"type": "content_block_stop", "index": self.index})
            )
        stop_reason, stop_sequence = _stop(out)
        parts.append(
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": {"output_tokens": out.completion_tokens},
                },
            )
        )
        parts.append(_sse("message_stop", {"type": "message_stop"}))
        return b"".join(parts)

    def error(self, err: ApiError) -> bytes:
        """An error after the stream started: Anthropic's in-band `error` event."""
        return _sse("error", error_body(err))


def error_body(err: ApiError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(
        err.status, "api_error" if err.status >= 500 else "invalid_request_error"
    )
    return {"type": "error", "error": {"type": kind, "message": err.message}}
