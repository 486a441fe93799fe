"""A corpus of malformed requests, each answered with its 4xx, never a 500 or a forward.

Every case goes over real HTTP (raw bytes where a client library would refuse to send them,
e.g. non-UTF-8 header bytes), for the OpenAI and Anthropic front ends and the admin API.
Each answer must be the expected status with a JSON error body in the API's own shape, and
nothing may reach the engine.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.session import SessionError

from .gateway_helpers import Cluster, metric

ADMIN = "admin-secret"
OK_MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": OK_MESSAGES, **fields}


def msgs(*messages: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


def anth(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": OK_MESSAGES, **fields}


def blocks(*content: Any, role: str = "user") -> dict[str, Any]:
    return anth(messages=[{"role": role, "content": list(content)}])


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
DEEP = b"[" * 5000 + b"]" * 5000

# (case, body: a JSON value or raw bytes, expected status)
OPENAI: list[tuple[str, Any, int]] = [
    ("response_format string", chat(response_format="json"), 400),
    ("response_format list", chat(response_format=[1]), 400),
    ("response_format json_object", chat(response_format={"type": "json_object"}), 400),
    ("stream string", chat(stream="true"), 400),
    ("stream number", chat(stream=1), 400),
    ("seed object", chat(seed={}), 400),
    ("seed string", chat(seed="1"), 400),
    ("seed float", chat(seed=1.5), 400),
    ("seed boolean", chat(seed=True), 400),
    (
        "seed past 64 bits",
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":18446744073709551616}',
        400,
    ),
    ("logprobs string", chat(logprobs="yes"), 400),
    ("stream_options string", chat(stream_options="x"), 400),
    ("include_usage string", chat(stream=True, stream_options={"include_usage": "y"}), 400),
    ("n boolean", chat(n=True), 400),
    ("n two", chat(n=2), 400),
    ("n string", chat(n="1"), 400),
    ("model object", chat(model={}), 400),
    ("model number", chat(model=5), 400),
    ("no messages", {"model": "m"}, 400),
    ("messages object", chat(messages={}), 400),
    ("messages empty", chat(messages=[]), 400),
    ("message not an object", msgs(1), 400),
    ("unknown role", msgs({"role": "bogus", "content": "x"}), 400),
    ("role list", msgs({"role": ["user"], "content": "x"}), 400),
    ("content number", msgs({"role": "user", "content": 5}), 400),
    ("image part", msgs({"role": "user", "content": [{"type": "image_url"}]}), 400),
    ("part not an object", msgs({"role": "user", "content": [5]}), 400),
    (
        "text part not a string",
        msgs({"role": "user", "content": [{"type": "text", "text": 5}]}),
        400,
    ),
    ("tool_calls number", msgs({"role": "assistant", "content": "", "tool_calls": 5}), 400),
    ("tool_calls item", msgs({"role": "assistant", "content": "", "tool_calls": [5]}), 400),
    (
        "tool_call function string",
        msgs({"role": "assistant", "content": "", "tool_calls": [{"function": "f"}]}),
        400,
    ),
    (
        "tool_call arguments number",
        msgs(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 5}}],
            }
        ),
        400,
    ),
    (
        "tool_call id number",
        msgs(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": 5, "function": {"name": "f", "arguments": "{}"}}],
            }
        ),
        400,
    ),
    ("tool message without id", msgs({"role": "tool", "content": "x"}), 400),
    ("tools string", chat(tools="f"), 400),
    ("tool without function", chat(tools=[{"type": "function"}]), 400),
    (
        "tool parameters string",
        chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
        400,
    ),
    (
        "tool description number",
        chat(tools=[{"type": "function", "function": {"name": "f", "description": 5}}]),
        400,
    ),
    ("tool_choice unknown", chat(tools=[TOOL], tool_choice="maybe"), 400),
    (
        "tool_choice function string",
        chat(tools=[TOOL], tool_choice={"type": "function", "function": "f"}),
        400,
    ),
    (
        "tool_choice name number",
        chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": 5}}),
        400,
    ),
    (
        "tool_choice unknown tool",
        chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "g"}}),
        400,
    ),
    ("temperature string", chat(temperature="hot"), 400),
    ("temperature out of range", chat(temperature=5), 400),
    ("top_p negative", chat(top_p=-1), 400),
    ("max_tokens zero", chat(max_tokens=0), 400),
    ("max_tokens string", chat(max_tokens="abc"), 400),
    ("max_tokens float", chat(max_tokens=1.5), 400),
    ("max_completion_tokens boolean", chat(max_completion_tokens=True), 400),
    ("stop number", chat(stop=5), 400),
    ("stop list of numbers", chat(stop=[1]), 400),
    ("top_logprobs", chat(top_logprobs=5), 400),
    ("top_logprobs string", chat(top_logprobs="x"), 400),
    ("logit_bias string", chat(logit_bias="x"), 400),
    ("logit_bias", chat(logit_bias={"1": 5}), 400),
    ("penalty changes the distribution", chat(frequency_penalty=0.5), 400),
    ("top_k string (extra_body)", chat(top_k="x"), 400),
    ("not JSON", b"{not json", 400),
    ("JSON list", b"[]", 400),
    ("JSON null", b"null", 400),
    ("not UTF-8", b'{"model": "\xff\xfe"}', 400),
    ("empty body", b"", 400),
    ("nested 5000 deep", DEEP, 400),
    ("number past a double", b'{"messages": 1e400}', 400),
]

ANTHROPIC: list[tuple[str, Any, int]] = [
    ("max_tokens missing", {"model": "m", "messages": OK_MESSAGES}, 400),
    ("max_tokens string", anth(max_tokens="abc"), 400),
    ("text not a string", blocks({"type": "text", "text": {"a": 1}}), 400),
    (
        "thinking not a string",
        blocks(
            {"type": "thinking", "thinking": 5}, {"type": "text", "text": "x"}, role="assistant"
        ),
        400,
    ),
    (
        "tool_use input string",
        blocks({"type": "tool_use", "id": "t", "name": "f", "input": "x"}, role="assistant"),
        400,
    ),
    (
        "tool_use without name",
        blocks({"type": "tool_use", "id": "t", "input": {}}, role="assistant"),
        400,
    ),
    (
        "tool_use id number",
        blocks({"type": "tool_use", "id": 5, "name": "f", "input": {}}, role="assistant"),
        400,
    ),
    (
        "tool_result id number",
        blocks({"type": "tool_result", "tool_use_id": 5, "content": "x"}),
        400,
    ),
    (
        "tool_result content number",
        blocks({"type": "tool_result", "tool_use_id": "t", "content": 5}),
        400,
    ),
    ("image block", blocks({"type": "image", "source": {}}), 400),
    ("block not an object", blocks("text"), 400),
    ("content number", anth(messages=[{"role": "user", "content": 5}]), 400),
    ("system role in messages", anth(messages=[{"role": "system", "content": "x"}]), 400),
    ("stream string", anth(stream="yes"), 400),
    ("model list", anth(model=["m"]), 400),
    ("system number", anth(system=5), 400),
    ("system image", anth(system=[{"type": "image"}]), 400),
    ("tool name number", anth(tools=[{"name": 5}]), 400),
    ("tool input_schema string", anth(tools=[{"name": "f", "input_schema": "x"}]), 400),
    ("tool description number", anth(tools=[{"name": "f", "description": 5}]), 400),
    ("tool_choice string", anth(tools=[{"name": "f"}], tool_choice="auto"), 400),
    (
        "tool_choice unknown tool",
        anth(tools=[{"name": "f"}], tool_choice={"type": "tool", "name": "g"}),
        400,
    ),
    ("tool_choice without name", anth(tools=[{"name": "f"}], tool_choice={"type": "tool"}), 400),
    ("temperature over 1", anth(temperature=1.5), 400),
    ("top_k zero", anth(top_k=0), 400),
    ("stop_sequences numbers", anth(stop_sequences=[1]), 400),
    ("not JSON", b"{", 400),
    ("not UTF-8", b'{"max_tokens": 1, "messages": "\xc3\x28"}', 400),
    ("nested 5000 deep", DEEP, 400),
]

# (case, sampling_params, the key named in the error)
SAMPLING: list[tuple[str, Any, str]] = [
    ("max_new_tokens string", {"max_new_tokens": "abc"}, "max_new_tokens"),
    ("max_new_tokens float", {"max_new_tokens": 1.5}, "max_new_tokens"),
    ("max_new_tokens boolean", {"max_new_tokens": True}, "max_new_tokens"),
    ("max_new_tokens zero", {"max_new_tokens": 0}, "max_new_tokens"),
    ("temperature string", {"temperature": "hot"}, "temperature"),
    ("temperature negative", {"temperature": -1}, "temperature"),
    ("top_p zero", {"top_p": 0}, "top_p"),
    ("top_k zero", {"top_k": 0}, "top_k"),
    ("repetition_penalty zero", {"repetition_penalty": 0}, "repetition_penalty"),
    ("n two", {"n": 2}, "n must be 1"),
    ("stop number", {"stop": 5}, "stop"),
    ("stop_token_ids negative", {"stop_token_ids": [-1]}, "stop_token_ids"),
    ("stop_token_ids floats", {"stop_token_ids": [1.0]}, "stop_token_ids"),
    ("ignore_eos string", {"ignore_eos": "yes"}, "ignore_eos"),
    ("sampling_seed string", {"sampling_seed": "x"}, "sampling_seed"),
    ("logit_bias values", {"logit_bias": {"1": "x"}}, "logit_bias"),
    ("custom_params list", {"custom_params": []}, "custom_params"),
    ("unknown key", {"max_tokens": 5}, "unknown key"),
]


async def raw(
    gateway: GatewayServer, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[int, Any]:
    """One HTTP/1.1 request written byte for byte (no client library cleans it up), to the
    admin listener for `/admin/` paths and to the agent API's otherwise."""
    port = gateway.admin_port if path.startswith("/admin/") else gateway.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = [f"{method} {path} HTTP/1.1".encode(), b"Host: gw", b"Connection: close"]
    head += [k + b": " + v for k, v in headers]
    head.append(b"Content-Length: " + str(len(body)).encode())
    writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), orjson.loads(payload) if payload else None


def encode(body: Any) -> bytes:
    return body if isinstance(body, bytes) else orjson.dumps(body)


def bearer(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"Authorization", b"Bearer " + token.encode()), (b"Content-Type", b"application/json")]


def check_openai_error(body: Any, status: int) -> None:
    assert isinstance(body, dict) and set(body["error"]) >= {"message", "type", "code"}
    assert body["error"]["code"] == status and body["error"]["message"]


def check_anthropic_error(body: Any) -> None:
    assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"]


@pytest.mark.parametrize(("body", "status"), [c[1:] for c in OPENAI], ids=[c[0] for c in OPENAI])
async def test_openai_malformed_requests_get_their_4xx(
    gateway: GatewayServer, cluster: Cluster, body: Any, status: int
) -> None:
    handle = await gateway.create_session("bad-openai", {"temperature": 1.0})
    path = f"/sessions/{handle.session_id}/v1/chat/completions"
    got, answer = await raw(gateway, "POST", path, bearer(handle.token), encode(body))
    assert got == status, answer
    check_openai_error(answer, status)
    assert cluster.all_requests() == []  # nothing was forwarded
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code=str(status)) == 1


def _anthropic_cases() -> list[Any]:
    """Every case on /messages; on /messages/count_tokens all but the max_tokens ones (that
    endpoint takes no max_tokens)."""
    cases = []
    for name, body, status in ANTHROPIC:
        cases.append(pytest.param(body, status, "messages", id=f"messages-{name}"))
        if not (isinstance(body, dict) and body.get("max_tokens", "abc") == "abc"):
            cases.append(pytest.param(body, status, "messages/count_tokens",
                                      id=f"count_tokens-{name}"))  # fmt: skip
    return cases


