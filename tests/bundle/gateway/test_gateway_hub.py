"""A hub id's tokenizer where the hub does not answer: asked once, then the cache alone.

huggingface_hub retries an unreachable hub with backoff for each file not in the cache, and
transformers asks for a tokenizer's files one by one: with `HF_ENDPOINT` out of reach, the
gateway (and `agentrl rehearse` without `--model-dir`) took 280 seconds and 88 requests to
fail, saying only that it could not connect. Each check runs in a fresh process, against an
endpoint that answers 503 (or 429) to everything: huggingface_hub reads its settings at
import.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.down_hub import DownHub, cache_snapshot, down_hub, hub_env
from tests.support.tiny_tokenizer import write_checkpoint

REPO = "Qwen/Qwen3-8B"
LOAD = (
    "from agentrl.bundle.gateway.tokenizer import load_tokenizer\n"
    "try:\n"
    f"    tok = load_tokenizer({REPO!r})\n"
    "except Exception as exc:\n"
    "    print('ERROR', exc)\n"
    "else:\n"
    "    print('IDS', tok.encode('What is 6*7?', add_special_tokens=False))\n"
)


@pytest.fixture(params=[503, 429])
def hub(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[str]]]:
    """A hub that is down (503), or one that rate-limits (429): huggingface_hub retries
    both with backoff for each file, so neither is an answer."""
    with down_hub(request.param) as answer:
        yield answer


def _load(env: dict[str, str]) -> str:
    # The timeout only guards the suite: before the fix this load took 280 seconds.
    done = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("offline", [False, True])
def test_an_uncached_hub_tokenizer_fails_at_once_naming_the_ways_out(
    hub: tuple[str, list[str]], tmp_path: Path, offline: bool
) -> None:
    url, seen = hub
    cache = tmp_path / "hub"
    said = _load(hub_env(url, tmp_path / "home", cache, offline))
    status = DownHub.status
    why = "HF_HUB_OFFLINE is set" if offline else f"the hub {url} answered {status}"
    assert said.startswith(
        f"ERROR gateway: the tokenizer of {REPO!r} cannot be loaded: {why}, and the Hugging "
        f"Face cache {cache} holds no tokenizer of {REPO!r} (tokenizer.json"
    )
    assert f"`hf download {REPO} tokenizer.json tokenizer_config.json config.json`" in said
    assert "HF_HUB_OFFLINE=1" in said and "the path of a local copy of the checkpoint" in said
    asked = [s for s in seen if REPO in s]  # not the library's own calls (2.4.0's at import)
    assert asked == ([] if offline else [f"HEAD /{REPO}/resolve/main/config.json"])


@pytest.mark.parametrize("offline", [False, True])
def test_a_cached_hub_tokenizer_loads_from_the_cache_with_the_hub_asked_once(
    hub: tuple[str, list[str]], tmp_path: Path, offline: bool
) -> None:
    """The cache holds the tokenizer (and not every file transformers asks the hub about,
    such as added_tokens.json): it loads from there, the hub asked once, or not at all."""
    url, seen = hub
    cache = tmp_path / "hub"
    snapshot = write_checkpoint(cache_snapshot(cache, REPO))
    (snapshot / "config.json").write_text('{"model_type": "qwen2"}')
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(snapshot))
    want = tokenizer.encode("What is 6*7?", add_special_tokens=False)
    assert _load(hub_env(url, tmp_path / "home", cache, offline)) == f"IDS {want}"
    asked = [s for s in seen if REPO in s]
    assert asked == ([] if offline else [f"HEAD /{REPO}/resolve/main/config.json"])


START_TWICE = (
    "import asyncio\n"
    "from agentrl.bundle.gateway import GatewayServer, GatewaySettings\n"
    "from agentrl.bundle.metrics import BundleMetrics\n"
    "async def start() -> None:\n"
    "    settings = GatewaySettings(router_url='http://127.0.0.1:9', port=0,\n"
    f"                               tokenizer_path={REPO!r}, renderer_family='qwen3')\n"
    "    server = GatewayServer(settings, BundleMetrics())\n"
    "    await server.start()\n"
    "    print('CONTEXT', server.context_length)\n"
    "    await server.stop()\n"
    "asyncio.run(start())\n"
    "asyncio.run(start())\n"
)


def test_a_gateway_start_asks_a_silent_hub_once_and_the_next_start_asks_again(
    hub: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A gateway serving a hub id reads its tokenizer and its config.json (the context) at
    start: each asked the hub, and a silent hub cost each HF_HUB_ETAG_TIMEOUT. One answer
    serves one start; a gateway started again in the same process (the rollout's process
    lives for the whole job) asks again, so a hub that has come back is not ignored."""
    url, seen = hub
    cache = tmp_path / "hub"
    snapshot = write_checkpoint(cache_snapshot(cache, REPO))
    (snapshot / "config.json").write_text('{"max_position_embeddings": 40960}')
    done = subprocess.run([sys.executable, "-c", START_TWICE], capture_output=True, text=True,
                          env=hub_env(url, tmp_path / "home", cache, offline=False),
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["CONTEXT 40960"] * 2, done.stdout + done.stderr
    assert [s for s in seen if REPO in s] == [f"HEAD /{REPO}/resolve/main/config.json"] * 2


WORKERS = (
    "import asyncio\n"
    "from array import array\n"
    "from agentrl.bundle.gateway import GatewayServer, GatewaySettings\n"
    "from agentrl.bundle.gateway.render_pool import RenderFailed\n"
    "from agentrl.bundle.gateway.render_worker import prompt_ids\n"
    "from agentrl.bundle.metrics import BundleMetrics\n"
    "MESSAGES = [{'role': 'user', 'content': 'What is 6*7? ' * 4000}]\n"
    "JOB = {'op': 'render', 'messages': MESSAGES, 'tools': None}\n"
    "async def main() -> None:\n"
    "    settings = GatewaySettings(router_url='http://127.0.0.1:9', port=0, render_workers=2,\n"
    f"                               tokenizer_path={REPO!r}, renderer_family='qwen3')\n"
    "    server = GatewayServer(settings, BundleMetrics())\n"
    "    await server.start()\n"
    "    pool = server._pool\n"
    "    want = prompt_ids(server.frontend.runner.renderer, MESSAGES, None)\n"
    "    replies = await asyncio.gather(pool.call(JOB), pool.call(JOB))\n"
    "    for worker in list(pool.workers):  # both crash; the next prompts start new ones\n"
    "        worker.kill()\n"
    "        await worker.proc.wait()\n"
    "    for _ in range(2):\n"
    "        try:\n"
    "            await pool.call(JOB)\n"
    "        except RenderFailed:\n"
    "            pass\n"
    "    replies.append(await pool.call(JOB))\n"
    "    same = [body == array('i', want).tobytes() for _, body in replies]\n"
    "    print('STARTED', pool.started, 'SAME', same, 'BROKEN', pool.broken)\n"
    "    await server.stop()\n"
    "asyncio.run(main())\n"
)


def test_render_workers_load_the_tokenizer_without_asking_the_hub_again(tmp_path: Path) -> None:
    """A gateway's render workers each load the tokenizer when they start (on the first
    large prompts, and again for one that replaces a crashed worker): each asked a silent
    hub once more, and the prompt waited HF_HUB_ETAG_TIMEOUT (10 s by default) for each.
    The gateway asks at start; its workers read the files its load left in the cache, and
    render what the gateway itself renders."""
    cache = tmp_path / "hub"
    snapshot = write_checkpoint(cache_snapshot(cache, REPO))
    (snapshot / "config.json").write_text('{"max_position_embeddings": 40960}')
    with down_hub(503) as (url, seen):
        done = subprocess.run([sys.executable, "-c", WORKERS], capture_output=True, text=True,
                              env=hub_env(url, tmp_path / "home", cache, offline=False),
                              timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip().splitlines()[-1]
    assert said == "STARTED 3 SAME [True, True, True] BROKEN None", done.stdout + done.stderr
    assert [s for s in seen if REPO in s] == [f"HEAD /{REPO}/resolve/main/config.json"]
