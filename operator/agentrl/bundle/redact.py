"""Exceptions described for logs and failure messages without what they must not carry.

An aiohttp `ClientResponseError` (and its subclasses: `TooManyRedirects`,
`ContentTypeError`, a malformed response) keeps the request's `RequestInfo`, whose repr
lists every request header: an agent's API keys, a gateway bearer token. So an error is
described by its type, HTTP status and message only, never by `repr`.

An agent's own failure report is its text, and may quote the payload it was given (a
validation error of the payload does), with the episode's session and callback tokens:
`redact_values` takes known secret values out of such a text.
"""

from __future__ import annotations

import aiohttp

from agentrl.api.constants import REDACTED


def redact_values(text: str, *secrets: str) -> str:
    """`text` with every occurrence of each (non-empty) secret replaced by `<redacted>`."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


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
