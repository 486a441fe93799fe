"""The shipped HTTP agent example posts its result again when the gateway says so (a 502 or
503 with `Retry-After`: no rollout listening yet, or its listener failing), and only then:
any other refusal leaves the result for agentrl's status poll at once."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from conftest import EXAMPLES_DIR


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "http_agent", EXAMPLES_DIR / "agents" / "http_agent.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Gateway:
    """Answers each callback with the next of `answers` (status, Retry-After or None)."""

    def __init__(self, *answers: tuple[int, str | None]) -> None:
        self.answers = list(answers)
        self.posts: list[tuple[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.posts.append((request.headers["Authorization"], await request.json()))
        status, retry = self.answers.pop(0)
        return web.json_response(
            {}, status=status, headers={"Retry-After": retry} if retry else None
        )


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call_back(gateway: Gateway, http: aiohttp.ClientSession) -> bool:
    app = web.Application()
    app.router.add_post("/agentrl/callback/{sid}", gateway.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    agent = load_example().Agent(token=None)
    agent.http = http
    rollout = {
        "callback_url": f"http://127.0.0.1:{port}/agentrl/callback/s1",
        "callback_token": "t",
    }
    try:
        return bool(await agent.call_back(rollout, {"rewards": 1.0}))
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("answers", "delivered", "posts"),
    [
        ([(503, "0"), (200, None)], True, 2),  # no rollout listening yet, then delivered
        ([(202, None)], True, 1),  # any 2xx is the listener taking it: not posted again
        ([(204, None)], True, 1),
        ([(502, "0"), (502, "0"), (200, None)], True, 3),  # the listener failed twice
        ([(503, "0")] * 3, False, 3),  # at most three posts, then the poll's turn
        ([(401, None)], False, 1),  # the listener's word on this result: not posted again
        ([(503, None)], False, 1),  # no Retry-After: not the gateway's "post again"
    ],
)
async def test_the_example_posts_again_when_the_gateway_says_so(
    http: aiohttp.ClientSession, answers: list[tuple[int, str | None]], delivered: bool, posts: int
) -> None:
    gateway = Gateway(*answers)
    assert await call_back(gateway, http) is delivered
    assert gateway.posts == [("Bearer t", {"rewards": 1.0})] * posts
