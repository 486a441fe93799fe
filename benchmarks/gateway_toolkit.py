"""The anchor gateway of `benchmarks/gateway.py`: agentcore-rl-toolkit 0.2.0's `rollout_gateway`
(adapted from slime's `slime/agent/` at fa3c990), served the way the toolkit serves it.

`RolloutGateway` with its OpenAI and Anthropic adapters, `HfTemplateRenderer` on a Hugging
Face tokenizer (the benchmark's tokenizer with Qwen3's own chat template, which the toolkit
recognises by its hash and parses with its Qwen3 response schema), `SglangHttpBackend` on the
same stub engine as ours, and `ThreadedGatewayServer` (the toolkit's serving path: aiohttp
with handler cancellation, its access logger). Sessions are the toolkit's own
(`create_session`); a route the benchmark adds (`POST /bench/sessions`) opens them from the
client process. Agents name their session in the bearer token, as the toolkit expects.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import tempfile
from pathlib import Path

import aiohttp

MAX_NEW_TOKENS = 64


def toolkit_available() -> str | None:
    """None if the anchor can run here, else why not."""
    for module, why in (
        ("agentcore_rl_toolkit", "agentcore-rl-toolkit is not installed (the dev extra pins it)"),
        ("transformers", "transformers is not installed (the toolkit's [gateway] extra)"),
        ("jinja2", "jinja2 is not installed (the toolkit's [gateway] extra)"),
        ("jmespath", "jmespath is not installed (the toolkit's [gateway] extra)"),
    ):
        if importlib.util.find_spec(module) is None:
            return why
    return None


async def serve_toolkit(port: int, engine_url: str) -> None:
    from agentcore_rl_toolkit.rollout_gateway import HfTemplateRenderer, RolloutGateway
    from agentcore_rl_toolkit.rollout_gateway.sampling_backends.sglang_http import (
        SglangHttpBackend,
    )
    from agentcore_rl_toolkit.rollout_gateway.server import ThreadedGatewayServer
    from aiohttp import web
    from tests.support.tiny_tokenizer import QWEN3_CHAT_TEMPLATE, write_checkpoint
    from transformers import AutoTokenizer

    template = QWEN3_CHAT_TEMPLATE.read_text(encoding="utf-8")
    ckpt = write_checkpoint(Path(tempfile.mkdtemp(prefix="gw-toolkit-")), template)
    tokenizer = AutoTokenizer.from_pretrained(str(ckpt))
    gateway = RolloutGateway(
        backend=SglangHttpBackend(engine_url),
        renderer=HfTemplateRenderer(tokenizer),
        tokenizer=tokenizer,
    )

    async def open_session(request: web.Request) -> web.Response:
        body = await request.json()
        gateway.create_session(
            body["session_id"], sampling_defaults={"max_new_tokens": MAX_NEW_TOKENS}
        )
        return web.json_response({"ok": True})

    gateway.app.router.add_post("/bench/sessions", open_session)
    server = ThreadedGatewayServer(gateway, host="127.0.0.1", port=port)
    await asyncio.to_thread(server.start)
    await asyncio.Event().wait()


async def toolkit_sessions(url: str, conc: int) -> list[str]:
    """`conc` fresh sessions; their ids, which the agents present as bearer tokens."""
    tag = os.urandom(4).hex()
    sids = [f"tk-{tag}-{i}" for i in range(conc)]
    async with aiohttp.ClientSession() as http:
        for sid in sids:
            async with http.post(url + "/bench/sessions", json={"session_id": sid}) as r:
                if r.status != 200:
                    raise RuntimeError(f"toolkit session: HTTP {r.status}")
    return sids
