"""The model's context length, as the engine will enforce it (pure, plus one file read).

SGLang refuses a request whose input fills the context or whose input plus `max_new_tokens`
exceeds it (the tokenizer manager's `_validate_one_request`, identical at 0.5.13 and
0.5.15.post1; slime never passes `--allow-auto-truncate`), so the gateway caps every
call's `max_new_tokens` at the room left (`turns`). The context is `spec.model.contextLength`
when set (agentrl then passes it to SGLang as `--context-length`); otherwise SGLang derives it
from the checkpoint's `config.json`, and so does this module, by the same rule
(`agentrl.api.model_context`, SGLang's `get_context_length`): a local checkpoint's file, or
for a Hugging Face id the file SGLang downloads for it (through the Hugging Face cache, as
the tokenizer's files come).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from agentrl.api.model_context import LENGTH_KEYS, context_length_of
from agentrl.api.rules import is_local_path
from agentrl.bundle.gateway.hub import hub_silent

log = logging.getLogger("agentrl.gateway")

CONFIG_FILE = "config.json"


def config_file(model_path: str) -> Path:
    """Where the checkpoint's `config.json` is: in its directory, or for a hub id in the
    Hugging Face cache (fetched if missing), the file SGLang derives its context from. Without
    it nothing would be capped, and SGLang would refuse each call of a long conversation that
    asks for more than the room left, where a local copy of the same checkpoint (`agentrl
    rehearse --model-dir`) caps it; OSError when it cannot be had.

    The hub is asked once (`hub.hub_silent`): `hf_hub_download` alone retries an unreachable
    hub with backoff (some 23 seconds at 2.4.0 before it gives up) when the file is not
    cached, and every gateway start waited for it. Where the hub does not answer, or
    `HF_HUB_OFFLINE` is set, the cache alone is read."""
    if Path(model_path).is_dir() or is_local_path(model_path):
        return Path(model_path) / CONFIG_FILE
    try:
        from huggingface_hub import hf_hub_download

        cache_only = hub_silent(model_path, CONFIG_FILE) is not None
        return Path(hf_hub_download(model_path, CONFIG_FILE, local_files_only=cache_only))
    except Exception as exc:  # no hub library, no network, no such model or file: unknown
        raise OSError(f"{model_path}: {type(exc).__name__}") from exc


def checkpoint_context_length(model_path: str) -> int | None:
    """The context of the checkpoint at `model_path` (a directory with `config.json`, or a
    hub id's `config.json`); None when there is no usable config (logged once, here)."""
    try:
        config = config_file(model_path)
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        config = Path(model_path) / CONFIG_FILE
        log.warning(
            "gateway: the model's context length is unknown (spec.model.contextLength is unset "
            "and %s is not readable: %s); max_new_tokens is not capped, so a long "
            "conversation may be refused by the engine",
            config,
            type(exc.__cause__ or exc).__name__,
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
