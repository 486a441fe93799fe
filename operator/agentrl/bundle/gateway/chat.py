"""The API-neutral shape of one model call, shared by the OpenAI and Anthropic front ends.

Each front end translates its request into a `ChatRequest` (messages in the `renderers`
message format, tools in OpenAI function form, SGLang sampling params) and shapes a
`ModelOutput` (the completion parsed by the renderer) into its own response. Pure: no I/O.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

# OpenAI's error code for a conversation longer than the model's context: agent frameworks
# look for it to trim or summarise their history, and the rehearsal to name the mistake.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
# What SGLang's refusals of a prompt too long for it say: the tokenizer manager's (a prompt
# at or over the context, or prompt + max_new_tokens over it) "context length", the
# scheduler's own (`validate_input_length`, a few tokens short of the context) "maximum
# allowed length". Neither reaches the agent as an error (`sglang.length_refusal`, `turns`):
# the prompt alone too long is a full context, prompt + max_new_tokens is asked for less; only
# an engine that refuses the smaller budget too (it never should) does.
CONTEXT_REFUSALS = ("context length", "maximum allowed length")


def context_refusal(message: str) -> bool:
    """Whether an engine's refusal is about the prompt's length (the agent may shorten it)."""
    return any(words in message for words in CONTEXT_REFUSALS)


class ApiError(Exception):
    """A client-facing error; each front end renders it in its own error shape. `code` is
    OpenAI's machine-readable error code where one applies (`context_length_exceeded`)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code


def bad_request(param: str, message: str) -> ApiError:
    """400 naming the parameter; the message is cut short (it may quote the agent's value)."""
    text = f"{param}: {message}"
    return ApiError(400, text if len(text) <= 300 else text[:297] + "...", param=param)


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tools: bool  # False for tool_choice "none": tool-call text stays content
    sampling: dict[str, Any]  # SGLang sampling_params from the request
    stream: bool
    model: str
    include_usage: bool = False
    logprobs: bool = False  # OpenAI `logprobs`: return the sampled tokens' logprobs
    # Anthropic's prefill: the last message is the start of the assistant's reply, which the
    # model continues (rendered up to the end of its text, not as a finished turn).
    continue_final: bool = False


@dataclass
class ToolCallOut:
    id: str
    name: str
    arguments: dict[str, Any] | str  # parsed JSON object, or the raw text when it was not JSON


@dataclass
class ModelOutput:
    content: str
    reasoning: str | None
    tool_calls: list[ToolCallOut] = field(default_factory=list)
    finish_reason: str = "stop"  # engine finish: stop, length, abort
    matched_stop: int | str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_logprobs: list[tuple[str, float]] | None = None  # (token text, logprob) if asked


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def output_from_parsed(parsed: Any, parse_tools: bool) -> tuple[str, list[ToolCallOut]]:
    """Content and tool calls from a renderers `ParsedResponse`. Malformed calls (and every
    call when tool_choice is "none") stay visible to the agent as text rather than vanish."""
    content = parsed.content or ""
    calls: list[ToolCallOut] = []
    for tc in parsed.tool_calls:
        args = tc.arguments if tc.arguments is not None else {}
        if (
            parse_tools
            and getattr(tc.status, "value", tc.status) == "ok"
            and isinstance(tc.name, str)
            and tc.name
            and _json_safe(args)
        ):
            calls.append(ToolCallOut(tc.id or new_id("call_"), tc.name, args))
        else:
            content = f"{content}\n{tc.raw}" if content else tc.raw
    return content, calls


def _json_safe(value: Any) -> bool:
    """Whether the APIs can send it back as JSON (integers past 64 bits cannot)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


# SGLang's sampling parameters that shape the distribution tokens are drawn from, with the
# values that leave it unchanged (SamplingParams defaults; top_k 0 is "off" for many clients).
NEUTRAL: dict[str, tuple[float, ...]] = {
    "temperature": (1.0,),
    "top_p": (1.0,),
    "top_k": (-1, 0),
    "min_p": (0.0,),
    "frequency_penalty": (0.0,),
    "presence_penalty": (0.0,),
    "repetition_penalty": (1.0,),
}


def merge_sampling(request: Mapping[str, Any], session: Mapping[str, Any]) -> dict[str, Any]:
    """The session's params (set by the trainer: they define the behaviour policy) win over the
    agent's, except that max_new_tokens is the smaller of the two budgets. A parameter that
    would change the sampling distribution and that the session does not set is refused
    (400) unless the agent sends its neutral value (then it is ignored): the trainer's
    logprobs must come from the distribution it trains, as with `response_format`."""
    merged: dict[str, Any] = {}
    for key, value in request.items():
        if key in session:
            continue
        neutral = NEUTRAL.get(key)
        if neutral is not None:
            if value in neutral:
                continue
            raise bad_request(
                key,
                f"{value!r} is not allowed: it would change the sampling distribution, and the "
                f"trainer learns from the distribution its session sets, which leaves {key} at "
                f"{neutral[0]:g}; leave it out or send {neutral[0]:g}",
            )
        merged[key] = value
    merged.update(session)
    budgets = [
        int(v)
        for v in (request.get("max_new_tokens"), session.get("max_new_tokens"))
        if v is not None
    ]
    if budgets:
        merged["max_new_tokens"] = min(budgets)
    return merged


def text_of(content: Any, param: str) -> str:
    """Text of a message content: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(param, "must be a string or a list of content parts")
    parts: list[str] = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            parts.append(part)
        elif (
            isinstance(part, dict)
            and part.get("type") in ("text", "input_text")
            and isinstance(part.get("text"), str)
        ):
            parts.append(part["text"])
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise bad_request(
                f"{param}[{i}]", f"content part type {kind!r} is not supported (text only)"
            )
    return "".join(parts)


def boolean(body: Mapping[str, Any], key: str) -> bool:
    """An optional JSON boolean (absent or null: false); a string "true" is not one."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(key, f"must be a boolean, got {value!r}")
    return value


def string(body: Mapping[str, Any], key: str) -> str:
    """An optional JSON string (absent or null: empty)."""
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad_request(key, f"must be a string, got {type(value).__name__}")
    return value


def obj(value: Any, param: str) -> dict[str, Any] | None:
    """An optional JSON object (null: None)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request(param, f"must be an object, got {type(value).__name__}")
    return value


def array_of(value: Any, param: str) -> list[Any]:
    """An optional JSON array (null: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(param, f"must be a list, got {type(value).__name__}")
    return value


INT64 = (-(2**63), 2**63 - 1)


def seed(body: Mapping[str, Any], key: str) -> int | None:
    """An optional 64-bit integer seed."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not INT64[0] <= value <= INT64[1]:
        raise bad_request(key, f"must be a 64-bit integer, got {value!r}")
    return value


def number(body: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise bad_request(key, f"must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def integer(body: Mapping[str, Any], key: str, lo: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise bad_request(key, f"must be an integer >= {lo}, got {value!r}")
    return value


def positive_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(key, f"must be a positive integer, got {value!r}")
    return value


def stop_list(value: Any, param: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise bad_request(param, "must be a string or a list of strings")
