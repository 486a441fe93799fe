"""The model's context length, as the engine will enforce it (pure, plus one file read).

SGLang refuses a request whose input fills the context or whose input plus `max_new_tokens`
exceeds it (the tokenizer manager's `_validate_one_request`, identical at 0.5.13 and
0.5.15.post1; slime never passes `--allow-auto-truncate`), so the gateway caps every
call's `max_new_tokens` at the room left (`turns`). The context is `spec.model.contextLength`
when set (agentrl then passes it to SGLang as `--context-length`); otherwise SGLang derives it
from the checkpoint's `config.json`, and so does this module, by the same rule
(`get_context_length` in SGLang's `srt/utils/hf_transformers/common.py`,
https://github.com/sgl-project/sglang/blob/v0.5.13/python/sglang/srt/utils/hf_transformers/common.py):
the multimodal text sub-config if any, the first of its length keys that is set, times the
rope scaling factor unless the scaling already names its original length or is llama3's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

log = logging.getLogger("agentrl.gateway")

# In SGLang's order: the first one set wins.
LENGTH_KEYS: Final = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
# Sub-configs that hold the language model's settings in multimodal checkpoints.
TEXT_CONFIG_KEYS: Final = ("text_config", "llm_config", "language_config", "thinker_config")


def context_length_of(config: Mapping[str, Any]) -> int | None:
    """The context SGLang derives from a Hugging Face `config.json` (None: no length key;
    SGLang would then assume 2048, and agentrl rather caps nothing than guess)."""
    text = config
    for key in TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, Mapping):
            text = sub
            break
    factor = 1.0
    scaling = text.get("rope_scaling")
    if isinstance(scaling, Mapping) and scaling:
        factor = float(scaling.get("factor", 1) or 1)
        if "original_max_position_embeddings" in scaling or scaling.get("rope_type") == "llama3":
            factor = 1.0
    for key in LENGTH_KEYS:
        value = text.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(factor * value)
    return None


def checkpoint_context_length(model_path: str) -> int | None:
    """The context of the checkpoint at `model_path` (a directory with `config.json`); None
    for a hub id or a directory without a usable config (logged once, here)."""
    config = Path(model_path) / "config.json"
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning(
            "gateway: the model's context length is unknown (spec.model.contextLength is unset "
            "and %s is not readable: %s); max_new_tokens is not capped, so a long "
            "conversation may be refused by the engine",
            config,
            type(exc).__name__,
        )
        return None
    length = context_length_of(doc) if isinstance(doc, Mapping) else None
    if length is None:
        log.warning(
            "gateway: %s names no context length (%s); max_new_tokens is not capped",
            config,
            ", ".join(LENGTH_KEYS),
        )
    return length
