"""Helpers shared by the gateway tests (a unique module name: test dirs share sys.path)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.sglang_stub import StubEngine, StubRouter

from agentrl.api.models import GatewaySpec
from agentrl.bundle.gateway import GatewaySettings
from agentrl.bundle.metrics import BundleMetrics

N_WORKERS = 3
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 6*7?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_REPLY = (
    "<think>\nI should look it up.\n</think>\n\nLet me check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


def scripted(tok: Any, text: str) -> Any:
    """A stub responder that samples `text` then <|im_end|>."""
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    return lambda prompt, params: [*tok.encode(text), im_end]


@dataclass
class Cluster:
    engines: list[StubEngine]
    router: StubRouter
    metrics: BundleMetrics = field(default_factory=BundleMetrics)

    def all_requests(self) -> list[dict[str, Any]]:
        return [r for e in self.engines for r in e.requests]

    def sampled(self, rid: str) -> list[int]:
        for e in self.engines:
            if rid in e.sampled:
                return e.sampled[rid]
        raise KeyError(rid)

    def set(self, **attrs: Any) -> None:
        for e in self.engines:
            for k, v in attrs.items():
                setattr(e, k, v)


def settings_for(cluster: Cluster, checkpoint: Path, **overrides: Any) -> GatewaySettings:
    """Settings for a test gateway; overrides named like `spec.gateway` fields (snake_case)
    go into the spec, the rest are GatewaySettings fields."""
    base: dict[str, Any] = {
        "router_url": cluster.router.url,
        "tokenizer_path": str(checkpoint),
        "renderer_family": "qwen3",
        "port": 0,
        "admin_token": "admin-secret",
    }
    spec = {k: overrides.pop(k) for k in list(overrides) if k in GatewaySpec.model_fields}
    return GatewaySettings(**{**base, **overrides}, spec=GatewaySpec(**spec))


def metric(cluster: Cluster, name: str, **labels: str) -> float:
    value = cluster.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else float(value)


async def until(cond: Callable[[], bool], what: str, limit_s: float = 10.0) -> None:
    """Wait for a condition (a liveness bound, not a timing assertion)."""
    for _ in range(int(limit_s / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")
