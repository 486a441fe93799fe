"""The AgentCore backend's own logic, on real botocore clients: Stubber for AgentCore, moto
for S3, a fake clock for the waits.

Stubber validates every call against botocore's service model for bedrock-agentcore;
moto's in-process S3 really stores, lists and returns objects. The released toolkit app
behind a wire-level stand-in of the data plane is exercised in test_agentcore_toolkit.py;
this file covers what is quicker to pin down one call at a time (retries, the reply
forms, S3 errors).
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import botocore.session
import pytest
import stamina
from aiohttp import web
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws

from agentrl.api.models import AgentCoreAgent
from agentrl.bundle.agents.agentcore import (
    INVOKE_ATTEMPTS,
    NEVER_RAN,
    OVER_QUOTA,
    AgentCoreBackend,
    AgentCoreClients,
    ResultLocation,
    _cannot_have_run,
    input_id,
    make_clients,
    read_reply,
    result_key,
    with_rollout_fields,
)
from agentrl.bundle.agents.base import AgentError, AgentRequest
from agentrl.bundle.agents.ratelimit import TpsLimiter
from agentrl.bundle.failures import THROTTLED
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec, run_episode
from agentrl.bundle.session import ContextFullCalls, QuiesceReport, SessionHandle

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/math-agent-AbCdEf1234"
SPEC = AgentCoreAgent(runtimeArn=ARN, region="us-east-1", s3Bucket="rl-results")
SID = "s" * 43
EXP = "agentrl/ns/exp"
ROW = {"prompt": "2+2", "answer": "4"}
REQUEST = AgentRequest(SID, {**ROW, "_rollout": {"base_url": "http://gw/v1", "api_key": "t"}})
KEY = result_key(EXP, input_id(ROW), SID)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        clients = make_clients(SPEC, pool_size=4)
        clients.s3.create_bucket(Bucket=SPEC.s3_bucket)
        yield clients.control, clients.s3


def body(doc: Any) -> StreamingBody:
    raw = json.dumps(doc).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


def backend(agentcore: Any, s3: Any) -> AgentCoreBackend:
    return AgentCoreBackend(
        SPEC,
        exp_id=EXP,
        pool_size=4,
        # One stubbed client for invoke and stop (production makes two: see below).
        clients=AgentCoreClients(invoke=agentcore, control=agentcore, s3=s3),
        limiter=TpsLimiter(1000.0),
    )


class Capture:
    """A Stubber expected-parameter that matches anything and keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def __eq__(self, other: object) -> bool:
        self.seen.append(other)
        return True

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def expect_invoke(stub: Stubber, answer: Any, payload: Any = ANY) -> None:
    params = {
        "agentRuntimeArn": ARN,
        "runtimeSessionId": SID,
        "payload": payload,
        "contentType": "application/json",
        "accept": "application/json",
    }
    response = {"contentType": "application/json", "statusCode": 200, "response": body(answer)}
    stub.add_response("invoke_agent_runtime", response, params)


def expect_stop(stub: Stubber) -> None:
    params = {"agentRuntimeArn": ARN, "runtimeSessionId": SID}
    stub.add_response("stop_runtime_session", {"runtimeSessionId": SID, "statusCode": 200}, params)


def processing(key: str = KEY, bucket: str = SPEC.s3_bucket) -> dict[str, str]:
    """The toolkit app's immediate answer."""
    return {"status": "processing", "s3_bucket": bucket, "result_key": key}


def test_the_payload_carries_the_toolkit_fields_and_the_key_it_derives() -> None:
    payload, where = with_rollout_fields(REQUEST.payload, EXP, "rl-results", SID)
    rollout = payload["_rollout"]
    assert rollout["exp_id"] == EXP and rollout["s3_bucket"] == "rl-results"
    assert rollout["input_id"] == input_id(ROW)
    # The toolkit writes to {exp_id}/{input_id}/{session id}.json; we say so too.
    assert where == ResultLocation("rl-results", f"{EXP}/{input_id(ROW)}/{SID}.json")
    assert rollout["result_key"] == where.key
    assert rollout["base_url"] == "http://gw/v1" and payload["prompt"] == "2+2"  # kept
    assert "_rollout" not in REQUEST.payload["_rollout"]  # the request is not mutated


