"""AWS Bedrock AgentCore runtime backend, speaking agentcore-rl-toolkit's agent contract.

An agent built with the toolkit (`AgentCoreRLApp` + `@app.rollout_entrypoint`, release
0.2.0: https://github.com/awslabs/agentcore-rl-toolkit/blob/7bdd4159b505d8fc3571027b1a9c5f817011cceb/src/agentcore_rl_toolkit/app.py,
identical in the 0.2.0 wheel) reads `exp_id`, `input_id` and `s3_bucket` from the
payload's `_rollout` (all three, or it answers HTTP 500), answers the invoke at once with
`{"status": "processing", "s3_bucket", "result_key"}`, runs the episode in the background
and writes its result document to `s3://<s3_bucket>/<exp_id>/<input_id>/<session id>.json`,
the session id being the runtime session id the invoke carried. We send those fields,
read the object the reply names (GET, jittered backoff 0.5 s x1.5 capped at 30 s, until
the episode deadline), and call `stop_runtime_session` on result, error, timeout or
cancellation. docs/agents.md has the whole contract, ours next to the toolkit's.

boto3 is blocking, so calls run on a thread pool exactly as large as the connection pool:
parallel boto calls can then never exceed `maxPoolConnections`, which is what keeps
urllib3 from discarding connections; `maxConcurrent` episodes share it. One `TpsLimiter`
paces invoke and stop calls together, as AgentCore's throttle counts both.

Invoking starts an episode, so botocore never retries it: a read timeout or a dropped
connection after the request was sent would run the same episode again into the same
gateway session. The invoke client waits up to the episode timeout for an answer (an agent
may answer synchronously) and makes one attempt; only an invoke that cannot have run is
tried again, by stamina with jitter, so a hundred refused episodes do not come back in
lockstep: the service throttled it (`ThrottlingException`, 429), refused it because an
operation on the same runtime session was still in progress (`RetryableConflictException`,
409, which botocore's model of InvokeAgentRuntime marks `retryable` and the toolkit's own
client retries), or the connection never opened. Idempotent calls (stop, S3) keep
botocore's adaptive retries, which are jittered too and retry modeled-retryable errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import botocore.exceptions
import stamina

from agentrl.api.models import AgentCoreAgent
from agentrl.bundle.agents.agentcore_model import SERVICE, model_dir
from agentrl.bundle.agents.base import (
    AgentError,
    AgentRequest,
    AgentResult,
    PoolStats,
    parse_result,
    payload_secrets,
    poll_delays,
)
from agentrl.bundle.agents.pool import InUseGauge, install_discard_counter
from agentrl.bundle.agents.ratelimit import TpsLimiter
from agentrl.bundle.failures import AGENT_ERROR, BAD_RESULT, RESULT_UNREADABLE, THROTTLED

log = logging.getLogger("agentrl.agents.agentcore")
T = TypeVar("T")

# Looking for the result object (the toolkit's RolloutFuture uses the same 0.5 s x1.5,
# capped at 30 s); +/-20% jitter spreads episodes that started together.
POLL_FIRST_S, POLL_FACTOR, POLL_CAP_S, POLL_JITTER = 0.5, 1.5, 30.0, 0.2
# An invoke that cannot have run: tries, and stamina's backoff between them (1 s, 2 s,
# 4 s, each plus up to 1 s of jitter).
INVOKE_ATTEMPTS = 4
INVOKE_WAIT_INITIAL_S, INVOKE_WAIT_MAX_S, INVOKE_WAIT_JITTER_S = 1.0, 8.0, 1.0
# Refusals of an invoke that never ran: throttling, and the conflict botocore's model marks
# retryable (https://github.com/boto/botocore/blob/1.44.8/botocore/data/bedrock-agentcore/2024-02-28/service-2.json).
NEVER_RAN: Final = frozenset({"ThrottlingException", "RetryableConflictException"})
# The account's quota (402; e.g. concurrent runtime sessions) refused the invoke: it never ran
# either, but the model does not mark it retryable and a retry seconds later meets the same
# quota. Not the agent's failure: counted as throttled, with what to change.
OVER_QUOTA: Final = "ServiceQuotaExceededException"
# aclose() waits this long for the stops still owed to sessions whose invoke outlived its
# episode (see `_stop_after_invoke`) before the pool shuts down.
LATE_STOP_WAIT_S = 60.0
# Keys that make an invoke's answer a result document (the toolkit's "processing" has none).
_RESULT_KEYS: Final = frozenset({"rewards", "reward", "status_code", "error"})


def experiment_id(namespace: str, experiment: str) -> str:
    """The toolkit's `exp_id`: the first part of every result key of one experiment."""
    return f"agentrl/{namespace}/{experiment}"


