"""The AgentCore data-plane stand-in and agentrl's fallback model, checked against botocore.

botocore ships the service model of `bedrock-agentcore` (API 2024-02-28); the stand-in
(tests/support/agentcore_dataplane.py) and agentrl's built-in model of the two calls
(`agentcore_model.SERVICE_MODEL`, used only with a botocore that predates the service) are
both written by hand. Here botocore's model is the judge: paths, methods, header names,
length limits, error codes and their HTTP statuses, and botocore's own serialiser and
parser talking to the stand-in over a socket.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import boto3
import botocore.awsrequest
import botocore.config
import botocore.exceptions
import botocore.parsers
import botocore.session
import pytest
from tests.support import agentcore_dataplane as plane
from tests.support.agentcore_dataplane import AgentCoreDataPlane

from agentrl.bundle.agents.agentcore_model import SERVICE, SERVICE_MODEL

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/math_agent-AbCdEf1234"
SID = "s" * 40


@pytest.fixture(scope="module")
def model() -> Any:
    return botocore.session.get_session().get_service_model(SERVICE)


def test_the_stand_in_serves_the_models_routes_and_headers(model: Any) -> None:
    for name, (method, uri) in plane.ROUTES.items():
        http = model.operation_model(name).http
        assert (http["method"], http["requestUri"]) == (method, uri), name
        op = model.operation_model(name)
        session_in = op.input_shape.members["runtimeSessionId"]
        assert session_in.serialization == {"location": "header", "name": plane.SESSION_HEADER}
        low, high = plane.SESSION_ID_LENGTH
        assert (session_in.metadata["min"], session_in.metadata["max"]) == (low, high)
        session_out = op.output_shape.members["runtimeSessionId"]
        assert session_out.serialization["name"] == plane.SESSION_HEADER
    invoke = model.operation_model("InvokeAgentRuntime")
    assert invoke.output_shape.serialization["payload"] == "response"
    assert invoke.output_shape.members["response"].serialization.get("streaming") is True
    token = model.operation_model("StopRuntimeSession").input_shape.members["clientToken"]
    assert token.metadata.get("idempotencyToken") is True  # botocore fills it in
    assert (token.metadata["min"], token.metadata["max"]) == plane.CLIENT_TOKEN_LENGTH
    assert model.metadata["signingName"] == plane.SIGNING_NAME


def test_every_error_the_stand_in_answers_is_in_the_model_with_its_status(model: Any) -> None:
    invoke_errors = {s.name: s for s in model.operation_model("InvokeAgentRuntime").error_shapes}
    stop_errors = {s.name for s in model.operation_model("StopRuntimeSession").error_shapes}
    for code, status in plane.ERRORS.items():
        assert code in invoke_errors, code
        assert invoke_errors[code].metadata["error"]["httpStatusCode"] == status, code
    # What a stop can meet at the stand-in.
    assert {"ValidationException", "AccessDeniedException", "ResourceNotFoundException"} <= (
        stop_errors
    )
    reasons = model.shape_for("ValidationException").members["reason"].enum
    assert "FieldValidationFailed" in reasons


@pytest.mark.parametrize("code", sorted(plane.ERRORS))
def test_botocore_parses_the_stand_in_error_bodies(model: Any, code: str) -> None:
    extra = {"reason": "FieldValidationFailed"} if code == "ValidationException" else {}
    response = AgentCoreDataPlane.error(code, "what went wrong", **extra)
    assert response.body is not None
    wire = {
        "status_code": response.status,
        # botocore hands its parsers case-insensitive headers, as HTTP has them.
        "headers": botocore.awsrequest.HeadersDict(dict(response.headers)),
        "body": bytes(response.body),
    }
    parser = botocore.parsers.create_parser("rest-json")
    parsed = parser.parse(wire, model.operation_model("InvokeAgentRuntime").output_shape)
    assert parsed["Error"]["Code"] == code and parsed["Error"]["Message"] == "what went wrong"
    assert parsed["ResponseMetadata"]["HTTPStatusCode"] == plane.ERRORS[code]
    # The error's modelled members, as the client adds them to the exception.
    modelled = parser.parse(wire, model.shape_for(code))
    assert modelled["message"] == "what went wrong"
    assert all(modelled[k] == v for k, v in extra.items())


@pytest.fixture
async def standin(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AgentCoreDataPlane]:
    for var, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(var, value)
    # No app behind it: these requests are answered (or refused) by the data plane itself.
    dp = AgentCoreDataPlane(ARN, "us-east-1", "http://127.0.0.1:9")
    await dp.start()
    try:
        yield dp
    finally:
        await dp.stop()


def client(url: str, region: str = "us-east-1") -> Any:
    config = botocore.config.Config(retries={"total_max_attempts": 1})
    return boto3.client(SERVICE, region_name=region, endpoint_url=url, config=config)


async def call(fn: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, **kwargs)  # boto3 blocks; the stand-in is on this loop


async def test_botocore_requests_are_routed_and_refusals_parse(
    standin: AgentCoreDataPlane,
) -> None:
    agentcore = client(standin.url)
    standin.throttle_next = 1
    with pytest.raises(botocore.exceptions.ClientError) as err:
        await call(
            agentcore.invoke_agent_runtime, agentRuntimeArn=ARN, runtimeSessionId=SID, payload=b"{}"
        )
    assert err.value.response["Error"]["Code"] == "ThrottlingException"
    (seen,) = standin.invocations  # the ARN decoded from its path segment, the header read
    assert (seen.session_id, seen.payload, seen.app_status) == (SID, b"{}", None)

    with pytest.raises(botocore.exceptions.ClientError) as err:
        await call(
            agentcore.invoke_agent_runtime,
            agentRuntimeArn=ARN + "x",
            runtimeSessionId=SID,
            payload=b"{}",
        )
    assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"

    elsewhere = client(standin.url, region="eu-west-1")  # signed for another region
    with pytest.raises(botocore.exceptions.ClientError) as err:
        await call(elsewhere.stop_runtime_session, agentRuntimeArn=ARN, runtimeSessionId=SID)
    assert err.value.response["Error"]["Code"] == "AccessDeniedException"

    # A stop for a session that never ran: 404, and the stand-in saw it (with botocore's
    # clientToken, which it checks against the model's limits).
    with pytest.raises(botocore.exceptions.ClientError) as err:
        await call(agentcore.stop_runtime_session, agentRuntimeArn=ARN, runtimeSessionId=SID)
    assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert standin.stopped == [SID]


async def test_a_short_session_id_is_a_validation_error_as_the_model_says(
    standin: AgentCoreDataPlane,
) -> None:
    """botocore refuses it before sending; the stand-in refuses it on the wire too."""
    agentcore = client(standin.url)
    with pytest.raises(botocore.exceptions.ParamValidationError):
        await call(agentcore.stop_runtime_session, agentRuntimeArn=ARN, runtimeSessionId="short")
    url = f"{standin.url}/runtimes/{ARN.replace(':', '%3A').replace('/', '%2F')}/invocations"
    scope = "x/20260101/us-east-1/bedrock-agentcore/aws4_request"
    headers = {
        "Authorization": f"AWS4-HMAC-SHA256 Credential={scope}",
        plane.SESSION_HEADER: "short",
    }
    async with aiohttp.ClientSession() as http, http.post(url, data=b"{}", headers=headers) as resp:
        assert resp.status == 400
        assert resp.headers[plane.ERROR_TYPE_HEADER] == "ValidationException"
        assert json.loads(await resp.read())["reason"] == "FieldValidationFailed"


def test_agentrls_fallback_model_agrees_with_botocores(model: Any) -> None:
    """What agentrl declares for old botocores must be what the service speaks."""
    ours = SERVICE_MODEL
    assert ours["metadata"]["apiVersion"] == model.api_version
    assert ours["metadata"]["signingName"] == model.metadata["signingName"]
    assert ours["metadata"]["endpointPrefix"] == model.endpoint_prefix
    assert ours["metadata"]["protocol"] == model.metadata["protocol"]
    for name, op in ours["operations"].items():
        real = model.operation_model(name)
        assert op["http"] == dict(real.http), name
        for io, real_shape in (("input", real.input_shape), ("output", real.output_shape)):
            shape = ours["shapes"][op[io]["shape"]]
            assert set(shape.get("required", [])) <= set(real_shape.required_members), name
            if "payload" in shape:
                assert shape["payload"] == real_shape.serialization["payload"], name
            for member, spec in shape["members"].items():
                real_member = real_shape.members[member]  # every member exists for real
                location = {k: spec[k] for k in ("location", "locationName") if k in spec}
                real_location = {
                    k: v
                    for k, v in (
                        ("location", real_member.serialization.get("location")),
                        ("locationName", real_member.serialization.get("name")),
                    )
                    if v is not None
                }
                if location.get("location") == "statusCode":
                    real_location.pop("locationName", None)
                assert location == real_location, (name, member)
