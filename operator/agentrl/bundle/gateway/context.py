"""The model's context length, as the engine will enforce it (pure, plus one file read).

SGLang refuses a request whose input fills the context or whose input plus `max_new_tokens`
exceeds it (the tokenizer manager's `_validate_one_request`, identical at 0.5.13 and
0.5.15.post1; slime never passes `--allow-auto-truncate`), so the gateway caps every
call's `max_new_tokens` at the room left (`turns`). The context is `spec.model.contextLength`
when set (agentrl then passes it to SGLang as `--context-length`); otherwise SGLang derives it
from the checkpoint's `config.json`, and so does this module, by the same rule
(`agentrl.api.model_context`, SGLang's `get_context_length`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from agentrl.api.model_context import LENGTH_KEYS, context_length_of

log = logging.getLogger("agentrl.gateway")


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
