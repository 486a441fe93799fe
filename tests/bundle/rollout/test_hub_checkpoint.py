"""The hub reports the last checkpoint slime saved, read from Megatron's own tracker file at
each scrape (the dashboard's checkpoint annotation reads it)."""

from __future__ import annotations

import math
from pathlib import Path

import aiohttp

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.hub import Hub
from agentrl.slimecmd.checkpoint import TRACKER

from .doubles import runtime_config


async def scrape(port: int) -> dict[str, float]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("agentrl_checkpoint_iteration")
    }


async def test_the_scrape_reads_megatrons_tracker(tmp_path: Path) -> None:
    body = runtime_config().model_dump(by_alias=True)
    body["spec"]["checkpoint"] = {"path": str(tmp_path)}
    hub = Hub(RuntimeConfig.model_validate(body).to_json(), "127.0.0.1", 0)
    port = await hub.start_metrics()
    try:
        (before,) = (await scrape(port)).values()
        assert math.isnan(before)  # no save yet: not 0, which is a save's iteration
        (tmp_path / TRACKER).write_text("0")  # slime's save at rollout 0 (saveInterval 1)
        assert await scrape(port) == {"agentrl_checkpoint_iteration": 0.0}
        (tmp_path / TRACKER).write_text("20\n")  # what Megatron writes after a save
        assert await scrape(port) == {"agentrl_checkpoint_iteration": 20.0}
        (tmp_path / TRACKER).write_text("40")
        assert await scrape(port) == {"agentrl_checkpoint_iteration": 40.0}
        (tmp_path / TRACKER).write_text("release")  # a release checkpoint: no iteration
        assert await scrape(port) == {"agentrl_checkpoint_iteration": 40.0}
    finally:
        await hub.stop()
