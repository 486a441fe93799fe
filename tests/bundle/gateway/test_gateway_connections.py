"""Bounded connections: slow headers, idle keep-alive and slow bodies are cut off, open
connections are capped, and a slow body holds no admission slot.

Raw sockets, so that nothing between the test and the gateway finishes a request for it.
No timing is asserted: each test waits for the event (the server closing the connection,
a counter moving) with a liveness bound far above the short limits it sets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agentrl.bundle.gateway import GatewayServer, GatewaySettings
from agentrl.bundle.gateway.frontend import READS_PER_SESSION

from .gateway_helpers import MESSAGES, Cluster, until

LIVENESS_S = 20.0  # far above every limit set here: a bound on the test, not a measurement


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    async with asyncio.timeout(LIVENESS_S):
        return await reader.read()


def head(path: str, token: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.gateway(header_timeout_s=0.3)
async def test_a_request_whose_headers_never_finish_is_cut_off(gateway: GatewayServer) -> None:
    guard = gateway.guards[0]
    reader, writer = await connect(gateway.port)
    writer.write(b"POST /sessions/x/v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")  # no end
    assert await closed_by_server(reader) == b""  # closed, nothing answered
    silent, writer2 = await connect(gateway.port)  # and one that never says anything
    assert await closed_by_server(silent) == b""
    assert guard.late_headers == 2
    for w in (writer, writer2):
        w.close()


@pytest.mark.gateway(idle_timeout_s=0.3)
async def test_an_idle_keep_alive_connection_is_closed(gateway: GatewayServer) -> None:
    reader, writer = await connect(gateway.port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")  # keep-alive by default
    answer = await closed_by_server(reader)  # answered, then closed once idle
    assert answer.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in answer
    writer.close()


@pytest.mark.gateway(body_timeout_s=0.5)
async def test_a_trickled_body_gets_408_and_holds_no_admission_slot(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    handle = await gateway.create_session("trickle", {})
    body = orjson.dumps({"messages": MESSAGES})
    path = f"/sessions/{handle.session_id}/v1/chat/completions"
    reader, writer = await connect(gateway.port)
    writer.write(head(path, handle.token, len(body)) + body[:10])  # then nothing more
    frontend = gateway.frontend
    assert frontend is not None
    await until(lambda: frontend.reading["trickle"] == 1, "the body is being read")
    assert frontend.in_flight == 0  # reading a body takes no admission slot
    answer = await closed_by_server(reader)
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"body_timeout_s" in answer
    assert cluster.all_requests() == []
    writer.close()


@pytest.mark.gateway(body_timeout_s=30.0)
async def test_one_session_sends_at_most_so_many_bodies_at_once(gateway: GatewayServer) -> None:
    flood = await gateway.create_session("flood", {})
    other = await gateway.create_session("other", {})
    body = orjson.dumps({"messages": MESSAGES})
    path = f"/sessions/{flood.session_id}/v1/chat/completions"
    writers = []
    for _ in range(READS_PER_SESSION):
        _, writer = await connect(gateway.port)
        writer.write(head(path, flood.token, len(body)) + body[:5])
        writers.append(writer)
    frontend = gateway.frontend
    assert frontend is not None
    await until(lambda: frontend.reading["flood"] == READS_PER_SESSION, "bodies being read")
    reader, writer = await connect(gateway.port)
    writer.write(head(path, flood.token, len(body)) + body[:5])
    status = (await reader.readline()).split()[1]
    assert status == b"429"  # answered at once, its body unread
    reader, writer2 = await connect(gateway.port)  # another session is not held up
    other_path = f"/sessions/{other.session_id}/v1/chat/completions"
    writer2.write(head(other_path, other.token, len(body)) + body)
    assert (await reader.readline()).split()[1] == b"200"
    for w in (*writers, writer, writer2):
        w.close()


@pytest.mark.gateway(max_connections=3)
async def test_past_the_cap_the_longest_waiting_connection_makes_room(
    gateway: GatewayServer,
) -> None:
    guard = gateway.guards[0]
    first, *rest = [await connect(gateway.port) for _ in range(3)]
    await until(lambda: len(guard.open) == 3, "three connections open")
    reader, writer = await connect(gateway.port)  # the fourth: the first (idle) goes
    assert await closed_by_server(first[0]) == b""
    writer.write(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 200")
    assert guard.evicted == 1 and guard.refused == 0
    for _, w in (first, *rest, (reader, writer)):
        w.close()


@pytest.mark.gateway(max_connections=2)
async def test_past_the_cap_with_every_connection_busy_a_new_one_is_refused(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    guard = gateway.guards[0]
    cluster.set(gate=asyncio.Event())  # requests stay in flight until the test lets them go
    handle = await gateway.create_session("busy", {})
    body = orjson.dumps({"messages": MESSAGES})
    path = f"/sessions/{handle.session_id}/v1/chat/completions"
    busy = [await connect(gateway.port) for _ in range(2)]
    for _, w in busy:
        w.write(head(path, handle.token, len(body)) + body)
    await until(lambda: not guard.idle and len(guard.open) == 2, "both connections busy")
    reader, writer = await connect(gateway.port)
    assert await closed_by_server(reader) == b""  # refused: nothing waiting could make room
    assert guard.refused == 1 and guard.evicted == 0
    for e in cluster.engines:
        assert e.gate is not None
        e.gate.set()
    for r, _ in busy:
        assert (await r.readline()).split()[1] == b"200"  # the busy ones were untouched
    for _, w in (*busy, (reader, writer)):
        w.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("header_timeout_s", 0),
        ("body_timeout_s", -1),
        ("idle_timeout_s", 0.0),
        ("max_connections", 0),
    ],
)
def test_connection_limits_must_be_positive(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        GatewaySettings(router_url="http://r", tokenizer_path="t", **{field: value})
