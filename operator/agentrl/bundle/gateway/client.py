"""`GatewayClient`: the `GatewaySessions` and `CallbackRouting` protocols over the gateway's
admin API.

The rollout function runs in slime's rollout process, not in the hub actor that hosts the
gateway, so it opens, reads and closes sessions over HTTP with the admin token.

Idempotent calls (reading turns, closing) retry connection failures and timeouts with
`stamina` (exponential backoff with jitter, so a hundred episodes that lost the gateway
at once do not come back in lockstep). Opening a session is not retried: if the answer
was lost, a retry would find the id taken. The quiesce call has its own long deadline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import aiohttp
import orjson
import stamina

from agentrl.bundle.redact import describe_error
from agentrl.bundle.session import (
    FULL_LIMITS,
    ContextFullCalls,
    QuiesceReport,
    SessionError,
    SessionHandle,
)
from agentrl.bundle.traces import Turn

RETRY_ATTEMPTS = 3  # idempotent admin calls: the first try and two retries


class _Wait(TypedDict):
    """The backoff keywords of `stamina.retry_context`, typed so that unpacking them cannot
    fill one of its other parameters (stamina 26.2 added a keyword-only `name: str`)."""

    wait_initial: float
    wait_exp_base: float
    wait_max: float
    wait_jitter: float


RETRY_WAIT = _Wait(wait_initial=0.2, wait_exp_base=2.0, wait_max=2.0, wait_jitter=0.2)


class _Transient(Exception):
    """A connection failure or a timeout, described by type and message only: stamina logs
    the repr of what it retries, and an aiohttp error's repr can carry the request headers
    (here the admin token)."""


class GatewayClient:
    def __init__(self, admin_url: str, admin_token: str, timeout_s: float = 30.0) -> None:
        self._url = admin_url.rstrip("/")
        self._headers = {
            "Authorization": f"Bearer {admin_token}",
            "Content-Type": "application/json",
        }
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # the admin token stays out of logs
        return f"GatewayClient({self._url!r})"

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        return self._http

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        retry: bool = False,
        client_timeout: aiohttp.ClientTimeout | None = None,  # None: the session's (30 s)
    ) -> tuple[int, Any]:
        """One admin call; with `retry` (idempotent calls only), connection failures and
        timeouts are retried (a gateway restart or a dropped keep-alive connection must
        not fail an episode). Errors are described by type, status and message, never by
        repr: an aiohttp error's repr carries the request headers, here the admin token."""
        data = None if body is None else orjson.dumps(body)
        limits = client_timeout or self._timeout
        try:
            async for attempt in stamina.retry_context(
                on=_Transient, attempts=RETRY_ATTEMPTS if retry else 1, timeout=None, **RETRY_WAIT
            ):
                with attempt:
                    return await self._once(method, path, data, limits)
        except _Transient as exc:
            raise SessionError(f"gateway admin API {method} {path}: {exc}") from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _once(
        self, method: str, path: str, data: bytes | None, limits: aiohttp.ClientTimeout
    ) -> tuple[int, Any]:
        try:
            async with self._session().request(
                method, self._url + path, data=data, timeout=limits
            ) as resp:
                raw = await resp.read()
                return resp.status, (orjson.loads(raw) if raw else None)
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise _Transient(describe_error(exc)) from None
        except (aiohttp.ClientError, orjson.JSONDecodeError) as exc:
            what = describe_error(exc)
            raise SessionError(f"gateway admin API {method} {path}: {what}") from exc

    @staticmethod
    def _fail(what: str, status: int, body: Any) -> SessionError:
        message = (body or {}).get("error", {}).get("message") if isinstance(body, dict) else None
        return SessionError(f"gateway: {what}: HTTP {status}: {message or body}")

    async def create_session(
        self, session_id: str, sampling_params: Mapping[str, Any]
    ) -> SessionHandle:
        status, body = await self._call(
            "POST",
            "/admin/sessions",
            {"session_id": session_id, "sampling_params": dict(sampling_params)},
        )
        if status != 201:
            raise self._fail(f"create session {session_id}", status, body)
        return SessionHandle(
            session_id=body["session_id"], base_url=body["base_url"], token=body["token"]
        )

    async def get_turns(self, session_id: str) -> Sequence[Turn]:
        status, body = await self._call("GET", f"/admin/sessions/{session_id}/turns", retry=True)
        if status != 200:
            raise self._fail(f"turns of {session_id}", status, body)
        return [
            Turn(
                t["prompt_ids"],
                t["completion_ids"],
                t["logprobs"],
                t["finish_reason"],
                # Absent from an older gateway's answer: unknown, never judged.
                weight_version=v if isinstance(v := t.get("weight_version"), str) else None,
            )
            for t in body["turns"]
        ]

    async def context_full(self, session_id: str) -> ContextFullCalls:
        path = f"/admin/sessions/{session_id}/context_full"
        status, body = await self._call("GET", path, retry=True)
        if status != 200:
            raise self._fail(f"context of {session_id}", status, body)
        # `limit` is optional: a gateway of an older release does not name it (None: unknown).
        limit = next((k for k in FULL_LIMITS if k == body.get("limit")), None)
        return ContextFullCalls(body["calls"], body["prompt_tokens"], body["context_length"], limit)

    async def close_session(self, session_id: str) -> None:
        status, body = await self._call("DELETE", f"/admin/sessions/{session_id}", retry=True)
        if status not in (204, 404):  # closing twice, or an id never opened, is fine
            raise self._fail(f"close session {session_id}", status, body)

    async def relay_callbacks_to(self, target: str) -> str:
        """Have the gateway pass agents' result callbacks to `target` (idempotent); the URL
        agents post them under."""
        status, body = await self._call("PUT", "/admin/callbacks", {"target": target}, retry=True)
        if status != 200:
            raise self._fail(f"relay callbacks to {target}", status, body)
        return str(body["callback_base"])

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        status, body = await self._call(
            "POST",
            "/admin/engines/quiesce",
            {"timeout_s": timeout_s},
            client_timeout=aiohttp.ClientTimeout(total=timeout_s + 30),
        )
        if status != 200:
            raise self._fail("quiesce engines", status, body)
        return QuiesceReport(
            idle=bool(body["idle"]),
            in_flight=int(body["in_flight"]),
            engine_requests=body["engine_requests"],
            workers=int(body["workers"]),
        )

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