def test_input_id_names_the_row_not_the_episode() -> None:
    same_row_other_episode = {**ROW, "_rollout": {"session_id": "other", "api_key": "x"}}
    assert (
        input_id(ROW) == input_id(same_row_other_episode) == input_id(dict(reversed(ROW.items())))
    )
    assert input_id(ROW) != input_id({**ROW, "answer": "5"})
    assert input_id(ROW).startswith("row-") and len(input_id(ROW)) == 20


@pytest.mark.parametrize(
    ("answer", "inline", "key"),
    [
        (processing("elsewhere/k.json"), None, "elsewhere/k.json"),  # the reply's key wins
        ({"status": "processing"}, None, KEY),
        ({"rewards": 1.0}, {"rewards": 1.0}, KEY),  # answered synchronously
        ({"status_code": 500, "stop_reason": "x"}, {"status_code": 500, "stop_reason": "x"}, KEY),
        ("data: not json\n\n", None, KEY),
        ([1, 2], None, KEY),
    ],
)
def test_reading_the_invoke_reply(answer: Any, inline: Any, key: str) -> None:
    raw = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
    got_inline, where = read_reply(raw, ResultLocation("rl-results", KEY))
    assert got_inline == inline and where == ResultLocation("rl-results", key)


@pytest.mark.looptime
async def test_invoke_then_result_from_s3_then_stop(aws: tuple[Any, Any]) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    sent = Capture()
    with Stubber(agentcore) as stub:
        expect_invoke(stub, processing(), payload=sent)
        expect_stop(stub)

        async def agent_writes_result_later() -> None:
            await asyncio.sleep(3)  # fake time: a few polls find nothing first
            doc = {"rewards": [0.0, 0.75], "status_code": 200, "stop_reason": "end_turn"}
            s3.put_object(Bucket=SPEC.s3_bucket, Key=KEY, Body=json.dumps(doc).encode())

        writer = asyncio.create_task(agent_writes_result_later())
        result = await be.run(REQUEST)
        await writer
        stub.assert_no_pending_responses()
    assert result.reward == 0.75 and result.via == "s3"  # the last of the per-step rewards
    assert json.loads(sent.seen[0])["_rollout"]["exp_id"] == EXP
    await be.aclose()


@pytest.mark.looptime
async def test_failures_reported_in_the_result_say_where_it_is(aws: tuple[Any, Any]) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    saved = {"status_code": 500, "stop_reason": "boom", "traceback": "T\nValueError: boom\n"}
    s3.put_object(Bucket=SPEC.s3_bucket, Key=KEY, Body=json.dumps(saved).encode())
    with Stubber(agentcore) as stub:
        expect_invoke(stub, processing())
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
    assert err.value.reason == "agent_error" and err.value.document == saved
    assert "ValueError: boom" in str(err.value) and f"s3://rl-results/{KEY}" in str(err.value)

    s3.put_object(Bucket=SPEC.s3_bucket, Key=KEY, Body=b"not json")
    with Stubber(agentcore) as stub:
        expect_invoke(stub, processing())
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
    assert err.value.reason == "bad_result" and "not JSON" in str(err.value)

    with Stubber(agentcore) as stub:  # an inline failure has no S3 location to name
        expect_invoke(stub, {"error": "tool crashed", "status_code": 500})
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
    assert err.value.reason == "agent_error" and "s3://" not in str(err.value)


@pytest.mark.looptime
async def test_a_session_token_across_the_cut_of_a_failure_report_leaves_no_prefix(
    aws: tuple[Any, Any],
) -> None:
    """The agent's report is cut to 300 characters; the episode's gateway token (its
    `_rollout.api_key`, which a report quoting the payload carries) is taken out first, so
    a token the cut runs through leaves none of itself, inline or from S3."""
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    token = "gateway-session-token-" + "k" * 24
    request = AgentRequest(SID, {**ROW, "_rollout": {"base_url": "http://gw/v1", "api_key": token}})
    saved = {"status_code": 500, "stop_reason": "x" * 292 + token}
    s3.put_object(Bucket=SPEC.s3_bucket, Key=KEY, Body=json.dumps(saved).encode())
    for reply in (saved, processing()):
        with Stubber(agentcore) as stub:
            expect_invoke(stub, reply)
            expect_stop(stub)
            with pytest.raises(AgentError) as err:
                await be.run(request)
        assert err.value.reason == "agent_error" and "x" * 292 in str(err.value)
        assert token[:8] not in str(err.value)


