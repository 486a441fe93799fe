"""A real, small Qwen-style byte-level BPE tokenizer, trained offline in-process.

Built with the `tokenizers` library (the same code that runs Qwen's tokenizer.json) with
Qwen's special tokens, and saved as a checkpoint-like directory (`tokenizer.json` +
`tokenizer_config.json`) so the gateway loads it through its production path.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
CORPUS = [
    "system user assistant tool You are a helpful assistant.",
    "What is 6*7? The answer is 42. Let me think about it step by step.",
    '{"name": "get_weather", "arguments": {"city": "Paris"}} sunny, 21 degrees',
    "# Tools You may call one or more functions to assist with the user query.",
    "def main():\n    print('hello world')\n",
]


def build_tokenizer(vocab_size: int = 800) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok


def write_checkpoint(directory: Path) -> Path:
    """A checkpoint-like dir holding the tokenizer; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(directory / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory
