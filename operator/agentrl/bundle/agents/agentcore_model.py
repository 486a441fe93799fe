"""A minimal botocore model of the two AgentCore data-plane calls the backend makes.

botocore learned `bedrock-agentcore` in 1.39.8 (July 2025). Images and environments pinned
to an older botocore (checkov, for one, pins boto3 1.35.x) would fail at client creation
with UnknownServiceError; with this model the backend still builds a real
botocore client (real serialisation, SigV4 signing, retries, connection pool) for exactly
`InvokeAgentRuntime` and `StopRuntimeSession`. It is used only when the installed botocore
does not know the service, and the backend logs once that it did so. Shapes follow the
public API reference of Amazon Bedrock AgentCore (data plane, version 2024-02-28); a test
checks them member by member against botocore's own model of the service.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any, Final

SERVICE: Final = "bedrock-agentcore"
API_VERSION: Final = "2024-02-28"
_SESSION_HEADER: Final = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"


def _string(**extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra}


SERVICE_MODEL: Final[dict[str, Any]] = {
    "version": "2.0",
    "metadata": {
        "apiVersion": API_VERSION,
        "endpointPrefix": SERVICE,
        "protocol": "rest-json",
        "protocols": ["rest-json"],
        "serviceFullName": "Amazon Bedrock AgentCore",
        "serviceId": "Bedrock AgentCore",
        "signatureVersion": "v4",
        "signingName": SERVICE,
        "uid": f"{SERVICE}-{API_VERSION}",
    },
    "operations": {
        "InvokeAgentRuntime": {
            "name": "InvokeAgentRuntime",
            "http": {
                "method": "POST",
                "requestUri": "/runtimes/{agentRuntimeArn}/invocations",
                "responseCode": 200,
            },
            "input": {"shape": "InvokeAgentRuntimeRequest"},
            "output": {"shape": "InvokeAgentRuntimeResponse"},
        },
        "StopRuntimeSession": {
            "name": "StopRuntimeSession",
            "http": {
                "method": "POST",
                "requestUri": "/runtimes/{agentRuntimeArn}/stopruntimesession",
                "responseCode": 200,
            },
            "input": {"shape": "StopRuntimeSessionRequest"},
            "output": {"shape": "StopRuntimeSessionResponse"},
            "idempotent": True,
        },
    },
    "shapes": {
        "String": _string(),
        "SessionId": _string(min=33, max=256),
        "Body": {"type": "blob", "max": 100000000, "sensitive": True},
        "ResponseBody": {"type": "blob", "streaming": True, "sensitive": True},
        "Integer": {"type": "integer"},
        "InvokeAgentRuntimeRequest": {
            "type": "structure",
            "required": ["agentRuntimeArn", "payload"],
            "members": {
                "contentType": {
                    "shape": "String",
                    "location": "header",
                    "locationName": "Content-Type",
                },
                "accept": {"shape": "String", "location": "header", "locationName": "Accept"},
                "runtimeSessionId": {
                    "shape": "SessionId",
                    "location": "header",
                    "locationName": _SESSION_HEADER,
                    "idempotencyToken": True,
                },
                "agentRuntimeArn": {
                    "shape": "String",
                    "location": "uri",
                    "locationName": "agentRuntimeArn",
                },
                "qualifier": {
                    "shape": "String",
                    "location": "querystring",
                    "locationName": "qualifier",
                },
                "payload": {"shape": "Body"},
            },
            "payload": "payload",
        },
        "InvokeAgentRuntimeResponse": {
            "type": "structure",
            "required": ["contentType"],
            "members": {
                "runtimeSessionId": {
                    "shape": "String",
                    "location": "header",
                    "locationName": _SESSION_HEADER,
                },
                "contentType": {
                    "shape": "String",
                    "location": "header",
                    "locationName": "Content-Type",
                },
                "statusCode": {"shape": "Integer", "location": "statusCode"},
                "response": {"shape": "ResponseBody"},
            },
            "payload": "response",
        },
        "StopRuntimeSessionRequest": {
            "type": "structure",
            "required": ["runtimeSessionId", "agentRuntimeArn"],
            "members": {
                "runtimeSessionId": {
                    "shape": "SessionId",
                    "location": "header",
                    "locationName": _SESSION_HEADER,
                    "idempotencyToken": True,
                },
                "agentRuntimeArn": {
                    "shape": "String",
                    "location": "uri",
                    "locationName": "agentRuntimeArn",
                },
                "qualifier": {
                    "shape": "String",
                    "location": "querystring",
                    "locationName": "qualifier",
                },
                "clientToken": {"shape": "String", "idempotencyToken": True},
            },
        },
        "StopRuntimeSessionResponse": {
            "type": "structure",
            "members": {
                "runtimeSessionId": {
                    "shape": "String",
                    "location": "header",
                    "locationName": _SESSION_HEADER,
                },
                "statusCode": {"shape": "Integer", "location": "statusCode"},
            },
        },
    },
}


@functools.cache
def model_dir() -> Path:
    """A botocore data directory holding the model (botocore loads models from files)."""
    root = Path(tempfile.mkdtemp(prefix="agentrl-botocore-"))
    target = root / SERVICE / API_VERSION
    target.mkdir(parents=True)
    (target / "service-2.json").write_text(json.dumps(SERVICE_MODEL), encoding="utf-8")
    return root
