"""The chat-template family: a model without a hand-written renderer, rendered by its template.

`rendererFamily: default` (and `auto` for a hub id renderers has no family for, such as the
HTTP example's Qwen/Qwen2.5-7B-Instruct) renders with the checkpoint's own chat template,
which only transformers' tokenizer applies, and parses tool calls with the parser the spec
names in SGLang's words (`toolCallParser: qwen25`), mapped to the `renderers` parser of the
same format (agentrl.api.model_names, which validation checks the name against).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.gateway.tokenizer import load_renderer, load_tokenizer, uses_chat_template

from .gateway_helpers import MESSAGES, TOOLS, Cluster, scripted

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_the_chat_template_family_loads_transformers_tokenizer_and_parses_sglang_s_names(
    checkpoint: Path,
) -> None:
    tok, renderer = load_renderer(str(checkpoint), "default", "qwen25")
    assert hasattr(tok, "apply_chat_template")  # what `tokenizers` alone lacks
    ids = renderer.render_ids(MESSAGES, tools=TOOLS, add_generation_prompt=True)
    assert "# Tools" in tok.decode(ids) and tok.decode(ids).endswith("<|im_start|>assistant\n")
    completion = [*tok.encode(HERMES_CALL, add_special_tokens=False),
                  tok.convert_tokens_to_ids("<|im_end|>")]  # fmt: skip
    (call,) = renderer.parse_response(completion).tool_calls
    assert (call.name, call.arguments, call.status.value) == (
        "get_weather",
        {"city": "Paris"},
        "ok",
    )


def test_a_checkpoint_without_a_chat_template_is_refused_at_start(tmp_path: Path) -> None:
    """Every chat request would be refused by transformers (HTTP 400: "tokenizer.chat_template
    is not set"), failing every episode as its agent's error; a rehearsal exited 1 with one
    such failure per episode instead of saying what to fix."""
    checkpoint = write_checkpoint(tmp_path / "no-template")
    config = checkpoint / "tokenizer_config.json"
    body = json.loads(config.read_text(encoding="utf-8"))
    del body["chat_template"]
    config.write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(ValueError, match="has no chat template") as refused:
        load_renderer(str(checkpoint), "default", "qwen25")
    assert "spec.model.rendererFamily" in str(refused.value)
    assert "--model-dir" in str(refused.value)
    assert len(f"ValueError: {refused.value}") <= 500  # the render worker's report keeps 500


def test_which_families_render_with_the_chat_template(checkpoint: Path) -> None:
    assert uses_chat_template("default", str(checkpoint))
    assert uses_chat_template("auto", "Qwen/Qwen2.5-7B-Instruct")  # no hand-written family
    assert not uses_chat_template("auto", "Qwen/Qwen3-8B")  # renderers' qwen3
    assert not uses_chat_template("qwen3", str(checkpoint))


def test_a_hub_id_goes_through_renderers_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """renderers exports its loader from renderers.base only (`renderers.load_tokenizer` is
    no attribute): a hub id used to fail with AttributeError before reaching the hub. Kept
    off the hub (huggingface_hub's switch, read at each call), an uncached id is said at
    once; tests/bundle/gateway/test_gateway_hub.py loads a cached one through renderers."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(RuntimeError, match="'Qwen/not-a-model' cannot be loaded: HF_HUB_OFF"):
        load_tokenizer("Qwen/not-a-model")


@pytest.mark.gateway(renderer_family="default", tool_call_parser="qwen25")
async def test_a_gateway_on_the_chat_template_answers_tool_calls(
    gateway: GatewayServer, cluster: Cluster, tok: Any
) -> None:
    cluster.set(responder=scripted(tok, HERMES_CALL))
    handle = await gateway.create_session("template", {})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    reply = await c.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)  # type: ignore[arg-type]
    calls = reply.choices[0].message.tool_calls or []
    assert [(tc.function.name, tc.function.arguments) for tc in calls] == [
        ("get_weather", '{"city":"Paris"}')
    ]  # type: ignore[union-attr]
    (turn,) = await gateway.get_turns("template")
    assert "# Tools" in tok.decode(list(turn.prompt_ids))
