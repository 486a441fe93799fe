"""The HTTP agent backend against a real agent server on 127.0.0.1 (aiohttp both ways).

The agent accepts the episode, then either calls back with its result, or never calls
back and answers the status poll, or refuses. Nothing here waits on the wall clock for
correctness: whichever of callback and poll comes first, the answer is the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentrl.api.models import HttpAgent
from agentrl.bundle.agents.base import AgentError, AgentRequest
from agentrl.bundle.agents.http import CallbackListener, HttpAgentBackend, headers_from_env

SECRET = "sk-live-very-secret-value"


@dataclass
class Agent:
    mode: str = "callback"  # callback | poll | refuse
    submitted: list[dict[str, Any]] = field(default_factory=list)
    api_keys: list[str | None] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    async def submit(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.submitted.append(body)
        self.api_keys.append(request.headers.get("X-Api-Key"))
        if self.mode == "refuse":
            return web.json_response({"error": "bad payload"}, status=400)
        if self.mode == "callback":
            task = asyncio.create_task(self.call_back(body["_rollout"]))
            self.tasks.add(task)
        return web.json_response({"status": "accepted"}, status=202)

    async def call_back(self, info: dict[str, Any]) -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                info["callback_url"],
                json={"rewards": [0.0, 0.5]},
                headers={"Authorization": f"Bearer {info['callback_token']}"},
            ) as resp,
        ):
            assert resp.status == 200

    async def status(self, request: web.Request) -> web.Response:
        if self.mode == "poll":
            return web.json_response({"rewards": 0.25})
        return web.json_response({"status": "running"}, status=202)

    async def delete(self, request: web.Request) -> web.Response:
        self.deleted.append(request.match_info["sid"])
        return web.json_response({})


@dataclass
class Rig:
    agent: Agent
    backend: HttpAgentBackend
    listener: CallbackListener


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    agent = Agent()
    app = web.Application()
    app.router.add_post("/episodes", agent.submit)
    app.router.add_get("/episodes/{sid}", agent.status)
    app.router.add_delete("/episodes/{sid}", agent.delete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    listener = CallbackListener("127.0.0.1", 0, "127.0.0.1")
    await listener.start()
    spec = HttpAgent(url=f"http://127.0.0.1:{port}/episodes", pollIntervalSeconds=0.05)
    backend = HttpAgentBackend(spec, headers={"X-Api-Key": SECRET}, listener=listener, pool_size=4)
    try:
        yield Rig(agent, backend, listener)
    finally:
        await backend.aclose()
        await listener.stop()
        await runner.cleanup()


REQUEST = AgentRequest("sid-" + "x" * 40, {"task": 7, "_rollout": {"base_url": "http://gw/v1"}})


async def test_result_by_callback(rig: Rig) -> None:
    result = await rig.backend.run(REQUEST)
    assert result.reward == 0.5
    (body,) = rig.agent.submitted
    assert body["task"] == 7 and body["_rollout"]["base_url"] == "http://gw/v1"
    assert body["_rollout"]["callback_url"].endswith(f"/agentrl/callback/{REQUEST.session_id}")
    assert rig.agent.api_keys == [SECRET]
    assert rig.agent.deleted == []  # finished normally: nothing to stop


async def test_result_by_fallback_poll_when_no_callback_comes(rig: Rig) -> None:
    rig.agent.mode = "poll"
    assert (await rig.backend.run(REQUEST)).reward == 0.25


async def test_refused_episode_is_an_agent_error_without_secrets(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.agent.mode = "refuse"
    with caplog.at_level(logging.DEBUG), pytest.raises(AgentError) as err:
        await rig.backend.run(REQUEST)
    assert err.value.reason == "agent_error" and "HTTP 400" in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in caplog.text
    assert rig.agent.deleted == [REQUEST.session_id]


async def test_timeout_stops_the_agent_and_late_callbacks_are_refused(rig: Rig) -> None:
    rig.agent.mode = "hang"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await rig.backend.run(REQUEST)
    assert rig.agent.deleted == [REQUEST.session_id]
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{rig.listener.port}/agentrl/callback/{REQUEST.session_id}"
        async with http.post(url, json={"rewards": 1}) as resp:
            assert resp.status == 404


async def test_callback_needs_the_episode_token(rig: Rig) -> None:
    url, _token, fut = rig.listener.expect("abc")
    bad = {"Authorization": "Bearer no"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, json={"rewards": 1}, headers=bad) as resp,
    ):
        assert resp.status == 401
    assert not fut.done()
    rig.listener.forget("abc")


def test_header_values_come_from_env_and_missing_ones_are_named() -> None:
    envs = {"X-Api-Key": "AGENTRL_HTTP_HEADER_0"}
    assert headers_from_env(envs, {"AGENTRL_HTTP_HEADER_0": SECRET}) == {"X-Api-Key": SECRET}
    with pytest.raises(ValueError, match=r"X-Api-Key.*AGENTRL_HTTP_HEADER_0"):
        headers_from_env(envs, {})