@pytest.mark.parametrize(("body", "status", "endpoint"), _anthropic_cases())
async def test_anthropic_malformed_requests_get_their_4xx(
    gateway: GatewayServer, cluster: Cluster, body: Any, status: int, endpoint: str
) -> None:
    handle = await gateway.create_session("bad-anthropic", {})
    path = f"/sessions/{handle.session_id}/v1/{endpoint}"
    got, answer = await raw(gateway, "POST", path, bearer(handle.token), encode(body))
    assert got == status, answer
    check_anthropic_error(answer)
    assert cluster.all_requests() == []


# Header bytes no client library would send: latin-1 and invalid UTF-8.
BAD_HEADERS: list[tuple[str, list[tuple[bytes, bytes]]]] = [
    ("authorization not UTF-8", [(b"Authorization", b"Bearer \xff\xfe\xfd")]),
    ("authorization latin-1", [(b"Authorization", b"Bearer caf\xe9")]),
    ("x-api-key not UTF-8", [(b"x-api-key", b"\xc3\x28")]),
    ("authorization UTF-8 non-ASCII", [(b"Authorization", "Bearer tökén".encode())]),
    ("no credentials", []),
]


@pytest.mark.parametrize("headers", [c[1] for c in BAD_HEADERS], ids=[c[0] for c in BAD_HEADERS])
@pytest.mark.parametrize("api", ["chat/completions", "messages", "models"])
async def test_undecodable_or_wrong_credentials_are_401_on_the_agent_api(
    gateway: GatewayServer, cluster: Cluster, headers: list[tuple[bytes, bytes]], api: str
) -> None:
    handle = await gateway.create_session("bad-auth", {})
    method, body = ("GET", b"") if api == "models" else ("POST", encode(anth()))
    path = f"/sessions/{handle.session_id}/v1/{api}"
    status, answer = await raw(gateway, method, path, headers, body)
    assert status == 401 and answer["error"]["message"] == "invalid or missing session token"
    assert cluster.all_requests() == []


