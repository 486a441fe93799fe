"""The context length SGLang derives from a checkpoint's `config.json` (pure).

One rule for the two places that read it in the pods: the gateway, which caps every call's
`max_new_tokens` at the room left when `spec.model.contextLength` is unset, and the
launcher's preflight, which refuses a `contextLength` above it (SGLang's `ModelConfig`
raises then, when its engines start on the GPUs). The rule is SGLang's `get_context_length`
(https://github.com/sgl-project/sglang/blob/v0.5.13/python/sglang/srt/utils/hf_transformers/common.py,
the same at 0.5.15.post1): the multimodal text sub-config if any, the first of its length
keys that is set, times the rope scaling factor unless the scaling names its original length
or is llama3's.

SGLang applies that rule to the config as transformers loads it, and both releases pin
transformers 5 (5.8.1, 5.12.1), whose `standardize_rope_params` rewrites the scaling first:
`rope_scaling` reads as `rope_parameters` (the key a checkpoint saved by transformers 5
writes), the legacy `type` names the rope type, and a `llama3`, `yarn` or `longrope` scaling
gets an original length (the config's own `original_max_position_embeddings`, else
`max_position_embeddings`). So YaRN's factor never multiplies, and a linear or dynamic one
written as `rope_parameters` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# In SGLang's order: the first one set wins.
LENGTH_KEYS: Final = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
# Rope types transformers 5 gives an original length, so SGLang multiplies by no factor.
ORIGINAL_LENGTH_ROPE_TYPES: Final = ("llama3", "yarn", "longrope")
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
    scaling = text.get("rope_parameters") or text.get("rope_scaling")
    if isinstance(scaling, Mapping) and scaling:
        value = scaling.get("factor", 1)
        # Per-layer parameters ({"full_attention": {...}, ...}) have no factor of their own.
        if isinstance(value, int | float) and not isinstance(value, bool) and value:
            factor = float(value)
        rope_type = scaling.get("rope_type", scaling.get("type"))
        if "original_max_position_embeddings" in scaling or rope_type in ORIGINAL_LENGTH_ROPE_TYPES:
            factor = 1.0
    for key in LENGTH_KEYS:
        value = text.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(factor * value)
    return None


# SGLang's switch for a context above the checkpoint's (an EnvBool: true/1/yes/y).
ALLOW_LONGER_CONTEXT_ENV: Final = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def longer_context_problem(
    asked: int | None, config: Any, where: str, env: Mapping[str, str]
) -> str | None:
    """`spec.model.contextLength` (`asked`) above the context SGLang derives from `config`
    (the checkpoint's config.json, read from `where`): SGLang's `ModelConfig` raises when
    the engines start (0.5.13 and 0.5.15.post1) unless `env` allows it. The launcher's
    preflight and `agentrl rehearse` say so in the same words; None when nothing is wrong
    or nothing can be judged."""
    if asked is None or not isinstance(config, Mapping):
        return None
    if env.get(ALLOW_LONGER_CONTEXT_ENV, "").strip().lower() in ("1", "true", "yes", "y"):
        return None
    derived = context_length_of(config)
    if derived is None or asked <= derived:
        return None
    return (
        f"spec.model.contextLength: {asked} is more than the {derived} tokens SGLang derives "
        f"from {where}, and SGLang refuses to start its engines with a longer context: set it "
        f"to {derived} or less (or leave it unset), or set {ALLOW_LONGER_CONTEXT_ENV}=1 in "
        "spec.runtime.env if the model really takes more"
    )