@pytest.mark.looptime
async def test_an_unreadable_result_is_result_unreadable_with_a_hint(
    aws: tuple[Any, Any],
) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    with Stubber(agentcore) as stub, Stubber(s3) as s3_stub:
        expect_invoke(stub, processing())
        s3_stub.add_client_error("get_object", "AccessDenied", "Forbidden", http_status_code=403)
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
    assert err.value.reason == "result_unreadable" and "s3:ListBucket" in str(err.value)


@pytest.mark.looptime
async def test_invoke_failure_is_an_agent_error_and_still_stops(aws: tuple[Any, Any]) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    with Stubber(agentcore) as stub:
        stub.add_client_error(
            "invoke_agent_runtime", "AccessDeniedException", "not allowed", http_status_code=403
        )
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
        stub.assert_no_pending_responses()
    assert err.value.reason == "agent_error" and "AccessDenied" in str(err.value)


@pytest.mark.looptime
async def test_cancelled_while_polling_stops_the_runtime_session(aws: tuple[Any, Any]) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    with Stubber(agentcore) as stub:
        expect_invoke(stub, processing())
        expect_stop(stub)
        task = asyncio.create_task(be.run(REQUEST))
        await asyncio.sleep(120)  # fake time: many empty polls, backoff capped at 30 s
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stub.assert_no_pending_responses()  # stop_runtime_session was called


# (code, HTTP status) of the refusals of an invoke that never ran.
REFUSALS = [("ThrottlingException", 429), ("RetryableConflictException", 409)]


@pytest.mark.looptime
@pytest.mark.parametrize(("code", "status"), REFUSALS)
async def test_a_refused_invoke_is_tried_again_since_it_never_ran(
    aws: tuple[Any, Any], code: str, status: int
) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    with stamina.set_testing(True, attempts=INVOKE_ATTEMPTS), Stubber(agentcore) as stub:
        stub.add_client_error("invoke_agent_runtime", code, "not now", http_status_code=status)
        expect_invoke(stub, {"rewards": 0.5})
        expect_stop(stub)
        assert (await be.run(REQUEST)).reward == 0.5
        stub.assert_no_pending_responses()


@pytest.mark.looptime
@pytest.mark.parametrize(("code", "status"), REFUSALS)
async def test_refused_every_time_is_throttled_after_the_attempts(
    aws: tuple[Any, Any], code: str, status: int
) -> None:
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    with stamina.set_testing(True, attempts=INVOKE_ATTEMPTS), Stubber(agentcore) as stub:
        for _ in range(INVOKE_ATTEMPTS):
            stub.add_client_error("invoke_agent_runtime", code, "not now", http_status_code=status)
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
        stub.assert_no_pending_responses()  # exactly INVOKE_ATTEMPTS invokes, then the stop
    assert err.value.reason == THROTTLED
    assert f"refused {INVOKE_ATTEMPTS} times" in str(err.value) and code in str(err.value)


@pytest.mark.looptime
async def test_an_invoke_over_the_accounts_quota_is_throttled_not_an_agent_crash(
    aws: tuple[Any, Any],
) -> None:
    """botocore's model declares ServiceQuotaExceededException (402) for InvokeAgentRuntime:
    the service refused the episode before any agent ran, so it is counted as throttled (the
    capacity category), with the knob to turn; it is not retried (a quota outlasts seconds)."""
    model = botocore.session.get_session().get_service_model("bedrock-agentcore")
    errors = {e.name: e for e in model.operation_model("InvokeAgentRuntime").error_shapes}
    assert errors[OVER_QUOTA].metadata["error"]["httpStatusCode"] == 402
    agentcore, s3 = aws
    be = backend(agentcore, s3)
    with stamina.set_testing(True, attempts=INVOKE_ATTEMPTS), Stubber(agentcore) as stub:
        stub.add_client_error("invoke_agent_runtime", OVER_QUOTA, "quota", http_status_code=402)
        expect_stop(stub)
        with pytest.raises(AgentError) as err:
            await be.run(REQUEST)
        stub.assert_no_pending_responses()  # one invoke, then the stop
    assert err.value.reason == THROTTLED
    assert "spec.agent.maxConcurrent" in str(err.value) and OVER_QUOTA in str(err.value)


