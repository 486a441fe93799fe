"""A lean HTTP/1.1 client for the gateway's hottest call: one unstreamed `POST /generate`
per agent turn, to one origin (slime's router or an engine), over kept-alive connections.

aiohttp's client spends about 150 µs of CPU on such a call (request and response objects,
URL and header handling, its connector); this spends about 50: the request is one write of
bytes it builds, the answer one read of the status line and headers and one of the body
(`Content-Length`, or chunked). Everything else the gateway asks of an engine (streams,
aborts, the worker list, loads) keeps using aiohttp.

A connection is reused only after a complete answer that did not say `Connection: close`,
and dropped on any error or cancellation (it may be mid-answer). A kept connection the
server has closed meanwhile is noticed before use, or, if the close crossed the request,
by the answer ending before its first byte: then, and only then, the request is sent once
more on a new connection (the server had not read it; HTTP clients do the same).

Like the aiohttp session it stands in for, connecting is bounded (`CONNECT_TIMEOUT_S`, the
gateway's one connect deadline for engines); the whole call is bounded by the caller's
generation timeout. Answers are read as RFC 9112 says: no body for 1xx, 204 and 304, a
chunked body before a Content-Length, and, with neither, the body runs to the close.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
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
            with contextlib.suppress(_Stale):
                return await self._exchange(conn, head + body, reused=True)
        return await self._exchange(await self._open(), head + body, reused=False)

    def _take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        while self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                return await asyncio.open_connection(self.host, self.port, limit=HEAD_LIMIT)
        except TimeoutError as exc:
            raise HttpError(
                f"cannot connect to {self.host}:{self.port} within {self.connect_timeout_s:g}s"
            ) from exc
        except OSError as exc:
            raise HttpError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc

    async def _exchange(
        self,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        request: bytes,
        *,
        reused: bool,
    ) -> tuple[int, bytes]:
        reader, writer = conn
        keep = False
        try:
            writer.write(request)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if reused and not exc.partial:
                    raise _Stale from exc
                raise HttpError("the connection closed before the answer's headers") from exc
            status, length, chunked, close = _head(head)
            if chunked:
                data = await _chunked(reader)
            elif length >= 0:
                data = await reader.readexactly(length)
            else:  # neither: the body is everything until the server closes
                data, close = await reader.read(), True
            keep = not close
            return status, data
        except (OSError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as exc:
            raise HttpError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if keep and not self._closed and len(self._idle) < self.keep:
                self._idle.append(conn)
            else:
                writer.close()

    def close(self) -> None:
        self._closed = True
        for _, writer in self._idle:
            writer.close()
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


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size_hex = line.split(b";", 1)[0].strip()
        # Hex digits only: int(x, 16) would also take "-1", "+5", "0x5" and "1_0".
        if not size_hex or not _HEX.issuperset(size_hex):
            raise HttpError(f"bad chunk size {size_hex[:20]!r}")
        size = int(size_hex, 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                pass
            return b"".join(parts)
        chunk = await reader.readexactly(size + 2)
        if chunk[-2:] != b"\r\n":
            raise HttpError(f"a chunk of {size} bytes is not followed by CRLF")
        parts.append(chunk[:-2])