def input_id(row: Mapping[str, Any]) -> str:
    """The toolkit's `input_id` ("which input example"): a digest of the dataset row, so
    every attempt at one prompt (its GRPO group, later epochs, evals) shares one prefix."""
    canonical = json.dumps(
        {k: v for k, v in row.items() if k != "_rollout"}, sort_keys=True, separators=(",", ":")
    )
    return "row-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def result_key(exp_id: str, row_id: str, session_id: str) -> str:
    """Where the toolkit's app writes an episode's result (`{exp_id}/{input_id}/{sid}.json`)."""
    return f"{exp_id}/{row_id}/{session_id}.json"


@dataclass(frozen=True)
class ResultLocation:
    bucket: str
    key: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def with_rollout_fields(
    payload: Mapping[str, Any], exp_id: str, bucket: str, session_id: str
) -> tuple[dict[str, Any], ResultLocation]:
    """The payload the toolkit's app expects, and where it will write the result.

    `exp_id`, `input_id` and `s3_bucket` are the toolkit's; `result_key` is the same key
    spelled out for agents not built on the toolkit (the toolkit ignores it)."""
    out = dict(payload)
    iid = input_id(payload)
    where = ResultLocation(bucket, result_key(exp_id, iid, session_id))
    out["_rollout"] = {
        **dict(payload.get("_rollout") or {}),
        "exp_id": exp_id,
        "input_id": iid,
        "s3_bucket": bucket,
        "result_key": where.key,
    }
    return out, where