def test_the_refusals_retried_are_the_ones_botocores_model_says_never_ran() -> None:
    """botocore's model of InvokeAgentRuntime is the judge: its errors marked `retryable`
    (a 409 conflict) and its throttling error are retried, and nothing else it declares."""
    model = botocore.session.get_session().get_service_model("bedrock-agentcore")
    errors = {e.name: e for e in model.operation_model("InvokeAgentRuntime").error_shapes}
    retryable = {n for n, e in errors.items() if "retryable" in e.metadata}
    throttling = {
        n for n, e in errors.items() if e.metadata.get("error", {}).get("httpStatusCode") == 429
    }
    assert retryable == {"RetryableConflictException"}
    assert errors["RetryableConflictException"].metadata["error"]["httpStatusCode"] == 409
    assert throttling == {"ThrottlingException"}
    assert (retryable | throttling) == NEVER_RAN


def test_only_an_invoke_that_cannot_have_run_is_tried_again() -> None:
    def client_error(code: str) -> botocore.exceptions.ClientError:
        return botocore.exceptions.ClientError(
            {"Error": {"Code": code, "Message": "m"}}, "InvokeAgentRuntime"
        )

    never_ran = [
        client_error("ThrottlingException"),
        client_error("RetryableConflictException"),
        botocore.exceptions.EndpointConnectionError(endpoint_url="https://x"),
        botocore.exceptions.ConnectTimeoutError(endpoint_url="https://x"),
    ]
    may_have_run = [
        client_error("RuntimeClientError"),
        client_error("InternalServerException"),
        botocore.exceptions.ReadTimeoutError(endpoint_url="https://x"),
        botocore.exceptions.ConnectionClosedError(endpoint_url="https://x"),
        ValueError("x"),
    ]
    assert all(_cannot_have_run(e) for e in never_ran)
    assert not any(_cannot_have_run(e) for e in may_have_run)


def test_invoke_is_never_retried_by_botocore_but_stop_and_s3_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    spec = AgentCoreAgent(
        runtimeArn=ARN, region="us-east-1", s3Bucket="rl-results", timeoutSeconds=600
    )
    clients = make_clients(spec, pool_size=3)
    invoke = clients.invoke.meta.config
    assert invoke.retries == {"mode": "standard", "total_max_attempts": 1}
    assert invoke.read_timeout == 600  # an agent may answer within the episode
    for other in (clients.control, clients.s3):
        assert other.meta.config.retries["mode"] == "adaptive"
        assert other.meta.config.max_pool_connections == 3


class SlowAgentCore:
    """AgentCore's data plane on 127.0.0.1: invoke never answers; stop does."""

    def __init__(self) -> None:
        self.invokes = 0
        self.stops = 0
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        if request.path.endswith("/invocations"):
            self.invokes += 1
            await self.release.wait()
        else:
            self.stops += 1
        return web.json_response({})


async def test_a_read_timeout_on_invoke_is_one_attempt_and_the_episodes_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore would retry a read timeout, running the same episode again into the same
    gateway session; the invoke client makes exactly one attempt. Real sockets and a real
    1 s read timeout (the spec's minimum episode timeout); nothing asserts on timing."""
    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(var, value)
    agent = SlowAgentCore()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", agent.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    spec = AgentCoreAgent(
        runtimeArn=ARN, region="us-east-1", s3Bucket="rl-results", timeoutSeconds=1
    )
    be = AgentCoreBackend(
        spec,
        exp_id="p",
        pool_size=2,
        clients=make_clients(spec, pool_size=2, endpoint_url=f"http://127.0.0.1:{port}"),
        limiter=TpsLimiter(1000.0),
    )
    sessions = NoSessions()
    try:
        outcome = await run_episode(
            EpisodeInput("p", {"q": 1}, None, 0, 0),
            EpisodeSpec({"max_new_tokens": 8}, 8, 60.0, "m"),
            0,
            sessions,
            be,
        )
    finally:
        agent.release.set()
        await be.aclose()
        await runner.cleanup()
    assert agent.invokes == 1  # not retried
    assert agent.stops == 1  # the runtime session is still stopped
    assert outcome.failure == "agent_error"
    assert "ReadTimeoutError" in outcome.message and "not retried" in outcome.message
    assert sessions.closed == [outcome.session_id]


class NoSessions:
    """The gateway side of an episode, reduced to what `run_episode` needs here."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    async def create_session(self, session_id: str, sampling_params: Any) -> SessionHandle:
        return SessionHandle(session_id, f"http://gw.test/sessions/{session_id}/v1", "tok")

    async def get_turns(self, session_id: str) -> list[Any]:
        return []

    async def context_full(self, session_id: str) -> ContextFullCalls:
        return ContextFullCalls()

    async def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        return QuiesceReport(idle=True, in_flight=0, engine_requests=0, workers=0)
