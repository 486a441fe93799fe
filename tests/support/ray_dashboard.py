"""A stand-in Ray dashboard for the job endpoints the `ray job` command line uses.

Ray's head forwards a job's log tail from the dashboard agent of the driver's node and, once
that inner stream ends for any reason (the agent restarted, the head-to-worker connection
dropped), returns the client's websocket, which aiohttp closes with code 1000
(https://github.com/ray-project/ray/blob/b7f4259e944bf6959f721b106adc366ddfa0c356/python/ray/dashboard/modules/job/job_head.py,
`tail_job_logs`). This stand-in does just that while the job is still RUNNING, so the real
`ray job ...` command line and Ray's job SDK (run as subprocesses) meet what they meet on a
real cluster, including a new tail that starts over from the log's first line.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class DashboardState:
    """The job the stand-in serves, and what the clients did to it."""

    submission_id: str
    exists: bool = False
    status: str = "RUNNING"
    # The job reports `final` once this many log tails were closed under a running job.
    closes_before_end: int = 2
    final: str = "SUCCEEDED"
    tails: int = 0
    submissions: list[dict[str, Any]] = field(default_factory=list)


def _app(state: DashboardState) -> web.Application:
    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": "4", "ray_version": "2.60.0", "ray_commit": "x"})

    def details() -> dict[str, Any]:
        return {
            "type": "SUBMISSION",
            "job_id": None,
            "submission_id": state.submission_id,
            "status": state.status,
            "entrypoint": "true",
        }

    async def job(req: web.Request) -> web.Response:
        if not state.exists or req.match_info["job_id"] != state.submission_id:
            return web.Response(status=404, text="Job does not exist")
        return web.json_response(details())

    async def submit(req: web.Request) -> web.Response:
        body = await req.json()
        state.submissions.append(body)
        if state.exists:
            return web.Response(status=400, text="Job already exists")
        state.exists = True
        return web.json_response(
            {"job_id": state.submission_id, "submission_id": state.submission_id}
        )

    async def tail(req: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(req)
        state.tails += 1
        # Every tail starts at the log's first line, as the agent reads the driver's log file
        # from its start (file_tail_iterator in dashboard/modules/job/utils.py), here sent
        # as one message: the earlier tails' lines, then a new one.
        await ws.send_str("".join(f"training step {i}\n" for i in range(1, state.tails + 1)))
        if state.tails > state.closes_before_end:
            state.status = state.final
        return ws  # closed with code 1000, as the head does once the agent's stream ends

    app = web.Application()
    app.router.add_get("/api/version", version)
    app.router.add_post("/api/jobs/", submit)
    app.router.add_get("/api/jobs/{job_id}", job)
    app.router.add_get("/api/jobs/{job_id}/logs/tail", tail)
    return app


@contextmanager
def serve(state: DashboardState) -> Iterator[str]:
    """Serve the stand-in on a free local port for the block; yields its `host:port`."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(state))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
