"""An HTTP agent for agentrl, small enough to read in one go: start here and make it yours.

It speaks the HTTP agent contract of docs/agents.md:
- `POST /v1/episodes` takes an episode (the data row's `metadata` plus `_rollout`) and
  answers 202 at once; the episode runs in the background;
- the episode talks to the model only through `_rollout.base_url` with `_rollout.api_key`
  (OpenAI chat completions; the gateway records every token it samples), passing
  `_rollout.sampling_params` on unchanged;
- when it is done, it posts its result document (`{"rewards": <number>}`, or `{"error": ..}`)
  to `_rollout.callback_url` with `Authorization: Bearer <callback_token>` (again when the
  gateway answers 502 or 503 with `Retry-After`); if that fails it keeps the result, and
  `GET /v1/episodes/<session id>` hands it out (agentrl's backstop);
- `DELETE /v1/episodes/<session id>` stops an episode.

The task is the web-task rows of examples/data/web-*.jsonl (`goal`, `start_url`,
`max_steps`), with a pretend browser: the model may `open`, `click` and `type`, and ends the
task with `finish`. `Browser` and `reward` are the two places to put your own environment
and your own reward; everything else is the plumbing every HTTP agent needs.

    python examples/agents/http_agent.py --port 8000 [--token SECRET]

With `--token` (or AGENT_TOKEN), episodes must come with `Authorization: Bearer SECRET`
(the header the example experiment sends from its Secret). Needs aiohttp only (the bundle
extra installs it). Rehearse it with `agentrl rehearse` (docs/rehearse.md).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import os
from typing import Any

import aiohttp
from aiohttp import web

log = logging.getLogger("http_agent")

SYSTEM = (
    "You operate a web browser to reach the user's goal. Use the tools; call finish when the "
    "goal is reached or cannot be reached."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"} for arg in args},
                "required": list(args),
            },
        },
    }
    for name, description, args in (
        ("open", "Open a URL", ("url",)),
        ("click", "Click the element with this visible text", ("text",)),
        ("type", "Type text into the focused field", ("text",)),
        ("finish", "End the task, saying whether the goal was reached", ("summary",)),
    )
]
MODEL_TIMEOUT_S = 300.0
KEEP_RESULTS_S = 3600.0  # how long an undelivered result waits for agentrl's poll
# The gateway answers a callback it could not deliver yet (no rollout listening, or the
# listener failing) with 502/503 and `Retry-After`: its way of saying "post again".
CALLBACK_ATTEMPTS = 3
MAX_RETRY_AFTER_S = 10


class Browser:
    """A pretend browser. Replace it with your environment (Playwright, a sandbox, ...)."""

    def __init__(self, start_url: str) -> None:
        self.url = start_url
        self.typed: list[str] = []

    def step(self, tool: str, args: dict[str, Any]) -> str:
        if tool == "open":
            self.url = str(args.get("url", self.url))
        elif tool == "type":
            self.typed.append(str(args.get("text", "")))
        return f"Page {self.url}: a heading, a search field, a list of results, a cart button."


def reward(row: dict[str, Any], finished: bool, browser: Browser) -> float:
    """The episode's reward, a JSON number. Replace it with your task's check."""
    return 1.0 if finished else 0.0


async def play(row: dict[str, Any], http: aiohttp.ClientSession) -> dict[str, Any]:
    """One episode: the model and the browser take turns until finish or max_steps."""
    rollout = row["_rollout"]
    browser = Browser(str(row.get("start_url", "about:blank")))
    goal = row.get("goal") or row.get("prompt") or "(no goal in this row)"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Goal: {goal}\nYou are at {browser.url}."},
    ]
    for _ in range(int(row.get("max_steps", 10))):
        message = await chat(http, rollout, messages)
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            break  # the model answered in words: the task ends unfinished
        for call in calls:
            name = call["function"]["name"]
            args = _arguments(call["function"].get("arguments"))
            if name == "finish":
                return {"rewards": reward(row, True, browser)}
            result = browser.step(name, args)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return {"rewards": reward(row, False, browser)}


async def chat(
    http: aiohttp.ClientSession, rollout: dict[str, Any], messages: list[dict[str, Any]]
) -> dict[str, Any]:
    """One model call through the episode's gateway session (its URL, its key)."""
    body = {
        "model": rollout["model_id"],
        "messages": messages,
        "tools": TOOLS,
        **rollout.get("sampling_params", {}),
    }
    headers = {"Authorization": f"Bearer {rollout['api_key']}"}
    async with http.post(f"{rollout['base_url']}/chat/completions", json=body,
                         headers=headers) as resp:  # fmt: skip
        answer = await resp.json(content_type=None)
        if resp.status != 200:
            error = answer.get("error", {}) if isinstance(answer, dict) else {}
            raise ModelError(f"model call failed: HTTP {resp.status}: {error.get('message')}")
    message: dict[str, Any] = answer["choices"][0]["message"]
    return message