@pytest.mark.parametrize("headers", [c[1] for c in BAD_HEADERS], ids=[c[0] for c in BAD_HEADERS])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/admin/sessions"),
        ("GET", "/admin/sessions/x/turns"),
        ("DELETE", "/admin/sessions/x"),
        ("POST", "/admin/engines/quiesce"),
    ],
)
async def test_undecodable_or_wrong_credentials_are_401_on_the_admin_api(
    gateway: GatewayServer, headers: list[tuple[bytes, bytes]], method: str, path: str
) -> None:
    body = encode({"session_id": "x", "sampling_params": {}})
    status, answer = await raw(gateway, method, path, headers, body)
    assert status == 401 and "admin token" in answer["error"]["message"]


ADMIN_BODIES: list[tuple[str, Any, int]] = [
    ("not JSON", b"{", 400),
    ("not UTF-8", b'{"session_id": "\xff"}', 400),
    ("a list", [], 400),
    ("session_id number", {"session_id": 5, "sampling_params": {}}, 400),
    ("session_id with spaces", {"session_id": "a b", "sampling_params": {}}, 400),
    ("session_id too long", {"session_id": "a" * 200, "sampling_params": {}}, 400),
    ("session_id trailing newline", {"session_id": "abc\n", "sampling_params": {}}, 400),
    ("sampling_params string", {"session_id": "s", "sampling_params": "x"}, 400),
    ("nested 5000 deep", DEEP, 400),
]


@pytest.mark.parametrize(
    ("body", "status"), [c[1:] for c in ADMIN_BODIES], ids=[c[0] for c in ADMIN_BODIES]
)
async def test_admin_create_refuses_malformed_bodies(
    gateway: GatewayServer, body: Any, status: int
) -> None:
    got, answer = await raw(gateway, "POST", "/admin/sessions", bearer(ADMIN), encode(body))
    assert got == status and answer["error"]["code"] == status


@pytest.mark.parametrize(
    ("params", "named"), [c[1:] for c in SAMPLING], ids=[c[0] for c in SAMPLING]
)
async def test_sampling_params_are_checked_when_the_session_opens(
    gateway: GatewayServer, params: dict[str, Any], named: str
) -> None:
    body = encode({"session_id": "typed", "sampling_params": params})
    status, answer = await raw(gateway, "POST", "/admin/sessions", bearer(ADMIN), body)
    assert status == 400 and named in answer["error"]["message"]
    with pytest.raises(SessionError, match=named):  # in process, the same refusal
        await gateway.create_session("typed", params)
    await gateway.create_session("typed", {"max_new_tokens": 8, "temperature": None})  # still free


@pytest.mark.parametrize(
    "body",
    [b"{", {"timeout_s": "x"}, {"timeout_s": -1}, {"timeout_s": 1e9}, {"timeout_s": True}, []],
)
async def test_admin_quiesce_refuses_malformed_bodies(gateway: GatewayServer, body: Any) -> None:
    status, _ = await raw(gateway, "POST", "/admin/engines/quiesce", bearer(ADMIN), encode(body))
    assert status == 400


async def test_sessions_that_are_unknown_or_closed_are_404_and_410(gateway: GatewayServer) -> None:
    handle = await gateway.create_session("gone", {})
    await gateway.close_session("gone")
    for sid, status in (("gone", 410), ("never", 404)):
        path = f"/sessions/{sid}/v1/chat/completions"
        got, answer = await raw(gateway, "POST", path, bearer(handle.token), encode(chat()))
        assert got == status and answer["error"]["code"] == status
    got, _ = await raw(gateway, "GET", "/admin/sessions/never/turns", bearer(ADMIN), b"")
    assert got == 404
    got, _ = await raw(
        gateway, "POST", "/admin/sessions", bearer(ADMIN), encode({"session_id": "gone"})
    )
    assert got == 409  # a closed id is never reused


@pytest.mark.gateway(max_request_bytes=64 * 1024)
async def test_oversized_bodies_are_413_everywhere(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("huge", {})
    big = encode(chat(messages=[{"role": "user", "content": "x" * 70_000}]))
    for path, check in (
        (f"/sessions/{handle.session_id}/v1/chat/completions", "openai"),
        (f"/sessions/{handle.session_id}/v1/messages", "anthropic"),
        (f"/sessions/{handle.session_id}/v1/messages/count_tokens", "anthropic"),
    ):
        status, answer = await raw(gateway, "POST", path, bearer(handle.token), big)
        assert status == 413, path
        if check == "openai":
            check_openai_error(answer, 413)
        else:
            check_anthropic_error(answer)
    status, _ = await raw(gateway, "POST", "/admin/sessions", bearer(ADMIN), big)
    assert status == 413
    assert cluster.all_requests() == []
