"""The chat renderer families the gateway can build: generated, do not edit by hand.

`hack/gen-renderer-families.py` writes this file from the `renderers` package pinned in
pyproject.toml (the `bundle` extra), so `agentrl validate` knows the names without importing
it; a test fails when the installed package and this list disagree.
"""

from typing import Final

RENDERERS_VERSION: Final = "0.1.12"
# Resolve the family from the tokenizer's Hugging Face id (model.path must be a hub id).
AUTO: Final = "auto"
FAMILIES: Final = (
    "deepseek-r1",
    "deepseek-v3",
    "deepseek-v4",
    "default",
    "gemma4",
    "glm-4.5",
    "glm-5",
    "glm-5.1",
    "glm-5.3",
    "gpt-oss",
    "hy3",
    "inkling",
    "kimi-k2",
    "kimi-k2.5",
    "laguna-m.1",
    "laguna-s-2.1",
    "laguna-xs-2.1",
    "laguna-xs.2",
    "llama-3",
    "minimax-m2",
    "nemotron-3",
    "nemotron-3-ultra",
    "nemotron-3.5",
    "prime-qwen3",
    "qwen3",
    "qwen3-vl",
    "qwen3.5",
    "qwen3.6",
    "qwen3.8",
)
# The parsers the `default` family takes (renderers.parsers), by the gateway's own names.
TOOL_PARSERS: Final = (
    "deepseek-v3",
    "glm",
    "qwen3",
    "qwen3.5",
)
REASONING_PARSERS: Final = ("think",)
