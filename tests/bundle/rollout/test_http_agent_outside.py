"""The shipped HTTP example's own setup: an agent outside the cluster posts its results
through the gateway's public URL, and every result arrives by callback.

Everything is real but the GPU engine (the protocol-level SGLang stub): the runtime config
is rendered from examples/qwen2.5-7b-http-agent-two-evals.yaml as the operator renders it;
the hub starts the gateway from it; the rollout builds the HTTP backend, whose listener it
registers with the gateway; the agent is a process of its own (tests/support/
http_agent_process.py) that knows only the URLs in its payload. `spec.gateway.publicUrl`
points at a TCP forwarder standing in for the LoadBalancer in front of the gateway
Service's port. The agent's status poll never has a result, so an episode succeeds only
if its callback came through.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from tests.support.process import free_port
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.api.constants import CALLBACK_PATH
from agentrl.api.validation import errors, parse_experiment
from agentrl.bundle.agents import AgentRequest, AgentResult, PoolStats, build_backend
from agentrl.bundle.agents.http import HttpAgentBackend
from agentrl.bundle.gateway import GatewayClient
from agentrl.bundle.gateway.tokenizer import load_tokenizer
from agentrl.bundle.hub import Hub
from agentrl.bundle.rollout.batch import RolloutContext, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.objects import runtime_config

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "qwen2.5-7b-http-agent-two-evals.yaml"
AGENT = REPO / "tests" / "support" / "http_agent_process.py"
AGENT_KEY = "Bearer agent-api-key"  # the example's Authorization header, from its Secret


@dataclass
class LoadBalancer:
    """Forwards TCP to the gateway's port and counts the result callbacks it carried."""

    target_port: int
    callbacks: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer, count=True)),
            asyncio.create_task(self._pipe(up_reader, writer, count=False)),
        ):
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool
    ) -> None:
        marker = f"POST {CALLBACK_PATH}/".encode()
        try:
            while data := await reader.read(65536):
                if count:
                    self.callbacks += data.count(marker)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()


@dataclass
class Via:
    """The backend, noting how each result came back ("callback" or "poll")."""

    backend: HttpAgentBackend
    seen: list[str] = field(default_factory=list)

    async def run(self, request: AgentRequest) -> AgentResult:
        result = await self.backend.run(request)
        self.seen.append(result.via)
        return result

    async def stop(self, session_id: str) -> None:
        await self.backend.stop(session_id)

    def pool_stats(self) -> PoolStats:
        return self.backend.pool_stats()


@dataclass
class AgentProcess:
    proc: asyncio.subprocess.Process
    url: str

    @classmethod
    async def start(cls) -> AgentProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(AGENT), AGENT_KEY, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().split()
        assert line[:1] == ["LISTENING"], line
        return cls(proc, line[1])

    async def callbacks(self, n: int) -> list[list[str]]:
        """Its next `n` `CALLBACK <url> <status>` lines. The episode may end before the agent
        has read the answer to its callback and printed it: wait for the line itself (a
        liveness bound, not a timing assertion)."""
        assert self.proc.stdout is not None
        found: list[list[str]] = []
        while len(found) < n:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), 60)).decode()
            assert line, f"the agent exited after {len(found)} callback(s)"
            if line.startswith("CALLBACK "):
                found.append(line.split())
        return found

    async def stop(self) -> None:
        self.proc.terminate()
        await self.proc.wait()


@pytest.fixture
async def agent() -> AsyncIterator[AgentProcess]:
    process = await AgentProcess.start()
    try:
        yield process
    finally:
        if process.proc.returncode is None:
            process.proc.kill()
            await process.proc.wait()


async def test_an_agent_outside_the_cluster_calls_back_through_the_public_url(
    tmp_path: Path, agent: AgentProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    tok = load_tokenizer(str(checkpoint))
    reply = [*tok.encode("Forty-two."), tok.convert_tokens_to_ids("<|im_end|>")]
    engine = StubEngine(vocab_size=len(tok.get_vocab()), responder=lambda p, s: list(reply))
    router = StubRouter([await engine.start()])
    await router.start()
    gateway_port = free_port()
    balancer = LoadBalancer(gateway_port)
    public_url = await balancer.start()

    body = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    spec = body["spec"]
    spec["model"].update(path=str(checkpoint), rendererFamily="qwen3")
    spec["agent"]["http"]["url"] = agent.url
    spec["gateway"].update(port=gateway_port, publicUrl=public_url)
    exp, problems = parse_experiment(body)
    assert exp is not None and errors(problems) == [], problems
    config = runtime_config(exp, OperatorDefaults(image="img@sha256:" + "1" * 64))
    assert config.gateway_url == public_url
    for var in config.http_header_envs.values():  # the Secret, as the pod's env has it
        monkeypatch.setenv(var, AGENT_KEY)

    hub = Hub(config.to_json(), "127.0.0.1", 0, gateway_host="127.0.0.1")
    client: GatewayClient | None = None
    backend = None
    try:
        admin_url, token = await hub.start_gateway(router.url)
        client = GatewayClient(admin_url, token)
        backend = await build_backend(
            config, callbacks=client, listen_host="127.0.0.1", advertise_host="127.0.0.1"
        )
        assert isinstance(backend, HttpAgentBackend)
        via = Via(backend)
        ctx = RolloutContext(client, via, asyncio.Semaphore(4))
        episode = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 16}, 64, 120.0, "agentrl")
        groups = [
            [EpisodeInput("p", {"q": f"task {g}", "reward": g + i / 4}, None, g, 2 * g + i)
             for i in range(2)]
            for g in range(2)
        ]  # fmt: skip
        outcomes = await run_groups(ctx, groups, episode, "train")
    finally:
        if backend is not None:
            await backend.aclose()
        if client is not None:
            await client.aclose()
        await hub.stop()
        await balancer.stop()
        await router.stop()
        await engine.stop()
    callbacks = await agent.callbacks(4)
    await agent.stop()

    flat = [o for group in outcomes for o in group]
    assert [(o.failure, o.reward) for o in flat] == [(None, 0.0), (None, 0.25), (None, 1.0),
                                                     (None, 1.25)]  # fmt: skip
    assert via.seen == ["callback"] * 4
    assert sorted(c[1] for c in callbacks) == sorted(
        backend.callback_url(o.session_id) for o in flat
    )
    assert sorted(c[1] for c in callbacks) == sorted(
        f"{public_url}{CALLBACK_PATH}/{o.session_id}" for o in flat
    )
    assert {c[2] for c in callbacks} == {"200"}
    assert balancer.callbacks == 4  # each went through the public URL's forwarder
