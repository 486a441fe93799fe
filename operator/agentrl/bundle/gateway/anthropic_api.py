"""Anthropic messages front end: request translation (pure); answers in `anthropic_out`.

Accepts what the official `anthropic` SDK and Claude Code send: a `system` string or text
blocks, content blocks (text, thinking, tool_use, tool_result; `cache_control` ignored),
`tools` with `input_schema`, `tool_choice`, `stop_sequences`, `stream`. Thinking blocks in
the history become the assistant's `reasoning_content`; the model's reasoning comes back as
a `thinking` block. A final assistant message (a prefill) is continued: the answer is what
the model adds to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrl.bundle.gateway.anthropic_out import StreamWriter, error_body, response
from agentrl.bundle.gateway.chat import (
    ChatRequest,
    bad_request,
    boolean,
    number,
    obj,
    positive_int,
    stop_list,
    string,
    text_of,
)


def _str(block: Mapping[str, Any], key: str, p: str, required: bool = False) -> str:
    """A string field of a content block (absent: empty, unless required)."""
    value = block.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise bad_request(f"{p}.{key}", "must be a string" + (" (required)" if required else ""))
    return value


def _tool_result_text(block: Mapping[str, Any], p: str) -> str:
    return text_of(block.get("content"), f"{p}.content")


def _assistant(blocks: list[Any], p: str) -> dict[str, Any]:
    text, thinking, calls = [], [], []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            text.append(_str(b, "text", f"{p}[{j}]"))
        elif kind == "thinking":
            thinking.append(_str(b, "thinking", f"{p}[{j}]"))
        elif kind == "redacted_thinking":
            _str(b, "data", f"{p}[{j}]")  # opaque: nothing the model can be shown
        elif kind == "tool_use":
            if not isinstance(b.get("name"), str):
                raise bad_request(f"{p}[{j}].name", "is required for tool_use blocks")
            calls.append(
                {
                    "type": "function",
                    "id": _str(b, "id", f"{p}[{j}]"),
                    "function": {
                        "name": b["name"],
                        "arguments": obj(b.get("input"), f"{p}[{j}].input") or {},
                    },
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
                    "tool_call_id": _str(b, "tool_use_id", f"{p}[{j}]"),
                }
            )
        elif kind == "text":
            text.append(_str(b, "text", f"{p}[{j}]"))
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
                    "description": _str(t, "description", f"tools[{i}]"),
                    "parameters": obj(t.get("input_schema"), f"tools[{i}].input_schema")
                    or {"type": "object"},
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
    name = choice.get("name") if isinstance(choice, dict) else None
    if kind == "tool" and (
        not isinstance(name, str) or not any(t["function"]["name"] == name for t in tools or [])
    ):
        raise bad_request("tool_choice.name", f"{name!r} is not in tools")
    return kind != "none" and tools is not None


def _prefill(messages: list[dict[str, Any]]) -> bool:
    """Whether the last message is the start of the assistant's reply (a prefill), which the
    model continues. A tool_use there has no tool_result yet: refused, as Anthropic does."""
    last = messages[-1]
    if last["role"] != "assistant":
        return False
    if last.get("tool_calls"):
        raise bad_request(
            f"messages[{len(messages) - 1}].content",
            "tool_use blocks must be followed by a user message with their tool_result "
            "blocks; a final assistant message is continued (a prefill) and may hold only "
            "text and thinking",
        )
    return True


def _refuse_structured_output(body: Mapping[str, Any]) -> None:
    """Structured output is constrained decoding, refused as OpenAI's `response_format` is;
    `output_config.effort` (how hard Claude thinks) changes nothing here and is ignored."""
    config = obj(body.get("output_config"), "output_config") or {}
    for param, value in (
        ("output_config.format", config.get("format")),
        ("output_format", body.get("output_format")),  # the structured-outputs beta's name
    ):
        if value is not None:
            raise bad_request(
                param,
                "structured output is not supported: constrained decoding would change the "
                "distribution the trainer learns from; ask for JSON in the prompt instead",
            )


def parse_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request("body", "must be a JSON object")
    _refuse_structured_output(body)
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
    messages = _messages(body)
    return ChatRequest(
        messages=messages,
        tools=tools,
        parse_tools=_parse_tools(body, tools),
        sampling=sampling,
        stream=boolean(body, "stream"),
        model=string(body, "model"),
        continue_final=_prefill(messages),
    )


__all__ = ["StreamWriter", "error_body", "parse_request", "response"]
