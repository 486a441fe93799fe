"""A lean HTTP/1.1 client for the gateway's hottest call: one unstreamed `POST /generate`
per agent turn, to one origin (slime's router or an engine), over kept-alive connections.

aiohttp's client spends about 150 µs of CPU on such a call (request and response objects,
URL and header handling, its connector); this about 55, system calls included.
Each connection is an `asyncio.Protocol` that collects the answer in one buffer and wakes
its caller once, when the answer is complete: the request is one write of bytes built
here, and the answer is framed in place (`Content-Length`, chunked, or to the close).
Everything else the gateway asks of an engine (streams, aborts, the worker list, loads)
keeps using aiohttp.

A connection is reused only after a complete answer that did not say `Connection: close`,
and dropped on any error or cancellation (it may be mid-answer). A kept connection the
server has closed meanwhile is noticed before use, or, if the close crossed the request,
by the answer ending before its first byte: then, and only then, the request is sent once
more on a new connection (the server had not read it; HTTP clients do the same).

Like the aiohttp session it stands in for, connecting is bounded (`CONNECT_TIMEOUT_S`, the
gateway's one connect deadline for engines); the whole call is bounded by the caller's
generation timeout. Answers are read as RFC 9112 says: interim 1xx answers are skipped, no
body for 204 and 304, a chunked body before a Content-Length, and, with neither, the body
runs to the close. Bytes past the answer (a second answer nobody asked for) spoil the
connection: kept, they would be read as the answer to the next request, another session's.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

HEAD_LIMIT = 64 * 1024  # status line and headers (SGLang's and the router's are a few hundred)
# A connect to an engine or the router that takes longer is a dead or black-holed address:
# the turn fails as unreachable instead of waiting out its whole generation timeout.
CONNECT_TIMEOUT_S = 10.0
_HEX = frozenset(b"0123456789abcdefABCDEF")


class HttpError(Exception):
    """The connection failed or the answer was not HTTP/1.1 as expected."""


class _Stale(Exception):
    """A kept connection answered nothing: the server closed it before reading the request."""


class _Answer:
    """One answer being framed: its head once parsed, and for a chunked body how far the
    chunks were read (each byte is looked at once, however the answer was split)."""

    __slots__ = ("chunked", "close", "end", "length", "parts", "pos", "status")

    def __init__(self, status: int, length: int, chunked: bool, close: bool, pos: int) -> None:
        self.status, self.length, self.chunked, self.close = status, length, chunked, close
        self.pos = pos  # where the body (or the next chunk's size line) starts in the buffer
        self.parts: list[bytes] = []
        self.end = -1  # past the body, once complete

    def framed(self, buf: bytearray) -> bytes | None:
        """The body if the buffer holds all of it, else None (wait for more)."""
        if not self.chunked:
            if len(buf) - self.pos < self.length:
                return None
            self.end = self.pos + self.length
            return bytes(buf[self.pos : self.end])
        while True:  # chunks: "<hex size>[;ext]\r\n<data>\r\n" ... "0\r\n<trailers>\r\n"
            eol = buf.find(b"\r\n", self.pos)
            if eol < 0:
                if len(buf) - self.pos > HEAD_LIMIT:
                    raise HttpError("a chunk size line without an end")
                return None
            size_hex = bytes(buf[self.pos : eol]).split(b";", 1)[0].strip()
            # Hex digits only: int(x, 16) would also take "-1", "+5", "0x5" and "1_0".
            if not size_hex or not _HEX.issuperset(size_hex):
                raise HttpError(f"bad chunk size {size_hex[:20]!r}")
            size = int(size_hex, 16)
            if size == 0:  # the last chunk, then trailers (if any) and an empty line
                end = buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    if len(buf) - eol > HEAD_LIMIT:
                        raise HttpError("trailers without an end")
                    return None
                self.end = end + 4
                return b"".join(self.parts)
            start = eol + 2
            if len(buf) < start + size + 2:
                return None
            if buf[start + size : start + size + 2] != b"\r\n":
                raise HttpError(f"a chunk of {size} bytes is not followed by CRLF")
            self.parts.append(bytes(buf[start : start + size]))
            self.pos = start + size + 2


class _Connection(asyncio.Protocol):
    """One kept-alive connection: a request is written whole, its answer collected here and
    handed to the waiting caller once complete (or failed)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False  # the server closed it, or it failed
        self._buf = bytearray()
        self._answer: _Answer | None = None
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._waiter is not None and not self._waiter.done():
            try:
                self._advance()
            except HttpError as exc:
                self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close our side too: a half-closed engine connection is of no use

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        answer = self._answer
        if answer is not None and answer.length < 0 and not answer.chunked:
            # Neither a length nor chunks: the body is everything until the close.
            waiter.set_result((answer.status, bytes(self._buf[answer.pos :]), True))
        elif answer is None and not self._buf and exc is None:
            # Closed cleanly without a byte of answer: the server never read the request (a
            # reset may come after it did, so that is an error, never sent again).
            waiter.set_exception(_Stale())
        else:
            what = "the answer's headers" if answer is None else "the answer's end"
            reason = f": {exc}" if exc else ""
            self._fail(HttpError(f"the connection closed before {what}{reason}"))

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    def _advance(self) -> None:
        """Frame as much of the answer as has arrived; wake the caller once it is whole."""
        buf = self._buf
        answer = self._answer
        while answer is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > HEAD_LIMIT:
                    raise HttpError(f"an answer's headers longer than {HEAD_LIMIT} bytes")
                return
            status, length, chunked, close = _head(bytes(buf[: end + 4]))
            if 100 <= status < 200 and status != 101:  # interim (100 Continue): the answer follows
                del buf[: end + 4]
                continue
            # 101: the connection now speaks another protocol; never reuse it.
            answer = self._answer = _Answer(
                status, length, chunked, close or status == 101, end + 4
            )
        if answer.length < 0 and not answer.chunked:
            return  # runs to the close (connection_lost)
        body = answer.framed(buf)
        if body is None:
            return
        leftover = len(buf) > answer.end  # bytes nobody asked for: the connection is spoiled
        del buf[: answer.end]
        assert self._waiter is not None
        self._waiter.set_result((answer.status, body, answer.close or leftover))

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send `request`; its answer's status, body and whether to close the connection."""
        assert self.transport is not None
        if self._buf:  # only a new connection can have any (the pool reuses clean ones)
            raise HttpError("the server sent bytes before the request")
        self._answer = None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    @property
    def reusable(self) -> bool:
        """Open, and nothing arrived since its last answer (bytes that did are no answer to
        the next request)."""
        return not self.closed and not self._buf

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Http1Pool:
    """Kept-alive connections to the origin of `url` (plain `http://` only)."""

    def __init__(self, url: str, keep: int, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"Http1Pool needs an http:// URL, got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base = parts.path.rstrip("/")
        self.keep = keep  # idle connections kept at most
        self.connect_timeout_s = connect_timeout_s
        self._closed = False  # after close(), answers still in flight keep no connection
        self._idle: list[_Connection] = []
        self._host_header = parts.netloc.encode()

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """`POST path` with `body`; the status and the whole answer body."""
        head = (
            b"POST " + (self.base + path).encode() + b" HTTP/1.1\r\nHost: " + self._host_header
            + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"".join(b"\r\n" + k.encode() + b": " + v.encode() for k, v in headers.items())
            + b"\r\n\r\n"
        )  # fmt: skip
        conn = self._take()
        if conn is not None:
            try:
                return await self._exchange(conn, head + body)
            except _Stale:
                pass
        try:
            return await self._exchange(await self._open(), head + body)
        except _Stale as exc:  # a new connection closed unanswered: the server's failure
            raise HttpError("the connection closed before the answer's headers") from exc

    def _take(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable:
                return conn
            conn.close()
        return None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_Connection, self.host, self.port)
                return conn
        except TimeoutError as exc:
            raise HttpError(
                f"cannot connect to {self.host}:{self.port} within {self.connect_timeout_s:g}s"
            ) from exc
        except OSError as exc:
            raise HttpError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc

    async def _exchange(self, conn: _Connection, request: bytes) -> tuple[int, bytes]:
        keep = False
        try:
            status, data, close = await conn.exchange(request)
            keep = not close
            return status, data
        finally:
            if keep and not conn.closed and not self._closed and len(self._idle) < self.keep:
                self._idle.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.close()
        self._idle.clear()


def _head(head: bytes) -> tuple[int, int, bool, bool]:
    """Status, Content-Length (-1: none), chunked, Connection: close, from an answer's head.
    An answer with neither a length nor chunks runs to the close (so it says close)."""
    line, _, fields = head.partition(b"\r\n")
    version, _, rest = line.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
        raise HttpError(f"not an HTTP/1.x answer: {line[:100]!r}")
    status = int(rest[:3])
    fields = b"\r\n" + fields.lower()
    length, chunked, close = -1, False, version == b"HTTP/1.0"
    at = fields.find(b"\r\nconnection:")
    if at >= 0:
        value = fields[at + 13 : fields.find(b"\r\n", at + 13)].strip()
        close = value == b"close" or (close and value != b"keep-alive")
    if status < 200 or status in (204, 304):
        return status, 0, False, close  # never a body, whatever the fields say
    at = fields.find(b"\r\ntransfer-encoding:")
    if at >= 0:
        chunked = fields[at + 20 : fields.find(b"\r\n", at + 20)].strip().endswith(b"chunked")
        if not chunked:  # another coding last: the body runs to the close
            return status, -1, False, True
        return status, -1, True, close  # chunks win over a Content-Length
    at = fields.find(b"\r\ncontent-length:")
    if at >= 0:
        value = fields[at + 17 : fields.find(b"\r\n", at + 17)].strip()
        if not value.isdigit():
            raise HttpError(f"bad Content-Length: {value[:40]!r}")
        length = int(value)
    return status, length, chunked, close or length < 0
