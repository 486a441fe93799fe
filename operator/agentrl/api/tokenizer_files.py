"""Whether a checkpoint directory carries its tokenizer's vocabulary (pure).

One rule for the launcher's preflight in the pods and `agentrl rehearse` on the user's
machine, so a directory the rehearsal takes is one the pods take. The SGLang engines, slime's
data source and the gateway all load the tokenizer from the checkpoint directory; a copy of
the weights and `config.json` alone fails there once the engines are up, or (transformers 5)
loads an empty vocabulary that tokenizes every prompt to nothing. `tokenizer_config.json`
alone holds no vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# The files a tokenizer reads its vocabulary from, of every format transformers loads: the
# fast tokenizer's tokenizer.json, BPE's vocab.json, WordPiece's vocab.txt, SentencePiece's
# *.model, tiktoken's *.tiktoken.
VOCABULARY_FILES: Final = frozenset({"tokenizer.json", "vocab.json", "vocab.txt"})
VOCABULARY_SUFFIXES: Final = (".model", ".tiktoken")
VOCABULARY_NAMES: Final = "tokenizer.json, vocab.json, vocab.txt, *.model or *.tiktoken"


def has_vocabulary(files: Iterable[str]) -> bool:
    """Whether the names of a directory's regular files include a vocabulary file."""
    return any(f in VOCABULARY_FILES or f.endswith(VOCABULARY_SUFFIXES) for f in files)
