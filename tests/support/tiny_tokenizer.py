"""A real, small Qwen-style byte-level BPE tokenizer, trained offline in-process.

Built with the `tokenizers` library (the same code that runs Qwen's tokenizer.json) with
Qwen's special tokens, and saved as a checkpoint-like directory (`tokenizer.json` +
`tokenizer_config.json`, with a chat template) so the gateway loads it through its
production path: `tokenizers` for the hand-written families, transformers for `default`.
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


# A chat template in the shape of Qwen2.5's (ChatML turns; tools listed in the system turn;
# calls as <tool_call> JSON; tool results in a user turn as <tool_response>), for the
# chat-template family (`rendererFamily: default`), which transformers renders.
CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{{ messages[0].content if messages[0].role == 'system' else 'You are a helpful assistant.' }}

# Tools

<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

Call a function as <tool_call>{"name": <name>, "arguments": <object>}</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role != 'system' %}<|im_start|>{{ m.role }}
{{ m.content or '' }}
{%- for call in m.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


# Qwen3's own chat template (the `chat_template` of Qwen/Qwen3-* tokenizer_config.json,
# Apache-2.0), byte for byte, for tools that recognise a model by it (agentcore-rl-toolkit's
# gateway picks its output parser by the template's hash). From
# https://github.com/huggingface/trl/blob/f2cd57710ae345ea6428ae95363267fcf38a3dc8/trl/chat_templates/qwen3.jinja
QWEN3_CHAT_TEMPLATE = Path(__file__).with_name("qwen3_chat_template.jinja")


def write_checkpoint(directory: Path, chat_template: str = CHAT_TEMPLATE) -> Path:
    """A checkpoint-like dir holding the tokenizer and a chat template; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(directory / "tokenizer.json"))
    config = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": chat_template,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory
