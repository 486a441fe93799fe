"""The lean HTTP/1.1 client the gateway posts unstreamed generations with, against a server
scripted byte by byte: bodies by length or in chunks, connections kept only when they may
be, a kept connection the server closed, broken answers, cancellation."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from agentrl.bundle.gateway.http1 import Http1Pool, HttpError, _head

from .gateway_helpers import until

Answer = Callable[[bytes, int], bytes | None]  # (request body, nth request) -> bytes to send


@dataclass
class Scripted:
    answer: Answer
    connections: int = 0
    requests: list[tuple[int, bytes]] = field(default_factory=list)  # (connection, body)
    close_after: bool = False  # close each connection after its first answer
    hold: asyncio.Event | None = None  # answers wait for it
    trickle: bool = False  # send each answer a byte at a time
    reset: bool = False  # hang up with a reset (RST), not a close (FIN)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        me = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                self.requests.append((me, body))
                if self.hold is not None:
                    await self.hold.wait()
                out = self.answer(body, len(self.requests))
                if out is None and self.reset:  # reset: the request was read, then lost
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if out is None:  # hang up without answering
                    break
                for piece in [out[i : i + 1] for i in range(len(out))] if self.trickle else [out]:
                    writer.write(piece)
                    await writer.drain()
                    if self.trickle:
                        await asyncio.sleep(0.001)  # its own TCP segment
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


Serve = Callable[[Answer], Awaitable[Scripted]]


@pytest.fixture
async def server() -> AsyncIterator[Serve]:
    """Starts scripted servers on free ports; stops them after the test."""
    servers: list[asyncio.Server] = []

    async def serve(answer: Answer) -> Scripted:
        s = Scripted(answer)
        srv = await asyncio.start_server(s.handle, "127.0.0.1", 0)
        servers.append(srv)
        s.url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        return s

    yield serve
    for srv in servers:
        srv.close()
        await srv.wait_closed()


def ok(body: bytes, headers: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + headers
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


async def test_bodies_by_length_over_one_kept_connection(server: Serve) -> None:
    s = await server(lambda body, n: ok(b'{"n": %d, "echo": ' % n + body + b"}"))
    pool = Http1Pool(s.url, keep=4)
    for i in range(3):
        status, data = await pool.post("/generate", b'"x%d"' % i, {"X-K": "v"})
        assert status == 200 and data == b'{"n": %d, "echo": "x%d"}' % (i + 1, i)
    assert s.connections == 1  # kept alive
    pool.close()


async def test_chunked_bodies_with_trailers(server: Serve) -> None:
    def answer(body: bytes, n: int) -> bytes:
        return (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nX-Trailer: t\r\n\r\n"
        )

    s = await server(answer)
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"{}", {}) == (200, b"abcdefg")
    assert await pool.post("/generate", b"{}", {}) == (200, b"abcdefg")
    assert s.connections == 1
    pool.close()


async def test_answers_a_byte_at_a_time(server: Serve) -> None:
    """An answer is framed however the network splits it: by length, in chunks with
    extensions and trailers, and to the close."""
    answers = {
        1: ok(b'{"a": 1}'),
        2: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nX-Trailer: t\r\n\r\n",
        3: b"HTTP/1.1 200 OK\r\n\r\nto the close",
    }
    s = await server(lambda body, n: answers[n])
    s.trickle = s.close_after = True  # the third answer runs to the close
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"{}", {}) == (200, b'{"a": 1}')
    assert await pool.post("/generate", b"{}", {}) == (200, b"abcdefg")
    assert await pool.post("/generate", b"{}", {}) == (200, b"to the close")
    assert s.requests == [(1, b"{}"), (2, b"{}"), (3, b"{}")] and not pool._idle
    pool.close()


async def test_bytes_past_an_answer_spoil_its_connection(server: Serve) -> None:
    """More than the answer framed (a second answer nobody asked for): the request is
    answered, the connection is not kept (its next answer could be the stray one)."""
    s = await server(lambda body, n: ok(b"one") + ok(b"two"))
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"{}", {}) == (200, b"one")
    assert not pool._idle
    assert await pool.post("/generate", b"{}", {}) == (200, b"one")
    assert s.connections == 2
    pool.close()


async def test_a_kept_connection_that_received_bytes_while_idle_is_not_reused(
    server: Serve,
) -> None:
    """Bytes that arrive between answers answer nothing: the connection is dropped and the
    next request goes on a new one, and succeeds."""
    s = await server(lambda body, n: ok(body))
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"1", {}) == (200, b"1")
    (kept,) = pool._idle
    kept.data_received(ok(b"stray"))  # as if the server had sent it late
    assert await pool.post("/generate", b"2", {}) == (200, b"2")
    assert s.connections == 2 and kept.closed
    pool.close()


async def test_interim_answers_are_skipped(server: Serve) -> None:
    """A 100 Continue before the answer is not the answer, nor left for the next request."""
    s = await server(lambda body, n: b"HTTP/1.1 100 Continue\r\n\r\n" + ok(body))
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"1", {}) == (200, b"1")
    assert await pool.post("/generate", b"2", {}) == (200, b"2")
    assert s.connections == 1
    pool.close()


async def test_connection_close_is_not_reused(server: Serve) -> None:
    s = await server(lambda body, n: ok(b"{}", b"Connection: close\r\n"))
    s.close_after = True
    pool = Http1Pool(s.url, keep=4)
    for _ in range(2):
        assert await pool.post("/generate", b"{}", {}) == (200, b"{}")
    assert s.connections == 2
    pool.close()


async def test_a_kept_connection_the_server_closed_is_replaced(server: Serve) -> None:
    """The server closes its side after answering (without saying so): the next request goes
    on a new connection, once, and the server sees it exactly once."""
    s = await server(lambda body, n: ok(body))
    s.close_after = True
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"1", {}) == (200, b"1")
    assert await pool.post("/generate", b"2", {}) == (200, b"2")
    assert s.requests == [(1, b"1"), (2, b"2")]  # never sent twice, never lost
    pool.close()


async def test_a_reset_after_the_request_is_an_error_never_a_resend(server: Serve) -> None:
    """A kept connection reset once the request was read (the engine died on it) fails the
    call; it is not sent again as a connection closed unread would be."""
    s = await server(lambda body, n: ok(body) if n == 1 else None)
    s.reset = True
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"1", {}) == (200, b"1")
    with pytest.raises(HttpError):
        await pool.post("/generate", b"2", {})
    assert s.requests == [(1, b"1"), (1, b"2")]  # read once, never resent
    pool.close()


async def test_a_broken_answer_is_an_error_and_drops_the_connection(server: Serve) -> None:
    answers = {
        1: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # then the server hangs up
        2: b"SPDY/3 200 OK\r\nContent-Length: 0\r\n\r\n",
        3: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n",
        4: None,  # hangs up before any answer, on a fresh connection
    }
    s = await server(lambda body, n: answers[n])
    s.close_after = True
    pool = Http1Pool(s.url, keep=4)
    for _ in answers:
        with pytest.raises(HttpError):
            await pool.post("/generate", b"{}", {})
    assert s.connections == 4 and len(s.requests) == 4  # none retried
    pool.close()


async def test_a_cancelled_request_never_leaves_its_connection_for_another(
    server: Serve,
) -> None:
    s = await server(lambda body, n: ok(body))
    s.hold = asyncio.Event()  # the answer does not come until the test says so
    pool = Http1Pool(s.url, keep=4)
    task = asyncio.create_task(pool.post("/generate", b"a", {}))
    await until(lambda: bool(s.requests), "the request reached the server")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pool._idle  # mid-answer: closed, not kept for the next request
    s.hold.set()
    assert await pool.post("/generate", b"b", {}) == (200, b"b")
    assert s.connections == 2
    pool.close()


async def test_answers_without_a_length(server: Serve) -> None:
    """No body for 204 and 304 (whatever the fields say); with neither a length nor chunks,
    the body runs to the close, and that connection is not kept."""
    answers = {
        1: b"HTTP/1.1 204 No Content\r\n\r\n",
        2: b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
        3: b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"until": "close"}',
    }
    s = await server(lambda body, n: answers[n])
    pool = Http1Pool(s.url, keep=4)
    assert await pool.post("/generate", b"{}", {}) == (204, b"")
    assert await pool.post("/generate", b"{}", {}) == (304, b"")
    s.close_after = True  # the third answer ends with the connection
    assert await pool.post("/generate", b"{}", {}) == (200, b'{"until": "close"}')
    assert s.connections == 1 and not pool._idle  # the first two kept it; the third did not
    pool.close()


@pytest.mark.parametrize("size", [b"-3", b"+3", b"0x3", b"1_0", b""])
async def test_chunk_sizes_are_hex_digits_only(server: Serve, size: bytes) -> None:
    """int(x, 16) takes all of these; an engine's answer framed so is broken, not data."""
    s = await server(
        lambda body, n: (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + size
            + b"\r\nabc\r\n0\r\n\r\n"
        )
    )
    pool = Http1Pool(s.url, keep=4)
    with pytest.raises(HttpError, match="chunk size"):
        await pool.post("/generate", b"{}", {})
    assert not pool._idle
    pool.close()


async def test_a_chunk_must_end_where_its_size_says(server: Serve) -> None:
    s = await server(
        lambda body, n: (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n"
        )
    )
    pool = Http1Pool(s.url, keep=4)
    with pytest.raises(HttpError, match="CRLF"):
        await pool.post("/generate", b"{}", {})
    pool.close()


async def test_connecting_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A black-holed engine address fails the call as unreachable, as aiohttp's sock_connect
    did, instead of waiting out the generation's own timeout."""
    never = asyncio.Event()

    async def black_hole(*args: object, **kwargs: object) -> object:
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", black_hole)
    pool = Http1Pool("http://192.0.2.1:30000", keep=1, connect_timeout_s=0.01)
    async with asyncio.timeout(30):  # only the old code, without a deadline, gets here
        with pytest.raises(HttpError, match="within"):
            await pool.post("/generate", b"{}", {})


async def test_a_closed_pool_keeps_no_connection_of_an_answer_in_flight(
    server: Serve,
) -> None:
    s = await server(lambda body, n: ok(body))
    s.hold = asyncio.Event()
    pool = Http1Pool(s.url, keep=4)
    task = asyncio.create_task(pool.post("/generate", b"a", {}))
    await until(lambda: bool(s.requests), "the request reached the server")
    pool.close()  # the gateway stops while the answer is on its way
    s.hold.set()
    assert await task == (200, b"a")
    assert not pool._idle  # closed with its answer, not left open in a closed pool
    pool.close()


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="http://"):
        Http1Pool("https://router:443", keep=1)


@pytest.mark.parametrize(
    ("head", "parsed"),
    [
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: x\r\nContent-Length: 12\r\n\r\n",
            (200, 12, False, False),
        ),
        (b"HTTP/1.1 400 Bad\r\nCONTENT-LENGTH:3\r\n\r\n", (400, 3, False, False)),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", (200, -1, True, False)),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            (200, 0, False, True),
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", (200, 1, False, True)),
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n",
            (200, 1, False, False),
        ),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", (204, 0, False, False)),
        (b"HTTP/1.1 200 OK\r\nContent-Type: x\r\n\r\n", (200, -1, False, True)),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
            (200, -1, True, False),
        ),
    ],
)
def test_answer_heads(head: bytes, parsed: tuple[int, int, bool, bool]) -> None:
    assert _head(head) == parsed
