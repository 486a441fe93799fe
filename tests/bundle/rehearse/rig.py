"""What the rehearsal tests share: a spec, a model, an agent process, and the CLI as a user runs it.

- The engine is the SGLang protocol stub the gateway tests use (tests/support/sglang_stub.py),
  alone on its port as a user's `python -m sglang.launch_server` would be, served by the
  test's event loop; its responder plays the model (a few scripted completions).
- The tokenizer is the tiny Qwen-style checkpoint (`--model-dir`), the spec names a hub id.
- The agent is a real process: the example HTTP agent, with the mistakes of
  `mistaken_agent.py` for rows that ask for one.
- `agentrl rehearse` runs as a subprocess of the venv's console script.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from tests.support.process import free_port, stop
from tests.support.sglang_stub import StubEngine

ROOT = Path(__file__).resolve().parents[3]
AGENT = Path(__file__).with_name("mistaken_agent.py")
EXAMPLE_AGENT = ROOT / "examples" / "agents" / "http_agent.py"
Responder = Callable[[list[int], dict[str, Any]], list[int]]


def agentrl() -> str:
    exe = shutil.which("agentrl", path=str(Path(sys.executable).parent))
    assert exe is not None, "agentrl is not installed in this venv (pip install -e .)"
    return exe


def spec(
    agent: dict[str, Any],
    *,
    context_length: int | None = None,
    samples: int = 4,
    model: str = "Qwen/Qwen3-8B",
    **grpo: Any,
) -> dict[str, Any]:
    """An RLExperiment whose pod paths (data, checkpoint) do not exist here."""
    model_spec: dict[str, Any] = {
        "path": model,
        "type": "qwen3-8B",
        "refLoad": "/models/qwen3-8b",
        "toolCallParser": "qwen25",
    }
    if context_length is not None:
        model_spec["contextLength"] = context_length
    return {
        "apiVersion": "agentrl.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": "web-agent", "namespace": "rl"},
        "spec": {
            "model": model_spec,
            "data": {"train": "/data/web/train.jsonl"},
            "agent": agent,
            "grpo": {
                "numRollouts": 10,
                "rolloutBatchSize": 2,
                "samplesPerPrompt": samples,
                "maxResponseLength": 64,
                **grpo,
            },
            "resources": {"nodes": 1, "gpusPerNode": 8},
        },
    }


def http_agent(url: str, **extra: Any) -> dict[str, Any]:
    return {"http": {"url": url, "timeoutSeconds": 60, **extra}, "maxConcurrent": 8}


def write(
    directory: Path, body: dict[str, Any], rows: Sequence[dict[str, Any]]
) -> tuple[Path, Path]:
    """The spec's YAML and a local copy of its data (what `--data` reads)."""
    spec_path = directory / "experiment.yaml"
    spec_path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    data = directory / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return spec_path, data


def row(task: str = "shop-0001", **metadata: Any) -> dict[str, Any]:
    return {
        "prompt": f"task {task}",
        "metadata": {"task_id": task, "goal": "add the cheapest SSD to the cart",
                     "start_url": "https://shop.example.com", "max_steps": 12, **metadata},
    }  # fmt: skip


# ---- the model's side ------------------------------------------------------------------


class Model:
    """Scripted completions in the tiny tokenizer's ids (each ends the turn with <|im_end|>)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")
        self.tool_response = tok.convert_tokens_to_ids("<tool_response>")

    def say(self, text: str) -> list[int]:
        return [*self.tok.encode(text), self.im_end]

    def call(self, name: str, **args: str) -> list[int]:
        """A tool call in Qwen3's (Hermes) JSON format, the one the spec's family parses."""
        return self.say(
            f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"
        )

    def xml_call(self, name: str, **args: str) -> list[int]:
        """A tool call in Qwen3-Coder's XML format, which the qwen3 family does not parse."""
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return self.say(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")

    def steps(self, prompt: list[int]) -> int:
        """Tool results so far in the conversation (the agent's steps)."""
        return prompt.count(self.tool_response)

    def click_then_finish(self) -> Responder:
        return lambda prompt, _: (
            self.call("click", text="cheapest SSD")
            if self.steps(prompt) < 1
            else self.call("finish", summary="added it to the cart")
        )

    def xml_calls(self) -> Responder:
        return lambda prompt, _: self.xml_call("finish", summary="added it to the cart")

    def clicks_forever(self) -> Responder:
        return lambda prompt, _: self.call("click", text="next page of results, please")


async def start_engine(tok: Any, responder: Responder) -> StubEngine:
    engine = StubEngine(vocab_size=len(tok.get_vocab()), responder=responder, decode=tok.decode)
    await engine.start()
    return engine


# ---- the agent's side ------------------------------------------------------------------


@dataclass
class AgentProcess:
    url: str  # the episode endpoint
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def run_agent(script: Path, log: Path, *args: str) -> Iterator[AgentProcess]:
    """The agent in its own process until the generator is closed (a fixture's body). The
    example agent takes `--port N`, the test agent the port alone."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    where = ["--port", str(port)] if script == EXAMPLE_AGENT else [str(port)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(script), *where, *args],
            env=env, stdout=sink, stderr=sink, cwd=ROOT,
        )  # fmt: skip
    try:
        wait_for_port(port, proc, log)
        yield AgentProcess(f"http://127.0.0.1:{port}/v1/episodes", log)
    finally:
        stop(proc)


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120  # a bound, not a timing assertion (2 loaded cores)
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the agent exited ({proc.returncode}):\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"the agent never listened:\n{log.read_text()}") from None
            time.sleep(0.1)


# ---- the network between them ----------------------------------------------------------


class ModelApiProxy:
    """A reverse proxy in front of the gateway that routes only the model API (`/sessions/`),
    as an ingress rule written for an OpenAI endpoint would: agents reach the model through
    it, and their result callbacks (`/agentrl/callback/`) find nothing there."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.url = ""
        self.refused: list[str] = []
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        self._http = aiohttp.ClientSession()
        app = web.Application(client_max_size=1 << 26)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self.url

    async def _forward(self, request: web.Request) -> web.Response:
        if not request.path.startswith("/sessions/"):
            self.refused.append(request.path)
            return web.json_response({"error": "no route"}, status=404)
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self._http.request(
            request.method, self.target + request.path_qs, data=await request.read(),
            headers=headers,
        ) as resp:  # fmt: skip
            body = await resp.read()
            kind = resp.headers.get("Content-Type", "application/json")
            return web.Response(body=body, status=resp.status, headers={"Content-Type": kind})

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()


# ---- the CLI ---------------------------------------------------------------------------


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.out))
        except ValueError as exc:
            raise AssertionError(f"not JSON (exit {self.code}):\n{self.out}\n{self.err}") from exc

    def episodes(self) -> list[dict[str, Any]]:
        return list(self.json()["episodes"])


async def rehearse(*args: str | Path, env: dict[str, str] | None = None) -> Run:
    """`agentrl rehearse ...` as a user runs it; the test's loop keeps serving the engine."""
    proc = await asyncio.create_subprocess_exec(
        agentrl(), "rehearse", *map(str, args),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})}, cwd=ROOT,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=300)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())
