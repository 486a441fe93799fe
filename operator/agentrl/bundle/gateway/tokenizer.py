"""The model's tokenizer and chat renderer, loaded once per gateway.

Prompts are rendered to token ids by the `renderers` package (a hand-written, token-exact
port of each family's chat template) and completions are parsed back by the same renderer.
A checkpoint directory with a `tokenizer.json` is loaded with the `tokenizers` library
directly, so the gateway needs neither `transformers` nor network; anything else goes
through `renderers`' own loader (which needs `transformers`, present in slime's image), as does
any checkpoint rendered with its chat template (`default`): only transformers applies one.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import renderers
from renderers.base import load_tokenizer as renderers_load_tokenizer
from renderers.configs import DefaultRendererConfig, config_from_name
from tokenizers import Tokenizer as HFTokenizer

from agentrl.api.model_names import GATEWAY_REASONING_PARSERS, GATEWAY_TOOL_PARSERS
from agentrl.api.rules import is_local_path
from agentrl.bundle.gateway.hub import cache_only, hub_silent, uncached_tokenizer

ENCODE_CACHE_CHARS = 16_000_000  # text remembered by the encode cache (about 16-64 MB)


class EncodeCache:
    """Text -> ids, least recently used first out, bounded by characters.

    The renderer re-encodes the same pieces on every turn (the system prompt and tool specs
    of an agent are often tens of thousands of tokens, and every episode of a prompt group
    shares them); the tokenizer is deterministic, so a hit is exactly what encoding gives.
    """

    def __init__(self, max_chars: int = ENCODE_CACHE_CHARS) -> None:
        self._items: OrderedDict[tuple[str, bool], tuple[int, ...]] = OrderedDict()
        self._chars = 0
        self.max_chars = max_chars

    def get(self, key: tuple[str, bool]) -> tuple[int, ...] | None:
        ids = self._items.get(key)
        if ids is not None:
            self._items.move_to_end(key)
        return ids

    def put(self, key: tuple[str, bool], ids: tuple[int, ...]) -> None:
        if len(key[0]) > self.max_chars // 4:
            return  # one huge one-off text must not flush everything else
        self._items[key] = ids
        self._chars += len(key[0])
        while self._chars > self.max_chars:
            (text, _), _ = self._items.popitem(last=False)
            self._chars -= len(text)


class TokenizerAdapter:
    """`tokenizers.Tokenizer` behind the surface `renderers` needs (its Tokenizer protocol)."""

    def __init__(self, tok: HFTokenizer, name_or_path: str, eos_token: str | None) -> None:
        self._tok = tok
        self.name_or_path = name_or_path
        self.unk_token_id: int | None = None
        self.eos_token_id: int | None = tok.token_to_id(eos_token) if eos_token else None
        self._cache = EncodeCache()

    def encode(
        self, text: str, *args: Any, add_special_tokens: bool = False, **kw: Any
    ) -> list[int]:
        key = (text, add_special_tokens)
        ids = self._cache.get(key)
        if ids is None:
            ids = tuple(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)
            self._cache.put(key, ids)
        return list(ids)

    def decode(
        self, token_ids: Any, *args: Any, skip_special_tokens: bool = False, **kw: Any
    ) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    def get_vocab(self) -> dict[str, int]:
        return dict(self._tok.get_vocab(with_added_tokens=True))

    @property
    def added_tokens_decoder(self) -> dict[int, Any]:
        """Added tokens by id, as transformers' tokenizers expose them."""
        return dict(self._tok.get_added_tokens_decoder())


def added_token_ids(tokenizer: Any) -> frozenset[int] | None:
    """Ids of the tokens added to the vocabulary (specials, and markers such as `<think>` or
    `<tool_call>` that chat formats are built from); None if the tokenizer does not say."""
    added = getattr(tokenizer, "added_tokens_decoder", None)  # as transformers names it
    if not isinstance(added, dict):
        return None
    return frozenset(i for i in added if isinstance(i, int))


def _eos_from_config(directory: Path) -> str | None:
    cfg = directory / "tokenizer_config.json"
    if not cfg.is_file():
        return None
    eos = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token")
    if isinstance(eos, dict):  # AddedToken form
        eos = eos.get("content")
    return eos if isinstance(eos, str) else None


def load_tokenizer(path: str, chat_template: bool = False) -> Any:
    """The tokenizer for `path`: a local dir with tokenizer.json, read with `tokenizers`, or
    anything transformers loads (a hub id; and any checkpoint when the renderer needs the
    chat template, which only transformers' tokenizer applies)."""
    directory = Path(path)
    if not chat_template and (directory / "tokenizer.json").is_file():
        tok = HFTokenizer.from_file(str(directory / "tokenizer.json"))
        return TokenizerAdapter(tok, str(directory), _eos_from_config(directory))
    try:
        if directory.is_dir() or is_local_path(path):
            return renderers_load_tokenizer(path)
        return _load_hub_tokenizer(path)
    except ImportError as exc:
        need = "the chat template (rendererFamily default)" if chat_template else "a hub id"
        raise RuntimeError(
            f"gateway: {path!r} needs transformers for {need}, and it is not installed "
            "(it is in slime's image; elsewhere: pip install transformers)"
        ) from exc


