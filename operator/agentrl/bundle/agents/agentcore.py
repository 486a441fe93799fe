"""AWS Bedrock AgentCore runtime backend: invoke, poll S3 for the result, stop.

The agent app (agentcore-rl-toolkit's contract) answers `invoke_agent_runtime` at once
with `{"status": "processing"}` and later writes `{"rewards": ..}` to
`s3://<bucket>/<result_key>`; we HEAD that key with a bounded backoff (0.5 s x1.5, capped)
and call `stop_runtime_session` on result, error, timeout or cancellation. boto3 is
blocking, so calls run on a thread pool exactly as large as the connection pool: parallel
boto calls can then never exceed `maxPoolConnections`, which is what keeps urllib3 from
discarding connections; `maxConcurrent` episodes share it. One `TpsLimiter` paces invoke
and stop calls together, as AgentCore's throttle counts both.

Invoking starts an episode, so botocore never retries it: a read timeout or a dropped
connection after the request was sent would run the same episode again into the same
gateway session. The invoke client waits up to the episode timeout for an answer (an agent
may answer synchronously) and makes one attempt; only a throttled invoke (refused, so it
never ran) is tried again, by us. Idempotent calls (stop, S3) keep botocore's adaptive
retries.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from agentrl.api.models import AgentCoreAgent
from agentrl.bundle.agents.agentcore_model import SERVICE, model_dir
from agentrl.bundle.agents.base import (
    AgentError,
    AgentRequest,
    AgentResult,
    PoolStats,
    backoff_delays,
    parse_result,
)
from agentrl.bundle.agents.pool import InUseGauge, install_discard_counter
from agentrl.bundle.agents.ratelimit import TpsLimiter

log = logging.getLogger("agentrl.agents.agentcore")
T = TypeVar("T")

POLL_FIRST_S, POLL_FACTOR, POLL_CAP_S = 0.5, 1.5, 30.0
INVOKE_ATTEMPTS = 4  # tries of a throttled invoke (refused by the service: it never ran)
THROTTLED = frozenset({"ThrottlingException", "TooManyRequestsException"})


def _boto_session(region: str) -> Any:
    """A boto3 session that knows bedrock-agentcore, with agentrl's model if botocore does not."""
    import boto3
    import botocore
    import botocore.loaders

    session = boto3.session.Session(region_name=region)
    # A fresh loader: the session's own caches its service list on first use.
    if SERVICE not in botocore.loaders.Loader().list_available_services("service-2"):
        log.warning(
            "botocore %s predates bedrock-agentcore; using agentrl's built-in model of "
            "InvokeAgentRuntime/StopRuntimeSession (upgrade boto3 to >= 1.39.8 to drop this)",
            botocore.__version__,
        )
        loader = session._session.get_component("data_loader")
        loader.search_paths.insert(0, str(model_dir()))
    return session


@dataclass(frozen=True)
class AgentCoreClients:
    invoke: Any  # bedrock-agentcore for invoke_agent_runtime: one attempt, episode-long read
    control: Any  # bedrock-agentcore for stop_runtime_session (idempotent): adaptive retries
    s3: Any


