"""Connection-pool churn, provoked for real: a local HTTP server behind botocore's urllib3 pool.

The server answers S3 HEAD and GET requests, but holds each one until N requests are in flight at
once (a barrier, not a sleep), so N connections are open together; with a pool of 2, the
surplus N-2 are discarded when they come back, urllib3 says "Connection pool is full",
and the counter and `agentrl_connection_pool_discarded_total` must move by exactly that.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import botocore.config
import pytest
from prometheus_client import generate_latest

from agentrl.api.models import AgentCoreAgent
from agentrl.bundle.agents.agentcore import AgentCoreBackend, AgentCoreClients, ResultLocation
from agentrl.bundle.agents.base import PoolStats
from agentrl.bundle.agents.pool import POOL_FULL_MESSAGE, install_discard_counter
from agentrl.bundle.agents.ratelimit import TpsLimiter
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout.report import Recorder, apply_delta

N = 6


class S3Head(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connections go back to the pool
    barrier: threading.Barrier | None = None
    live = 0
    max_live = 0
    lock = threading.Lock()

    def do_HEAD(self) -> None:
        self._answer(b"")

    def do_GET(self) -> None:  # the backend reads a result object with one GET
        self._answer(b'{"rewards": 1.0}')

    def _answer(self, body: bytes) -> None:
        cls = type(self)
        with cls.lock:
            cls.live += 1
            cls.max_live = max(cls.max_live, cls.live)
        if cls.barrier is not None:
            cls.barrier.wait()
        with cls.lock:
            cls.live -= 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"abc"')
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    S3Head.live = S3Head.max_live = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), S3Head)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        S3Head.barrier = None
        httpd.shutdown()
        httpd.server_close()


def s3_client(endpoint: str, pool: int) -> Any:
    config = botocore.config.Config(
        max_pool_connections=pool, retries={"mode": "adaptive"}, s3={"addressing_style": "path"}
    )
    return boto3.client("s3", region_name="us-east-1", endpoint_url=endpoint, config=config)


def test_pool_full_discards_are_counted_and_exported(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    counter = install_discard_counter()
    counter.take()
    S3Head.barrier = threading.Barrier(N, timeout=30)
    client = s3_client(server, pool=2)
    with caplog.at_level(logging.WARNING), ThreadPoolExecutor(N) as pool:
        list(pool.map(lambda i: client.head_object(Bucket="b", Key=f"k{i}"), range(N)))

    assert S3Head.max_live == N
    discarded = counter.take()
    assert discarded == N - 2
    # Logged once with a hint, then only counted.
    logged = [r for r in caplog.records if r.getMessage().startswith(POOL_FULL_MESSAGE)]
    assert len(logged) <= 1

    metrics = BundleMetrics()
    recorder = Recorder()
    recorder.pool(PoolStats(size=2, in_use=0), discarded)
    apply_delta(metrics, recorder.take())
    text = generate_latest(metrics.registry).decode()
    assert f"agentrl_connection_pool_discarded_total {float(N - 2)}" in text
    assert "agentrl_connection_pool_size 2.0" in text
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


async def test_backend_never_runs_more_boto_calls_than_its_pool(server: str) -> None:
    """The AgentCore backend's thread pool is as large as its connection pool: no churn."""
    counter = install_discard_counter()
    counter.take()
    spec = AgentCoreAgent(
        runtimeArn="arn:aws:bedrock-agentcore:us-east-1:1:runtime/a",
        region="us-east-1",
        s3Bucket="bkt",
    )
    be = AgentCoreBackend(
        spec,
        exp_id="p",
        pool_size=2,
        clients=AgentCoreClients(object(), object(), s3_client(server, pool=2)),
        limiter=TpsLimiter(100.0),
    )
    peaks: list[int] = []

    async def probe(i: int) -> bool:
        found = await be._read(ResultLocation("bkt", f"k{i}")) is not None
        peaks.append(be.pool_stats().in_use)
        return found

    assert all(await asyncio.gather(*(probe(i) for i in range(12))))
    assert S3Head.max_live <= 2 and max(peaks) <= 2
    assert counter.take() == 0
    assert be.pool_stats().size == 2 and be.pool_stats().in_use == 0
    await be.aclose()