class ModelError(Exception):
    pass


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Agent:
    """The HTTP side: accept, run, deliver (callback, else keep for the poll), stop."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.running: dict[str, asyncio.Task[None]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.http: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/episodes", self.submit)
        app.router.add_get("/v1/episodes/{sid}", self.status)
        app.router.add_delete("/v1/episodes/{sid}", self.stop)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _: web.Application) -> None:
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=MODEL_TIMEOUT_S))

    async def _close(self, _: web.Application) -> None:
        for task in self.running.values():
            task.cancel()
        if self.http is not None:
            await self.http.close()

    def _allowed(self, request: web.Request) -> bool:
        if not self.token:
            return True
        presented = request.headers.get("Authorization", "").encode()
        return hmac.compare_digest(presented, f"Bearer {self.token}".encode())

    async def submit(self, request: web.Request) -> web.Response:
        if not self._allowed(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        row = await request.json()
        sid = row["_rollout"]["session_id"]
        self.running[sid] = asyncio.create_task(self.run(sid, row))
        return web.json_response({"status": "accepted"}, status=202)

    async def run(self, sid: str, row: dict[str, Any]) -> None:
        assert self.http is not None
        try:
            result = await play(row, self.http)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the agent failed: say so, never send a made-up reward
            log.warning("episode %s failed: %s", sid, exc)
            result = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            self.running.pop(sid, None)
        self.results[sid] = result  # kept until delivered, for agentrl's status poll
        if await self.call_back(row["_rollout"], result):
            self.results.pop(sid, None)
        else:
            asyncio.get_running_loop().call_later(KEEP_RESULTS_S, self.results.pop, sid, None)

    async def call_back(self, rollout: dict[str, Any], result: dict[str, Any]) -> bool:
        """Post the result; again after a 502 or 503 with `Retry-After` (at most
        CALLBACK_ATTEMPTS posts). False: it waits for agentrl's status poll."""
        assert self.http is not None
        url = rollout["callback_url"]
        headers = {"Authorization": f"Bearer {rollout['callback_token']}"}
        for attempt in range(1, CALLBACK_ATTEMPTS + 1):
            try:
                async with self.http.post(url, json=result, headers=headers) as resp:
                    if 200 <= resp.status < 300:  # the listener took it (docs/agents.md)
                        return True
                    wait = resp.headers.get("Retry-After", "")
                    again = resp.status in (502, 503) and wait.isdigit()
                    if not again or attempt == CALLBACK_ATTEMPTS:
                        log.warning("callback to %s answered HTTP %d; the result waits for "
                                    "agentrl's poll", url, resp.status)  # fmt: skip
                        return False
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("callback to %s failed (%s); the result waits for agentrl's poll",
                            url, exc)  # fmt: skip
                return False
            await asyncio.sleep(min(int(wait), MAX_RETRY_AFTER_S))
        return False

    async def status(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        if sid in self.results:
            return web.json_response(self.results.pop(sid))
        return web.json_response({"status": "running"}, status=202)

    async def stop(self, request: web.Request) -> web.Response:
        task = self.running.pop(request.match_info["sid"], None)
        if task is not None:
            task.cancel()
        return web.json_response({"stopped": task is not None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--token", default=os.environ.get("AGENT_TOKEN"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    web.run_app(Agent(args.token).app(), host=args.host, port=args.port, access_log=None)


if __name__ == "__main__":
    main()
