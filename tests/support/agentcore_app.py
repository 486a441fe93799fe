"""An agentcore-rl-toolkit app in its own process, and S3 on a socket, for the AgentCore tests.

What runs for real around the data-plane stand-in (agentcore_dataplane.py): moto's S3 server
(`moto_s3`), which the app and agentrl's backend both reach through `AWS_ENDPOINT_URL_S3`,
and the toolkit app, served by bedrock-agentcore's own HTTP server in a process of its own as
in an AgentCore runtime container (`toolkit_app`). Used by the backend's tests
(tests/bundle/agents) and by `agentrl rehearse`'s (tests/bundle/rehearse).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer
from tests.support.process import free_port, stop

REGION = "us-east-1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}
START_BOUND_S = 120  # a bound on a process start, not a timing assertion (2 loaded cores)


def keys() -> dict[str, str]:
    """The test credentials as boto3 client arguments."""
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[str]:
    """moto's S3 server with `bucket` created; yields its URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url, region_name=REGION, **keys()).create_bucket(Bucket=bucket)
    try:
        yield url
    finally:
        server.stop()


@dataclass
class AgentApp:
    url: str
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@contextlib.contextmanager
def toolkit_app(app: Path, s3_url: str, log: Path) -> Iterator[AgentApp]:
    """`python <app> <port>` with the test credentials, until it answers `/ping`."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "HTTP"))}
    env.update(CREDENTIALS, AWS_ENDPOINT_URL_S3=s3_url, PYTHONUNBUFFERED="1")
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(app), str(port)], env=env, stdout=sink, stderr=sink
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_BOUND_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the agent app exited ({proc.returncode}):\n{log.read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2) as resp:
                    assert json.loads(resp.read())["status"] in ("Healthy", "HealthyBusy")
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the agent app never answered /ping:\n{log.read_text()}"
                    ) from None
                time.sleep(0.1)
        yield AgentApp(url, log)
    finally:
        stop(proc)