def read_reply(
    body: bytes, expected: ResultLocation
) -> tuple[Mapping[str, Any] | None, ResultLocation]:
    """The invoke's answer -> (a result given inline, or None; where to look otherwise).

    The toolkit answers `{"status": "processing", "s3_bucket", "result_key"}` and the key it
    names wins over ours (it differs only if the runtime did not pass the session id on,
    and the app then made one up). An agent may also answer with its result document; any
    other answer (text, an event stream) leaves the result to S3 at the expected key."""
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None, expected
    if not isinstance(doc, dict):
        return None, expected
    if _RESULT_KEYS & doc.keys():
        return doc, expected
    key, bucket = doc.get("result_key"), doc.get("s3_bucket")
    if isinstance(key, str) and key:
        return None, ResultLocation(
            bucket if isinstance(bucket, str) and bucket else expected.bucket, key
        )
    return None, expected


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
    elsewhere (a VPC endpoint); boto3's `AWS_ENDPOINT_URL_BEDROCK_AGENTCORE` and
    `AWS_ENDPOINT_URL_S3` environment variables work too."""
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


def runtime_endpoint(region: str) -> str:
    """The URL boto3 would send invocations to in `region`: AWS's, or the one
    `AWS_ENDPOINT_URL_BEDROCK_AGENTCORE` (or the profile's `services`) points it at. Building
    a client reads configuration only; nothing is sent."""
    return str(_boto_session(region).client(SERVICE).meta.endpoint_url)


class AgentCoreBackend:
    def __init__(
        self,
        spec: AgentCoreAgent,
        *,
        exp_id: str,
        pool_size: int,
        clients: AgentCoreClients | None = None,
        limiter: TpsLimiter | None = None,
    ) -> None:
        clients = clients or make_clients(spec, pool_size)
        self._spec = spec
        self._exp_id = exp_id.strip("/")
        self._invoker = clients.invoke
        self._agentcore = clients.control
        self._s3 = clients.s3
        self._limiter = limiter or TpsLimiter(spec.tps_limit)
        self._pool_size = pool_size
        self._executor = ThreadPoolExecutor(pool_size, thread_name_prefix="agentrl-boto")
        self._in_use = InUseGauge()
        self._stop_failures = 0
        # Invokes in flight by session id, and the stops owed to sessions whose episode
        # ended before its invoke returned (`_stop_after_invoke`).
        self._invokes: dict[str, Future[bytes]] = {}
        self._late_stops: set[asyncio.Task[None]] = set()
        install_discard_counter()

    @property
    def exp_id(self) -> str:
        """The first part of every result key this backend's episodes get."""
        return self._exp_id

    def _submit(self, fn: Callable[..., T], **kwargs: Any) -> Future[T]:
        def held() -> T:
            with self._in_use.hold():
                return fn(**kwargs)

        return self._executor.submit(held)

    async def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        return await asyncio.wrap_future(self._submit(fn, **kwargs))

    async def run(self, request: AgentRequest) -> AgentResult:
        sid = request.session_id
        payload, expected = with_rollout_fields(
            request.payload, self._exp_id, self._spec.s3_bucket, sid
        )
        secrets = payload_secrets(payload)  # the agent's report may quote its payload
        try:
            body = await self._invoke(sid, json.dumps(payload).encode())
            inline, where = read_reply(body, expected)
            if inline is not None:  # the agent answered synchronously
                return dataclasses.replace(parse_result(inline, secrets), via="inline")
            try:
                return dataclasses.replace(
                    parse_result(await self._await_document(where), secrets), via="s3"
                )
            except AgentError as exc:  # say where the document is, for whoever debugs it
                raise AgentError(exc.reason, f"{exc} (result {where})", exc.document) from None
        finally:
            invoke = self._invokes.pop(sid, None)
            # Shielded: a cancelled episode must still free its AgentCore session.
            await asyncio.shield(self.stop(sid))
            if invoke is not None and not invoke.done():
                self._stop_after_invoke(sid, invoke)

    def _stop_after_invoke(self, sid: str, invoke: Future[bytes]) -> None:
        """The episode ended (its deadline, a cut) while its invoke was still running on a
        pool thread, which cancelling cannot stop (a cold start takes seconds). The stop just
        sent may have reached AgentCore before the invoke did, found no session
        (ResourceNotFoundException) and freed nothing; the invoke then starts a session that
        runs, billed, until AgentCore's idle timeout. So the session is stopped again once
        the invoke returns, in the background: the step does not wait for it, and botocore's
        read timeout on invoke bounds how late it comes."""

        async def stop_when_returned() -> None:
            await asyncio.wait([asyncio.wrap_future(invoke)])  # its outcome is the episode's
            await self.stop(sid)

        task = asyncio.get_running_loop().create_task(stop_when_returned())
        self._late_stops.add(task)
        task.add_done_callback(self._late_stops.discard)

    async def _invoke(self, sid: str, request: bytes) -> bytes:
        try:
            async for attempt in stamina.retry_context(
                on=_cannot_have_run,
                attempts=INVOKE_ATTEMPTS,
                timeout=None,  # the episode deadline bounds it
                wait_initial=INVOKE_WAIT_INITIAL_S,
                wait_max=INVOKE_WAIT_MAX_S,
                wait_jitter=INVOKE_WAIT_JITTER_S,
            ):
                with attempt:
                    await self._limiter.acquire()
                    invoke = self._submit(self._invoke_and_read, sid=sid, request=request)
                    self._invokes[sid] = invoke
                    return await asyncio.wrap_future(invoke)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            code = _error_code(exc)
            reason = THROTTLED if code in NEVER_RAN or code == OVER_QUOTA else AGENT_ERROR
            raise AgentError(reason, _invoke_failure(exc)) from exc
        raise AssertionError("unreachable: stamina re-raises the last failure")

    def _invoke_and_read(self, sid: str, request: bytes) -> bytes:
        # One call for both: the connection stays checked out until the body is read.
        response = self._invoker.invoke_agent_runtime(
            agentRuntimeArn=self._spec.runtime_arn,
            runtimeSessionId=sid,
            payload=request,
            contentType="application/json",
            accept="application/json",
        )
        return bytes(response["response"].read()) if "response" in response else b""

    async def _await_document(self, where: ResultLocation) -> Any:
        """The result document, once the agent wrote it; the episode deadline ends the wait."""
        for delay in poll_delays(POLL_FIRST_S, POLL_FACTOR, POLL_CAP_S, POLL_JITTER):
            await asyncio.sleep(delay)
            raw = await self._read(where)
            if raw is not None:
                try:
                    return json.loads(raw)
                except ValueError as exc:
                    raise AgentError(BAD_RESULT, "the result is not JSON") from exc
        raise AssertionError("unreachable: the delays never end")

    async def _read(self, where: ResultLocation) -> bytes | None:
        """The object's bytes, or None while it does not exist."""
        try:
            # One call for both: the connection stays checked out until the body is read.
            return await self._call(self._get_bytes, bucket=where.bucket, key=where.key)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            code = _error_code(exc)
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            hint = (
                " (S3 answers 403 for a key that does not exist yet when the pod's role "
                "lacks s3:ListBucket on the bucket; grant it with s3:GetObject)"
                if code in ("AccessDenied", "403")
                else ""
            )
            raise AgentError(
                RESULT_UNREADABLE, f"reading the result failed: {_brief(exc)}{hint}"
            ) from exc

    def _get_bytes(self, bucket: str, key: str) -> bytes:
        return bytes(self._s3.get_object(Bucket=bucket, Key=key)["Body"].read())

    async def stop(self, session_id: str) -> None:
        """StopRuntimeSession for the episode; idempotent, never raises."""
        await self._limiter.acquire()
        try:
            await self._call(
                self._agentcore.stop_runtime_session,
                agentRuntimeArn=self._spec.runtime_arn,
                runtimeSessionId=session_id,
            )
        except Exception as exc:
            if _error_code(exc) == "ResourceNotFoundException":
                return  # never started, or already ended: nothing to free
            # Anything else (a missing IAM permission...) leaves the session running until
            # AgentCore's idle timeout: worth one warning, then debug (it repeats).
            self._stop_failures += 1
            level = logging.WARNING if self._stop_failures == 1 else logging.DEBUG
            log.log(
                level,
                "stop_runtime_session %s failed: %s (the runtime session stays up until "
                "AgentCore's idle timeout; further stop failures are logged at debug level)",
                session_id,
                _brief(exc),
            )

    def pool_stats(self) -> PoolStats:
        return PoolStats(size=self._pool_size, in_use=self._in_use.value)

    async def aclose(self) -> None:
        # The stops still owed run first: shutting down with cancel_futures drops queued calls.
        if self._late_stops:
            pending = set(self._late_stops)
            _, left = await asyncio.wait(pending, timeout=LATE_STOP_WAIT_S)
            if left:
                log.warning(
                    "%d AgentCore runtime session(s) whose invoke was still running when their "
                    "episode ended were not stopped within %gs; they stay up until "
                    "AgentCore's idle timeout",
                    len(left),
                    LATE_STOP_WAIT_S,
                )
                for task in left:
                    task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _cannot_have_run(exc: BaseException) -> bool:
    """An invoke that AgentCore refused, or whose connection never opened: it never ran."""
    if isinstance(
        exc, botocore.exceptions.EndpointConnectionError | botocore.exceptions.ConnectTimeoutError
    ):
        return True
    return _error_code(exc) in NEVER_RAN


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _invoke_failure(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ReadTimeoutError):
        return (
            f"invoke_agent_runtime: no answer within the read timeout ({_brief(exc)}); not "
            "retried, since a second invoke would run the episode again"
        )
    if _error_code(exc) == "RuntimeClientError":
        return (
            f"invoke_agent_runtime: the agent app answered with an error ({_brief(exc)}); "
            "its log (CloudWatch, for a deployed runtime) says why; an app built with "
            "agentcore-rl-toolkit answers 500 when _rollout lacks exp_id, input_id or s3_bucket"
        )
    if _error_code(exc) == OVER_QUOTA:
        return (
            f"invoke_agent_runtime refused: an AgentCore quota of the account is used up "
            f"({_brief(exc)}); lower spec.agent.maxConcurrent below it, or ask AWS to raise it"
        )
    if _error_code(exc) in NEVER_RAN:
        return (
            f"invoke_agent_runtime refused {INVOKE_ATTEMPTS} times (throttled or a conflicting "
            f"operation on the session): {_brief(exc)}"
        )
    return f"invoke_agent_runtime failed: {_brief(exc)}"


def _brief(exc: BaseException) -> str:
    """An exception as one short line (botocore messages carry no credentials)."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"
