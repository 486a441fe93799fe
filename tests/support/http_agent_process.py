"""An HTTP agent in a process of its own: what a user runs outside the cluster (test support).

`python http_agent_process.py [AUTHORIZATION]` serves agentrl's HTTP agent contract
(docs/agents.md) on 127.0.0.1, on a port the OS picks, and prints `LISTENING <episodes
url>` first; with AUTHORIZATION, a submit without that `Authorization` header gets 401. Each
episode chats once with the model through `_rollout.base_url` with `_rollout.api_key`, then
posts `{"rewards": [<the row's "reward">]}` to `_rollout.callback_url` with the callback
token, on a connection of its own, and prints `CALLBACK <url> <status>`. The status poll
(`GET <url>/<session id>`) always answers 202, still running, so a result can only come
back by the callback. The agent knows only the URLs in the payload.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
from aiohttp import web


class Agent:
    def __init__(self, authorization: str | None) -> None:
        self.authorization = authorization
        self.tasks: set[asyncio.Task[None]] = set()

    async def submit(self, request: web.Request) -> web.Response:
        if self.authorization and request.headers.get("Authorization") != self.authorization:
            return web.json_response({"error": "unauthorized"}, status=401)
        body = await request.json()
        task = asyncio.create_task(self.play(body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response({"status": "accepted"}, status=202)

    async def play(self, body: dict[str, Any]) -> None:
        info = body["_rollout"]
        chat = {
            "model": info["model_id"],
            "messages": [{"role": "user", "content": body["q"]}],
            "max_tokens": 16,
        }
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{info['base_url']}/chat/completions",
                json=chat,
                headers={"Authorization": f"Bearer {info['api_key']}"},
            ) as resp,
        ):
            resp.raise_for_status()
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                info["callback_url"],
                json={"rewards": [body["reward"]]},
                headers={"Authorization": f"Bearer {info['callback_token']}"},
            ) as resp,
        ):
            print(f"CALLBACK {info['callback_url']} {resp.status}", flush=True)

    async def status(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "running"}, status=202)

    async def stop(self, _request: web.Request) -> web.Response:
        return web.json_response({})


async def main() -> None:
    agent = Agent(sys.argv[1] if len(sys.argv) > 1 else None)
    app = web.Application()
    app.router.add_post("/episodes", agent.submit)
    app.router.add_get("/episodes/{sid}", agent.status)
    app.router.add_delete("/episodes/{sid}", agent.stop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"LISTENING http://127.0.0.1:{port}/episodes", flush=True)
    await asyncio.Event().wait()  # until the test terminates the process


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
