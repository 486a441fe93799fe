"""A local stand-in for the Amazon Bedrock AgentCore data plane, in front of one agent app.

The one imitation the AgentCore tests allow: AgentCore itself cannot run here, the agent
app (agentcore-rl-toolkit's, served by bedrock-agentcore's real HTTP server) and S3 (moto's
server) can. It speaks the service's rest-json wire protocol for the two calls agentrl
makes, as botocore's service model for `bedrock-agentcore` (API 2024-02-28) describes it;
`tests/bundle/agents/test_agentcore_dataplane.py` checks every constant below against that
model and drives the stand-in with botocore's own serialiser and parser:

- `POST /runtimes/{agentRuntimeArn}/invocations` (the ARN percent-encoded as one path
  segment), session id in `X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`, the payload as
  the body: forwarded to the app's `POST /invocations` with the session and request id
  headers the runtime sets, and the app's answer streamed back chunk by chunk with its
  content type and the session header. An app answering non-2xx becomes
  `424 RuntimeClientError "Received error (<status>) from runtime. Please check your
  CloudWatch logs for more information."`, as the service does (it drops the body).
- `POST /runtimes/{agentRuntimeArn}/stopruntimesession`: 200 for a session it started,
  `404 ResourceNotFoundException` otherwise (never started, or already stopped).
- Errors are rest-json errors: the code in `X-Amzn-ErrorType`, `{"message": ...}` (plus
  `reason` for ValidationException) as the body. A request not signed with SigV4 for
  `bedrock-agentcore` in the runtime's region is refused (403 AccessDeniedException);
  an unknown runtime ARN is 404; `throttle_next` makes the next invokes 429
  ThrottlingException and `conflict_next` 409 RetryableConflictException (an operation on
  the same session still in progress), both refused before reaching the app.

What it does not do: run one microVM per session (every session shares the one app
process, so a stopped session's background work is not killed), authenticate the
signature's value, or bill anybody.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
REQUEST_ID_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Request-Id"
ERROR_TYPE_HEADER = "X-Amzn-ErrorType"
SIGNING_NAME = "bedrock-agentcore"
# operation -> (HTTP method, request URI template), as in the service model.
ROUTES = {
    "InvokeAgentRuntime": ("POST", "/runtimes/{agentRuntimeArn}/invocations"),
    "StopRuntimeSession": ("POST", "/runtimes/{agentRuntimeArn}/stopruntimesession"),
}
# error code -> HTTP status, for every error the stand-in answers with.
ERRORS = {
    "ValidationException": 400,
    "AccessDeniedException": 403,
    "ResourceNotFoundException": 404,
    "RuntimeClientError": 424,
    "RetryableConflictException": 409,
    "ThrottlingException": 429,
}
SESSION_ID_LENGTH = (33, 256)  # min, max of runtimeSessionId
CLIENT_TOKEN_LENGTH = (33, 256)  # StopRuntimeSession's clientToken (botocore fills it in)


@dataclass
class Invocation:
    session_id: str
    payload: bytes
    app_status: int | None = None  # None: refused before reaching the app


@dataclass
class AgentCoreDataPlane:
    runtime_arn: str
    region: str
    app_url: str  # the agent app, e.g. http://127.0.0.1:8080
    invocations: list[Invocation] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    throttle_next: int = 0
    conflict_next: int = 0
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _started: set[str] = field(default_factory=set)
    _runner: web.AppRunner | None = None
    _http: aiohttp.ClientSession | None = None
    url: str = ""

    async def start(self) -> str:
        app = web.Application(client_max_size=100_000_000)  # the payload's max in the model
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Until `predicate()` holds after an invocation or a stop (bounded, no polling)."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_for_stop(self, session_id: str, timeout_s: float = 60.0) -> None:
        """Until StopRuntimeSession for `session_id` arrived (a shielded stop may land
        after the cancelled episode returned)."""
        await self.wait_until(lambda: session_id in self.stopped, timeout_s)

    async def _changed_now(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- wire protocol -----------------------------------------------------------------

    @staticmethod
    def error(code: str, message: str, **extra: Any) -> web.Response:
        return web.json_response(
            {"message": message, **extra},
            status=ERRORS[code],
            headers={ERROR_TYPE_HEADER: code},
        )

    def _signed_for_us(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization", "")
        scope = f"/{self.region}/{SIGNING_NAME}/aws4_request"
        return auth.startswith("AWS4-HMAC-SHA256 Credential=") and scope in auth

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        # The ARN is one percent-encoded segment ("/" inside it is %2F): split the raw path.
        parts = request.raw_path.split("?", 1)[0].split("/")
        if request.method != "POST" or len(parts) != 4 or parts[1] != "runtimes":
            return web.json_response({"message": "UnknownOperationException"}, status=404)
        arn, action = unquote(parts[2]), parts[3]
        if not self._signed_for_us(request):
            return self.error("AccessDeniedException", "request not signed for this service")
        if arn != self.runtime_arn:
            return self.error("ResourceNotFoundException", f"no agent runtime {arn}")
        sid = request.headers.get(SESSION_HEADER, "")
        low, high = SESSION_ID_LENGTH
        if not low <= len(sid) <= high:
            return self.error(
                "ValidationException",
                f"runtimeSessionId must be {low} to {high} characters",
                reason="FieldValidationFailed",
            )
        if action == "invocations":
            return await self._invoke(request, sid)
        if action == "stopruntimesession":
            return await self._stop_session(request, sid)
        return web.json_response({"message": "UnknownOperationException"}, status=404)

    async def _invoke(self, request: web.Request, sid: str) -> web.StreamResponse:
        payload = await request.read()
        invocation = Invocation(sid, payload)
        self.invocations.append(invocation)
        if self.throttle_next > 0:
            self.throttle_next -= 1
            return self.error("ThrottlingException", "Rate exceeded")
        if self.conflict_next > 0:
            self.conflict_next -= 1
            return self.error(
                "RetryableConflictException", "A session operation is already in progress"
            )
        self._started.add(sid)
        assert self._http is not None
        headers = {
            "Content-Type": request.headers.get("Content-Type", "application/json"),
            SESSION_HEADER: sid,
            REQUEST_ID_HEADER: str(uuid.uuid4()),
        }
        async with self._http.post(
            f"{self.app_url}/invocations", data=payload, headers=headers
        ) as upstream:
            invocation.app_status = upstream.status
            await self._changed_now()
            if upstream.status >= 300:
                await upstream.read()
                return self.error(
                    "RuntimeClientError",
                    f"Received error ({upstream.status}) from runtime. Please check your "
                    "CloudWatch logs for more information.",
                )
            answer = web.StreamResponse(
                status=200,
                headers={
                    "Content-Type": upstream.headers.get("Content-Type", "application/json"),
                    SESSION_HEADER: sid,
                },
            )
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer

    async def _stop_session(self, request: web.Request, sid: str) -> web.Response:
        body = await request.read()
        token = json.loads(body).get("clientToken", "") if body else ""
        low, high = CLIENT_TOKEN_LENGTH
        if not low <= len(token) <= high:
            return self.error(
                "ValidationException",
                f"clientToken must be {low} to {high} characters",
                reason="FieldValidationFailed",
            )
        self.stopped.append(sid)
        await self._changed_now()
        if sid not in self._started:
            return self.error("ResourceNotFoundException", f"no runtime session {sid}")
        self._started.discard(sid)
        return web.json_response({}, headers={SESSION_HEADER: sid})
