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
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

HEAD_LIMIT = 64 * 1024  # status line and headers (SGLang's and the router's are a few hundred)


class HttpError(Exception):
    """The connection failed or the answer was not HTTP/1.1 as expected."""


class _Stale(Exception):
    """A kept connection answered nothing: the server closed it before reading the request."""


class Http1Pool:
    """Kept-alive connections to the origin of `url` (plain `http://` only)."""

    def __init__(self, url: str, keep: int) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"Http1Pool needs an http:// URL, got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base = parts.path.rstrip("/")
        self.keep = keep  # idle connections kept at most
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
            return await asyncio.open_connection(self.host, self.port, limit=HEAD_LIMIT)
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
            data = await (_chunked(reader) if chunked else reader.readexactly(length))
            keep = not close
            return status, data
        except (OSError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as exc:
            raise HttpError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if keep and len(self._idle) < self.keep:
                self._idle.append(conn)
            else:
                writer.close()

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


def _head(head: bytes) -> tuple[int, int, bool, bool]:
    """Status, Content-Length, chunked, Connection: close, from an answer's head."""
    line, _, fields = head.partition(b"\r\n")
    version, _, rest = line.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
        raise HttpError(f"not an HTTP/1.x answer: {line[:100]!r}")
    fields = b"\r\n" + fields.lower()
    length, chunked, close = -1, False, version == b"HTTP/1.0"
    at = fields.find(b"\r\ncontent-length:")
    if at >= 0:
        value = fields[at + 17 : fields.find(b"\r\n", at + 17)].strip()
        if not value.isdigit():
            raise HttpError(f"bad Content-Length: {value[:40]!r}")
        length = int(value)
    at = fields.find(b"\r\ntransfer-encoding:")
    if at >= 0:
        chunked = fields[at + 20 : fields.find(b"\r\n", at + 20)].strip().endswith(b"chunked")
    at = fields.find(b"\r\nconnection:")
    if at >= 0:
        value = fields[at + 13 : fields.find(b"\r\n", at + 13)].strip()
        close = value == b"close" or (close and value != b"keep-alive")
    if not chunked and length < 0:
        raise HttpError("an answer without Content-Length or chunked body")
    return int(rest[:3]), length, chunked, close


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size_hex = line.split(b";", 1)[0].strip()
        try:
            size = int(size_hex, 16)
        except ValueError as exc:
            raise HttpError(f"bad chunk size {size_hex[:20]!r}") from exc
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                pass
            return b"".join(parts)
        chunk = await reader.readexactly(size + 2)
        parts.append(chunk[:-2])
