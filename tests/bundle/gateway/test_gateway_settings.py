"""GatewaySettings from the experiment's runtime config, and the tokenizer/renderer loading."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agentrl.api.models import AgentSpec, GatewaySpec, RLExperimentSpec
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.gateway import GatewaySettings
from agentrl.bundle.gateway.tokenizer import EncodeCache, build_renderer, load_tokenizer

SPEC: dict[str, Any] = {
    "model": {
        "path": "/models/qwen3",
        "type": "qwen3-4B",
        "rendererFamily": "qwen3",
        "toolCallParser": "qwen25",
        "contextLength": 32768,
    },
    "data": {"train": "/data/train.jsonl"},
    "agent": {"http": {"url": "http://agent.rl.svc:8080"}, "modelId": "qwen3-agent"},
    "grpo": {"numRollouts": 10},
    "gateway": {
        "cumulativeTokenMode": True,
        "logLevel": "error",
        "maxInFlight": 64,
        "port": 9191,
        "maxRequestBytes": 131072,
    },
}


def test_from_runtime_config_maps_the_spec() -> None:
    spec = RLExperimentSpec.model_validate(copy.deepcopy(SPEC))
    config = RuntimeConfig(
        experiment="demo",
        namespace="rl",
        bundle_version="0.1.0",
        spec=spec,
        gateway_url="http://demo-gw.rl.svc:9191/",
    )
    s = GatewaySettings.from_runtime_config(config, "http://10.0.0.5:30000/")
    assert (s.router_url, s.tokenizer_path, s.renderer_family, s.tool_call_parser) == (
        "http://10.0.0.5:30000",
        "/models/qwen3",
        "qwen3",
        "qwen25",
    )
    assert s.spec == spec.gateway  # every spec.gateway knob, as the spec has it
    assert (s.bind_port, s.host, s.model_id, s.context_length) == (
        9191,
        "0.0.0.0",
        "qwen3-agent",
        32768,
    )
    assert s.base_url == "http://demo-gw.rl.svc:9191" and len(s.admin_token) >= 32
    assert s.admin_token not in repr(s)


def test_spec_owned_knobs_have_one_default_the_api_models() -> None:
    s = GatewaySettings(router_url="http://r", tokenizer_path="/m")
    assert s.spec == GatewaySpec()  # max_in_flight, log_level, ... only from the API model
    assert s.model_id == AgentSpec.model_fields["model_id"].default
    assert s.bind_port == GatewaySpec().port
    assert GatewaySettings(router_url="http://r", tokenizer_path="/m", port=0).bind_port == 0
    spec_fields = {f.name for f in dataclasses.fields(GatewaySettings)} & set(
        GatewaySpec.model_fields
    )
    assert spec_fields == {"port"}  # the bind port override (tests use 0); nothing else


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(pydantic.ValidationError, match="max_in_flight"):
        GatewaySpec(max_in_flight=0)
    with pytest.raises(pydantic.ValidationError, match="max_request_bytes"):
        GatewaySpec(max_request_bytes=1024)  # below what one tool list needs
    with pytest.raises(ValueError, match="router_url"):
        GatewaySettings(router_url="10.0.0.1:30000", tokenizer_path="/m")
    with pytest.raises(ValueError, match="render_workers"):
        GatewaySettings(router_url="http://r", tokenizer_path="/m", render_workers=0)


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
