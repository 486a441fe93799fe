"""AWS Bedrock AgentCore runtime backend: invoke, poll S3 for the result, stop.

The agent app (agentcore-rl-toolkit's contract) answers `invoke_agent_runtime` at once
with `{"status": "processing"}` and later writes `{"rewards": ..}` to
`s3://<bucket>/<result_key>`; we HEAD that key with a bounded backoff (0.5 s x1.5, capped)
and call `stop_runtime_session` on result, error, timeout or cancellation. boto3 is
blocking, so calls run on a thread pool exactly as large as the connection pool: parallel
boto calls can then never exceed `maxPoolConnections`, which is what keeps urllib3 from
discarding connections; `maxConcurrent` episodes share it. One `TpsLimiter` paces invoke
and stop calls together, as AgentCore's throttle counts both.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


def make_clients(spec: AgentCoreAgent, pool_size: int) -> tuple[Any, Any]:
    """(bedrock-agentcore client, s3 client) sharing one pool size and adaptive retries."""
    import botocore.config

    config = botocore.config.Config(
        max_pool_connections=pool_size,
        retries={"mode": "adaptive", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=60,
    )
    session = _boto_session(spec.region)
    return session.client(SERVICE, config=config), session.client("s3", config=config)


class AgentCoreBackend:
    def __init__(
        self,
        spec: AgentCoreAgent,
        *,
        result_prefix: str,
        pool_size: int,
        agentcore_client: Any = None,
        s3_client: Any = None,
        limiter: TpsLimiter | None = None,
    ) -> None:
        if agentcore_client is None or s3_client is None:
            agentcore_client, s3_client = make_clients(spec, pool_size)
        self._spec = spec
        self._prefix = result_prefix.strip("/")
        self._agentcore = agentcore_client
        self._s3 = s3_client
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
        await self._limiter.acquire()
        try:
            response = await self._call(
                self._agentcore.invoke_agent_runtime,
                agentRuntimeArn=self._spec.runtime_arn,
                runtimeSessionId=sid,
                payload=json.dumps(payload).encode(),
                contentType="application/json",
                accept="application/json",
            )
            body = await self._call(response["response"].read) if "response" in response else b""
        except Exception as exc:  # botocore ClientError, connection errors
            raise AgentError("agent_error", f"invoke_agent_runtime failed: {_brief(exc)}") from exc
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            return None  # a streaming or text answer: the result still comes through S3
        if isinstance(doc, dict) and ("rewards" in doc or "error" in doc):
            return doc
        return None

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


def _brief(exc: BaseException) -> str:
    """An exception as one short line (botocore messages carry no credentials)."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"
