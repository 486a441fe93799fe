"""GatewaySettings from the experiment's runtime config, and the tokenizer/renderer loading."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agentrl.api.models import RLExperimentSpec
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.gateway import GatewaySettings
from agentrl.bundle.gateway.tokenizer import EncodeCache, build_renderer, load_tokenizer

SPEC: dict[str, Any] = {
    "model": {
        "path": "/models/qwen3",
        "type": "qwen3-4B",
        "rendererFamily": "qwen3",
        "toolCallParser": "qwen25",
    },
    "data": {"train": "/data/train.jsonl"},
    "agent": {"http": {"url": "http://agent.rl.svc:8080"}},
    "grpo": {"numRollouts": 10},
    "gateway": {"cumulativeTokenMode": True, "logLevel": "error", "maxInFlight": 64, "port": 9191},
}


def test_from_runtime_config_maps_the_spec() -> None:
    config = RuntimeConfig(
        experiment="demo",
        namespace="rl",
        bundle_version="0.1.0",
        spec=RLExperimentSpec.model_validate(copy.deepcopy(SPEC)),
        gateway_url="http://demo-gw.rl.svc:9191/",
    )
    s = GatewaySettings.from_runtime_config(config, "http://10.0.0.5:30000/")
    assert (s.router_url, s.tokenizer_path, s.renderer_family, s.tool_call_parser) == (
        "http://10.0.0.5:30000",
        "/models/qwen3",
        "qwen3",
        "qwen25",
    )
    assert (s.cumulative_token_mode, s.log_level, s.max_in_flight, s.port, s.host) == (
        True,
        "error",
        64,
        9191,
        "0.0.0.0",
    )
    assert s.base_url == "http://demo-gw.rl.svc:9191" and len(s.admin_token) >= 32
    assert s.admin_token not in repr(s)


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        GatewaySettings(router_url="http://r", tokenizer_path="/m", max_in_flight=0)
    with pytest.raises(ValueError, match="router_url"):
        GatewaySettings(router_url="10.0.0.1:30000", tokenizer_path="/m")


def test_unknown_family_and_auto_on_a_local_path_name_the_fix(checkpoint: Path) -> None:
    tok = load_tokenizer(str(checkpoint))
    with pytest.raises(ValueError, match=r"unknown renderer family 'qwen9'.*qwen3"):
        build_renderer(tok, "qwen9")
    with pytest.raises(ValueError, match="rendererFamily"):
        build_renderer(tok, "auto")


def test_tokenizer_from_checkpoint_dir(checkpoint: Path) -> None:
    tok = load_tokenizer(str(checkpoint))
    assert tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    ids = tok.encode("<|im_start|>user\nhello<|im_end|>")
    assert (
        ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
        and tok.decode(ids) == "<|im_start|>user\nhello<|im_end|>"
    )


def test_encode_cache_is_exact_and_bounded(checkpoint: Path) -> None:
    tok = load_tokenizer(str(checkpoint))
    text = "You are a helpful assistant."
    first = tok.encode(text)
    first.append(-1)  # callers may mutate what they get; the cache must not see it
    assert tok.encode(text) == first[:-1] == tok._tok.encode(text, add_special_tokens=False).ids
    cache = EncodeCache(max_chars=40)
    for i, key in enumerate("abcd"):
        cache.put((key * 10, False), (i,))
    assert cache.get(("a" * 10, False)) == (0,)  # now the most recently used
    cache.put(("e" * 10, False), (4,))  # over budget: the least recently used ("b") goes
    assert cache.get(("b" * 10, False)) is None and cache.get(("a" * 10, False)) == (0,)
    cache.put(("x" * 11, False), (5,))  # more than a quarter of the budget: never kept
    assert cache.get(("x" * 11, False)) is None
