"""`redact.describe_error`: aiohttp response errors described without the request's headers."""

from __future__ import annotations

from typing import cast

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from agentrl.bundle.redact import describe_error

SECRET = "SEKRET-123"


def _info() -> aiohttp.RequestInfo:
    headers = CIMultiDictProxy(
        CIMultiDict({"X-Api-Key": SECRET, "Authorization": f"Bearer {SECRET}"})
    )
    url = URL("http://agent.example/episodes")
    return aiohttp.RequestInfo(url, "POST", headers, url)


def test_a_response_error_is_described_by_type_status_and_message_only() -> None:
    exc = aiohttp.ClientResponseError(_info(), (), status=400, message="Bad Request")
    assert SECRET in repr(exc.request_info)  # what the description must leave out
    assert describe_error(exc) == "ClientResponseError: HTTP 400: Bad Request"


def test_redirects_are_counted_not_shown() -> None:
    history = cast("tuple[aiohttp.ClientResponse, ...]", (object(), object()))
    exc = aiohttp.TooManyRedirects(_info(), history)
    assert describe_error(exc) == "TooManyRedirects after 2 redirect(s)"


def test_other_errors_keep_their_message_up_to_the_limit() -> None:
    assert describe_error(ValueError("x" * 500), limit=10) == "ValueError: " + "x" * 10
