"""The pod's own path, on a local CPU Ray: nothing installed by hand, only the runtime config.

`generate_rollout` loads `AGENTRL_CONFIG`, finds the hub actor, has it start the real
gateway against slime's router (here the protocol-level SGLang stub), builds the HTTP
agent backend with its callback listener, and runs episodes whose agent (a real HTTP
server) calls the gateway's chat endpoint and posts its result back. Only the GPU engine
is a stub. The hub is created first with loopback addresses (tests bind 127.0.0.1 only);
the rollout then finds it by name, exactly as in the pod.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
import ray
from aiohttp import web
from tests.support.metrics import scrape
from tests.support.process import free_port
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.api.constants import HEAD_RAY_RESOURCE
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.gateway.tokenizer import load_tokenizer
from agentrl.bundle.hub import ensure_hub
from agentrl.bundle.rollout import generate_rollout, install_runtime, shutdown_runtime

from .doubles import runtime_config
from .test_generate_rollout_ray import DataSource


class Loop:
    """An event loop on a thread for the servers the test plays (agent, SGLang stub)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class ChatAgentServer:
    """An HTTP agent: accepts an episode, chats twice through the gateway, calls back."""

    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/episodes", self.submit)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/episodes"
        return self.url

    async def submit(self, request: web.Request) -> web.Response:
        body = await request.json()
        task = asyncio.create_task(self.play(body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response({"status": "accepted"}, status=202)

    async def play(self, body: dict[str, Any]) -> None:
        info = body["_rollout"]
        auth = {"Authorization": f"Bearer {info['api_key']}"}
        messages: list[dict[str, Any]] = [{"role": "user", "content": body["q"]}]
        async with aiohttp.ClientSession() as http:
            for _ in range(2):
                req = {"model": info["model_id"], "messages": messages, "max_tokens": 16}
                async with http.post(
                    f"{info['base_url']}/chat/completions", json=req, headers=auth
                ) as resp:
                    reply = (await resp.json())["choices"][0]["message"]
                messages += [reply, {"role": "user", "content": "go on"}]
            callback = {"Authorization": f"Bearer {info['callback_token']}"}
            async with http.post(
                info["callback_url"], json={"rewards": [0.0, body["reward"]]}, headers=callback
            ) as resp:
                assert resp.status == 200

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimpleNamespace, Any]]:
    tmp = tmp_path_factory.mktemp("pod")
    checkpoint = write_checkpoint(Path(tmp) / "ckpt")
    tok = load_tokenizer(str(checkpoint))
    reply = [*tok.encode("Forty-two."), tok.convert_tokens_to_ids("<|im_end|>")]
    servers = Loop()
    engine = StubEngine(vocab_size=len(tok.get_vocab()), responder=lambda p, s: list(reply))
    router = StubRouter([servers.run(engine.start())])
    servers.run(router.start())
    agent = ChatAgentServer()
    agent_url = servers.run(agent.start())

    port = free_port()
    body = runtime_config(max_concurrent=2).model_dump(by_alias=True, mode="json")
    body["gatewayUrl"] = f"http://127.0.0.1:{port}"
    body["spec"]["model"]["path"] = str(checkpoint)
    body["spec"]["gateway"] = {"port": port, "cumulativeTokenMode": True}
    body["spec"]["agent"]["http"] = {"url": agent_url, "timeoutSeconds": 60}
    config = RuntimeConfig.model_validate(body)
    config_path = Path(tmp) / "config.json"
    config_path.write_text(config.to_json())

    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTRL_CONFIG", str(config_path))
    mp.setenv("AGENTRL_BIND_HOST", "127.0.0.1")
    ray.init(
        address="local",  # a cluster of this test's own, never one already running here
        num_cpus=2,
        resources={HEAD_RAY_RESOURCE: 1},
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    hub = ensure_hub(config, host="127.0.0.1", port=0, gateway_host="127.0.0.1")
    install_runtime(None)
    router_ip, router_port = router.url.removeprefix("http://").split(":")
    args = SimpleNamespace(
        rollout_batch_size=2,
        sglang_router_ip=router_ip,
        sglang_router_port=int(router_port),
        rollout_max_response_len=256,
    )
    try:
        yield args, hub
    finally:
        shutdown_runtime()
        ray.get(hub.stop.remote())
        ray.kill(hub)
        ray.shutdown()
        mp.undo()
        servers.run(agent.stop())
        servers.run(router.stop())
        servers.run(engine.stop())
        servers.close()


def test_generate_rollout_in_the_pods_configuration(pod: tuple[SimpleNamespace, Any]) -> None:
    args, hub = pod
    rows = [{"q": "six times seven", "reward": 1.0}, {"q": "two plus two", "reward": 0.25}]
    out = generate_rollout(args, 1, DataSource(rows, n_samples=2))

    assert [len(g) for g in out.samples] == [2, 2]
    for group, reward in zip(out.samples, (1.0, 0.25), strict=True):
        for sample in group:
            assert sample.reward == reward and sample.metadata["num_turns"] == 2
            assert sum(sample.loss_mask) > 0 and len(sample.loss_mask) == sample.response_length
    text = scrape(ray.get(hub.start_metrics.remote()))
    assert 'agentrl_episodes_total{outcome="succeeded",split="train"} 4.0' in text
    assert 'agentrl_gateway_requests_total{api="openai",code="200"} 8.0' in text
    assert "agentrl_rollout_step 1.0" in text
