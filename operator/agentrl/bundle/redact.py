"""Exceptions described for logs and failure messages without what they must not carry.

An aiohttp `ClientResponseError` (and its subclasses: `TooManyRedirects`,
`ContentTypeError`, a malformed response) keeps the request's `RequestInfo`, whose repr
lists every request header: an agent's API keys, a gateway bearer token. So an error is
described by its type, HTTP status and message only, never by `repr`.
"""

from __future__ import annotations

import aiohttp


def describe_error(exc: BaseException, limit: int = 200) -> str:
    """`TypeName[: HTTP <status>][ after <n> redirect(s)][: <message>]`."""
    parts = [type(exc).__name__]
    if isinstance(exc, aiohttp.ClientResponseError):
        if exc.status:
            parts.append(f"HTTP {exc.status}")
        message = str(exc.message or "")
        if exc.history:
            parts[-1] += f" after {len(exc.history)} redirect(s)"
    else:
        message = str(exc)
    if message:
        parts.append(message[:limit])
    return ": ".join(parts)