def hub_tokenizer_problem(model_id: str) -> tuple[bool, str | None]:
    """(whether a hub id's tokenizer is to come from the cache alone, why it cannot be had
    there, or None). The hub is asked once (`hub.hub_silent`) about the repository renderers
    loads it from (a mirror for some ids); where it answers, transformers fetches the files
    and says itself what is wrong."""
    from renderers import base

    source = getattr(base, "TOKENIZER_SOURCE_OVERRIDES", {}).get(model_id, model_id)
    revision = getattr(base, "TRUSTED_REVISIONS", {}).get(source)
    why = hub_silent(source)
    if why is None:
        return False, None
    return True, uncached_tokenizer(model_id, source, revision, why)


def _load_hub_tokenizer(model_id: str) -> Any:
    """A hub id's tokenizer through `renderers`; where the hub does not answer, from the
    cache alone, and at once an error naming the ways out when the cache lacks it
    (huggingface_hub's retries took minutes to say that it could not connect)."""
    cached, problem = hub_tokenizer_problem(model_id)
    if problem is not None:
        raise RuntimeError(f"gateway: {problem}")
    if not cached:
        return renderers_load_tokenizer(model_id)
    with cache_only():
        return renderers_load_tokenizer(model_id)


def uses_chat_template(family: str, path: str) -> bool:
    """Whether the renderer is the checkpoint's chat template: `default`, or `auto` for a hub
    id without a hand-written family (renderers' own fallback)."""
    return family == "default" or (
        family == "auto" and not Path(path).is_dir() and hub_family(path) is None
    )


def load_renderer(
    path: str,
    family: str,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> tuple[Any, Any]:
    """(tokenizer, renderer) for the model, as the gateway and its render workers use them."""
    template = uses_chat_template(family, path)
    tokenizer = load_tokenizer(path, chat_template=template)
    if template and not getattr(tokenizer, "chat_template", None):
        # transformers would refuse every chat request (HTTP 400), and every episode would
        # fail as its agent's error; refused at start instead, naming the way out.
        raise ValueError(
            f"gateway: {path!r} has no chat template (no `chat_template` in its "
            f"tokenizer_config.json, no chat_template.jinja) and rendererFamily {family!r} "
            "renders with it: use a copy that ships the template (agentrl rehearse "
            "--model-dir: tokenizer_config.json and any chat_template.jinja with the "
            "tokenizer), or set spec.model.rendererFamily to the model's family (docs/api.md)"
        )
    renderer = build_renderer(
        tokenizer, "default" if template else family, tool_call_parser, reasoning_parser
    )
    return tokenizer, renderer


def build_renderer(
    tokenizer: Any,
    family: str,
    tool_call_parser: str | None = None,
    reasoning_parser: str | None = None,
) -> Any:
    """A `renderers` Renderer for `family`; "auto" resolves from the tokenizer's hub id.

    The spec names SGLang's parsers (they are passed to SGLang too); the `default` family
    parses with renderers' own, which read the same formats under other names.
    """
    if family == "default":
        config: Any = DefaultRendererConfig(
            tool_parser=GATEWAY_TOOL_PARSERS.get(tool_call_parser or "", tool_call_parser),
            reasoning_parser=GATEWAY_REASONING_PARSERS.get(
                reasoning_parser or "", reasoning_parser
            ),
        )
    else:
        try:
            config = config_from_name(family)
        except (KeyError, ValueError) as exc:
            raise ValueError(
                f"gateway: unknown renderer family {family!r} (spec.model.rendererFamily); "
                f"known: {', '.join(known_families())}"
            ) from exc
    if config is None and Path(str(getattr(tokenizer, "name_or_path", ""))).is_dir():
        raise ValueError(
            "gateway: rendererFamily 'auto' resolves only hub ids; set spec.model.rendererFamily "
            f"for the local checkpoint {tokenizer.name_or_path!r} "
            f"(known: {', '.join(known_families())})"
        )
    return renderers.create_renderer(tokenizer, config)


def hub_family(model_id: str) -> str | None:
    """The family `auto` resolves a Hugging Face id to (renderers' own table), or None when
    the model has no hand-written renderer (then `auto` means its chat template)."""
    from renderers.base import MODEL_RENDERER_MAP

    family = MODEL_RENDERER_MAP.get(model_id)
    return str(family) if family is not None else None


def known_families() -> Sequence[str]:
    from renderers.base import RENDERER_REGISTRY, _populate_registry

    _populate_registry()
    return sorted(RENDERER_REGISTRY)
