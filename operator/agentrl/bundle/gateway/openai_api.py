"""OpenAI chat-completions front end: request translation and response shapes (pure).

Accepts what the official `openai` SDK sends (string or text-part content, assistant
`tool_calls`, `tool` messages, `tools`, `tool_choice`, `stream`, `stream_options`) and
answers in the same shapes, streaming included.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import orjson

from agentrl.bundle.gateway.chat import (
    ApiError,
    ChatRequest,
    ModelOutput,
    array_of,
    bad_request,
    boolean,
    integer,
    new_id,
    number,
    obj,
    positive_int,
    seed,
    stop_list,
    string,
    text_of,
)

ROLES = ("system", "developer", "user", "assistant", "tool")
FINISH = {"stop": "stop", "length": "length", "abort": "stop"}


def _message(m: Any, i: int) -> dict[str, Any]:
    p = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad_request(p, "must be an object")
    role = m.get("role")
    if role not in ROLES:
        raise bad_request(f"{p}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    out: dict[str, Any] = {
        "role": "system" if role == "developer" else role,
        "content": text_of(m.get("content"), f"{p}.content"),
    }
    if role == "assistant":
        reasoning = m.get("reasoning_content") or m.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out["reasoning_content"] = reasoning
        calls = array_of(m.get("tool_calls"), f"{p}.tool_calls")
        if calls:
            out["tool_calls"] = [
                _tool_call(tc, f"{p}.tool_calls[{j}]") for j, tc in enumerate(calls)
            ]
    if role == "tool":
        if not isinstance(m.get("tool_call_id"), str):
            raise bad_request(f"{p}.tool_call_id", "is required for tool messages")
        out["tool_call_id"] = m["tool_call_id"]
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def _tool_call(tc: Any, p: str) -> dict[str, Any]:
    fn = tc.get("function") if isinstance(tc, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad_request(f"{p}.function.name", "is required")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):  # keep the agent's own JSON text: it is what the model emitted
        with contextlib.suppress(orjson.JSONDecodeError):
            args = orjson.loads(args) if args.strip() else {}
    elif not isinstance(args, dict):
        raise bad_request(f"{p}.function.arguments", "must be a JSON string or an object")
    call_id = tc.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise bad_request(f"{p}.id", "must be a string")
    return {
        "type": "function",
        "id": call_id or "",
        "function": {"name": fn["name"], "arguments": args},
    }


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request("tools", "must be a list")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if (
            not isinstance(t, dict)
            or t.get("type") != "function"
            or not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
        ):
            raise bad_request(
                f"tools[{i}]", 'must be {"type": "function", "function": {"name": ..., ...}}'
            )
        obj(fn.get("parameters"), f"tools[{i}].function.parameters")
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise bad_request(f"tools[{i}].function.description", "must be a string")
    return tools or None


def _tool_choice(body: Mapping[str, Any], tools: list[dict[str, Any]] | None) -> bool:
    """Whether tool calls are parsed. Generation is not constrained: a required or named
    tool_choice is honoured only as far as the model follows the rendered tool prompt."""
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "required"):
        return tools is not None
    if choice == "none":
        return False
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = obj(choice.get("function"), "tool_choice.function") or {}
        name = fn.get("name")
        if not isinstance(name, str) or not any(t["function"]["name"] == name for t in tools or []):
            raise bad_request("tool_choice.function.name", f"{name!r} is not in tools")
        return True
    raise bad_request(
        "tool_choice", 'must be "none", "auto", "required" or {"type": "function", ...}'
    )


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    """Options we cannot honour exactly are refused, never silently ignored."""
    n = body.get("n")
    if n is not None and (type(n) is not int or n != 1):
        raise bad_request("n", "only n=1 is supported; send one request per sample")
    response_format = obj(body.get("response_format"), "response_format") or {}
    if response_format.get("type", "text") != "text":
        raise bad_request(
            "response_format",
            "structured output is not supported: constrained decoding would change the "
            "distribution the trainer learns from; ask for JSON in the prompt instead",
        )
    for legacy in ("functions", "function_call"):
        if body.get(legacy) is not None:  # ignored, the model would never see the functions
            raise bad_request(
                legacy,
                'is the deprecated form of "tools" / "tool_choice" and is not supported; '
                'send {"type": "function", "function": {...}} entries in "tools"',
            )
    if integer(body, "top_logprobs", 0):
        raise bad_request("top_logprobs", "is not supported (the sampled tokens' logprobs are)")
    if obj(body.get("logit_bias"), "logit_bias"):
        raise bad_request(
            "logit_bias",
            "is not supported: biasing logits would change the distribution the trainer "
            "learns from",
        )


def parse_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad_request("body", "must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad_request("messages", "must be a non-empty list")
    _refuse_unsupported(body)
    tools = _tools(body)
    sampling: dict[str, Any] = {}
    max_tokens = positive_int(body, "max_completion_tokens") or positive_int(body, "max_tokens")
    for key, value in (
        ("max_new_tokens", max_tokens),
        ("temperature", number(body, "temperature", 0, 2)),
        ("top_p", number(body, "top_p", 0, 1)),
        ("frequency_penalty", number(body, "frequency_penalty", -2, 2)),
        ("presence_penalty", number(body, "presence_penalty", -2, 2)),
        # SGLang/vLLM extensions (the SDK's extra_body); the session policy applies to them too.
        ("top_k", integer(body, "top_k", -1)),
        ("min_p", number(body, "min_p", 0, 1)),
        ("repetition_penalty", number(body, "repetition_penalty", 0, 2)),
        ("stop", stop_list(body.get("stop"), "stop")),
        ("sampling_seed", seed(body, "seed")),
    ):
        if value is not None:
            sampling[key] = value
    opts = obj(body.get("stream_options"), "stream_options") or {}
    return ChatRequest(
        messages=[_message(m, i) for i, m in enumerate(msgs)],
        tools=tools,
        parse_tools=_tool_choice(body, tools),
        sampling=sampling,
        stream=boolean(body, "stream"),
        model=string(body, "model"),
        include_usage=boolean(opts, "include_usage"),
        logprobs=boolean(body, "logprobs"),
    )


def _usage(out: ModelOutput) -> dict[str, int]:
    return {
        "prompt_tokens": out.prompt_tokens,
        "completion_tokens": out.completion_tokens,
        "total_tokens": out.prompt_tokens + out.completion_tokens,
    }


def _calls(out: ModelOutput) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {
                "name": c.name,
                "arguments": c.arguments
                if isinstance(c.arguments, str)
                else orjson.dumps(c.arguments).decode(),
            },
        }
        for c in out.tool_calls
    ]


def _logprobs(out: ModelOutput) -> dict[str, Any] | None:
    if out.token_logprobs is None:
        return None
    content = [
        {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
        for t, lp in out.token_logprobs
    ]
    return {"content": content}


def finish_reason(out: ModelOutput) -> str:
    return "tool_calls" if out.tool_calls else FINISH.get(out.finish_reason, "stop")


def response(out: ModelOutput, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": out.content or (None if out.tool_calls else ""),
    }
    if out.reasoning is not None:
        message["reasoning_content"] = out.reasoning
    if out.tool_calls:
        message["tool_calls"] = _calls(out)
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(out),
                "logprobs": _logprobs(out),
            }
        ],
        "usage": _usage(out),
    }


class StreamWriter:
    """SSE chunks of one streamed chat completion: role, reasoning and content deltas as they
    are sampled, then tool calls, finish reason, usage and [DONE]."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.base = {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self.include_usage = include_usage

    def _frame(
        self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None
    ) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return b"data: " + orjson.dumps({**self.base, "choices": [choice]}) + b"\n\n"

    def begin(self, prompt_tokens: int) -> bytes:
        return self._frame({"role": "assistant", "content": ""})

    def delta(self, channel: str, text: str) -> bytes:
        return self._frame({"reasoning_content" if channel == "reasoning" else "content": text})

    def end(self, out: ModelOutput) -> bytes:
        frames = [
            self._frame({"tool_calls": [{"index": i, **c}]}) for i, c in enumerate(_calls(out))
        ]
        frames.append(self._frame({}, finish_reason(out), _logprobs(out)))
        if self.include_usage:
            usage = {**self.base, "choices": [], "usage": _usage(out)}
            frames.append(b"data: " + orjson.dumps(usage) + b"\n\n")
        frames.append(b"data: [DONE]\n\n")
        return b"".join(frames)

    def error(self, err: ApiError) -> bytes:
        """An error after the stream started: an in-band error object, then [DONE]."""
        return b"data: " + orjson.dumps(error_body(err)) + b"\n\ndata: [DONE]\n\n"


def error_body(err: ApiError) -> dict[str, Any]:
    return {
        "error": {
            "message": err.message,
            "type": err.kind,
            "param": err.param,
            "code": err.code or err.status,
        }
    }