def make_clients(
    spec: AgentCoreAgent, pool_size: int, endpoint_url: str | None = None
) -> AgentCoreClients:
    """The three clients, sharing one pool size. `endpoint_url` points the AgentCore ones
    elsewhere (a VPC endpoint, a test server)."""
    import botocore.config

    retried = botocore.config.Config(
        max_pool_connections=pool_size,
        retries={"mode": "adaptive", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=60,
    )
    once = botocore.config.Config(
        max_pool_connections=pool_size,
        retries={"mode": "standard", "total_max_attempts": 1},
        connect_timeout=10,
        read_timeout=spec.timeout_seconds,
    )
    session = _boto_session(spec.region)
    return AgentCoreClients(
        invoke=session.client(SERVICE, config=once, endpoint_url=endpoint_url),
        control=session.client(SERVICE, config=retried, endpoint_url=endpoint_url),
        s3=session.client("s3", config=retried),
    )


class AgentCoreBackend:
    def __init__(
        self,
        spec: AgentCoreAgent,
        *,
        result_prefix: str,
        pool_size: int,
        clients: AgentCoreClients | None = None,
        limiter: TpsLimiter | None = None,
    ) -> None:
        clients = clients or make_clients(spec, pool_size)
        self._spec = spec
        self._prefix = result_prefix.strip("/")
        self._invoker = clients.invoke
        self._agentcore = clients.control
        self._s3 = clients.s3
        self._limiter = limiter or TpsLimiter(spec.tps_limit)
        self._pool_size = pool_size
        self._executor = ThreadPoolExecutor(pool_size, thread_name_prefix="agentrl-boto")
        self._in_use = InUseGauge()
        install_discard_counter()

    def result_key(self, session_id: str) -> str:
        return f"{self._prefix}/{session_id}.json"

    async def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        def held() -> T:
            with self._in_use.hold():
                return fn(**kwargs)

        return await asyncio.get_running_loop().run_in_executor(self._executor, held)

    async def run(self, request: AgentRequest) -> AgentResult:
        sid = request.session_id
        key = self.result_key(sid)
        payload = dict(request.payload)
        rollout = dict(payload.get("_rollout") or {})
        rollout.update(s3_bucket=self._spec.s3_bucket, result_key=key, input_id=sid)
        payload["_rollout"] = rollout
        try:
            inline = await self._invoke(sid, payload)
            if inline is not None:  # the agent answered synchronously
                return parse_result(inline)
            return parse_result(await self._poll(key))
        finally:
            # Shielded: a cancelled episode must still free its AgentCore session.
            await asyncio.shield(self._stop(sid))

    async def _invoke(self, sid: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        request = json.dumps(payload).encode()
        attempt = 0
        while True:
            await self._limiter.acquire()
            try:
                body = await self._invoke_once(sid, request)
                break
            except Exception as exc:  # botocore ClientError, timeouts, connection errors
                attempt += 1
                if _error_code(exc) not in THROTTLED or attempt >= INVOKE_ATTEMPTS:
                    raise AgentError("agent_error", _invoke_failure(exc)) from exc
            await asyncio.sleep(POLL_FIRST_S * 2**attempt)  # refused: it never ran
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            return None  # a streaming or text answer: the result still comes through S3
        if isinstance(doc, dict) and ("rewards" in doc or "error" in doc):
            return doc
        return None

    async def _invoke_once(self, sid: str, request: bytes) -> bytes:
        response = await self._call(
            self._invoker.invoke_agent_runtime,
            agentRuntimeArn=self._spec.runtime_arn,
            runtimeSessionId=sid,
            payload=request,
            contentType="application/json",
            accept="application/json",
        )
        if "response" not in response:
            return b""
        return bytes(await self._call(response["response"].read))

    async def _poll(self, key: str) -> Any:
        for delay in backoff_delays(POLL_FIRST_S, POLL_FACTOR, POLL_CAP_S):
            await asyncio.sleep(delay)
            if await self._exists(key):
                try:
                    obj = await self._call(
                        self._s3.get_object, Bucket=self._spec.s3_bucket, Key=key
                    )
                    return json.loads(await self._call(obj["Body"].read))
                except ValueError as exc:
                    raise AgentError(
                        "bad_result", f"result {key} in bucket {self._spec.s3_bucket} is not JSON"
                    ) from exc
        raise AssertionError("unreachable")  # the delays never end; the episode timeout does

    async def _exists(self, key: str) -> bool:
        import botocore.exceptions

        try:
            await self._call(self._s3.head_object, Bucket=self._spec.s3_bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise AgentError("result_unreadable", f"head_object {key}: {_brief(exc)}") from exc
        return True

    async def _stop(self, sid: str) -> None:
        await self._limiter.acquire()
        try:
            await self._call(
                self._agentcore.stop_runtime_session,
                agentRuntimeArn=self._spec.runtime_arn,
                runtimeSessionId=sid,
            )
        except Exception as exc:  # already ended sessions answer 404; nothing to free
            log.debug("stop_runtime_session %s: %s", sid, _brief(exc))

    def pool_stats(self) -> PoolStats:
        return PoolStats(size=self._pool_size, in_use=self._in_use.value)

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _invoke_failure(exc: BaseException) -> str:
    import botocore.exceptions

    if isinstance(exc, botocore.exceptions.ReadTimeoutError):
        return (
            f"invoke_agent_runtime: no answer within the read timeout ({_brief(exc)}); not "
            "retried, since a second invoke would run the episode again"
        )
    return f"invoke_agent_runtime failed: {_brief(exc)}"


def _brief(exc: BaseException) -> str:
    """An exception as one short line (botocore messages carry no credentials)."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"
