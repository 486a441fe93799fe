"""The names `spec.model` gives slime, SGLang and the gateway, checked against what they know.

`model.type` is slime's `scripts/models/<type>.sh`; `toolCallParser` and `reasoningParser` are
SGLang's `--tool-call-parser` and `--reasoning-parser` (argparse choices); a name outside them
stops slime's driver on a GPU worker after the gang is scheduled. Both lists come from the
supported slime rows (`agentrl.api.upstream_names`, generated from each row's slime and SGLang).
With `rendererFamily: default` the gateway parses tool calls and reasoning itself, with the
`renderers` package's parsers, whose names differ from SGLang's: `GATEWAY_TOOL_PARSERS` maps
one to the other by the format they read. A renderer family or parser written for
another model family than `model.type` is a warning: it runs, and renders or parses the
wrong format. Last, a checkpoint whose directory name says it is another model than
`model.type` (`/models/Qwen2.5-7B-Instruct` with `qwen2.5-3B`) is a warning: slime builds
the model from the type's script and stops loading the other model's weights into it, on a
GPU worker after the gang is scheduled. Only names are compared (the checkpoint is in the
pods), so it is a warning, never an error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from agentrl.api.findings import Finding, Rule, err, warn
from agentrl.api.models import RLExperiment, RuntimeSpec
from agentrl.api.renderer_families import REASONING_PARSERS as GATEWAY_REASONING
from agentrl.api.renderer_families import TOOL_PARSERS as GATEWAY_TOOLS
from agentrl.api.upstream_names import (
    MODEL_TYPES,
    REASONING_PARSERS,
    SGLANG_OF_ROW,
    TOOL_CALL_PARSERS,
)

DEFAULT_FAMILY: Final = "default"
DEFAULT_SLIME_DIR: Final = RuntimeSpec.model_fields["slime_dir"].default

# SGLang tool-call parser -> the renderers parser that reads the same format (the gateway
# uses it with `rendererFamily: default`): Hermes-style `<tool_call>{json}</tool_call>`
# (Qwen2.5 and Qwen3), the XML `<function=...>` form (Qwen3-Coder, Qwen3.5), GLM-4.5's and
# DeepSeek-V3's own.
GATEWAY_TOOL_PARSERS: Final[dict[str, str]] = {
    "qwen25": "qwen3", "qwen": "qwen3", "hermes": "qwen3", "qwen3_coder": "qwen3.5",
    "glm": "glm", "glm45": "glm", "deepseekv3": "deepseek-v3",
}  # fmt: skip
# SGLang reasoning parser -> renderers', for the `<think>...</think>` formats.
GATEWAY_REASONING_PARSERS: Final[dict[str, str]] = {
    "qwen3": "think", "qwen3-thinking": "think", "deepseek-r1": "think", "glm45": "think",
}  # fmt: skip


@dataclass(frozen=True)
class ModelFamily:
    """A family of slime model types and the renderer families and tool parsers for it."""

    name: str
    prefixes: tuple[str, ...]
    renderers: tuple[str, ...]
    tools: tuple[str, ...]


# model.type prefix (slime's scripts/models) -> what fits it. A name that belongs to another
# family is warned about; a type or name in no family (`default`, `hermes`, `pythonic`: any
# model's) is never judged.
FAMILIES: Final = (
    ModelFamily("Qwen2.5", ("qwen2.5-",), (DEFAULT_FAMILY,), ("qwen25", "qwen")),
    ModelFamily("Qwen3.5", ("qwen3.5-",), ("qwen3.5",), ("qwen3_coder",)),
    ModelFamily("Qwen3", ("qwen3-",), ("qwen3", "prime-qwen3"), ("qwen25", "qwen")),
    ModelFamily("Llama 3", ("llama3",), ("llama-3",), ("llama3",)),
    ModelFamily("GLM-4.5", ("glm4.5-", "glm4.7-"), ("glm-4.5",), ("glm", "glm45", "glm47")),
    ModelFamily("GLM-5", ("glm5",), ("glm-5", "glm-5.1", "glm-5.3"), ("glm", "glm45", "glm47")),
    ModelFamily("Kimi K2", ("kimi-k2",), ("kimi-k2", "kimi-k2.5"), ("kimi_k2",)),
    ModelFamily(
        "DeepSeek-V3",
        ("deepseek-v3",),
        ("deepseek-v3", "deepseek-r1"),
        ("deepseekv3", "deepseekv31", "deepseekv32"),
    ),
    ModelFamily("MiniMax-M2", ("minimax-m2",), ("minimax-m2",), ("minimax-m2",)),
    ModelFamily("gpt-oss", ("gpt-oss",), ("gpt-oss",), ("gpt-oss",)),
    ModelFamily("Gemma 4", ("gemma4",), ("gemma4",), ("gemma4",)),
)


def family_of(model_type: str) -> ModelFamily | None:
    matches = [f for f in FAMILIES for p in f.prefixes if model_type.startswith(p)]
    return max(matches, key=lambda f: max(len(p) for p in f.prefixes), default=None)


def _rows(rows: tuple[str, ...]) -> str:
    return " and ".join(f"slime {row} (SGLang {SGLANG_OF_ROW[row]})" for row in rows)


def _nearest(name: str, known: Mapping[str, object]) -> str:
    same_case = [k for k in known if k.lower() == name.lower()]
    close = same_case or difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def _known(path: str, name: str, table: Mapping[str, tuple[str, ...]], what: str,
           own_slime: bool) -> Iterator[Finding]:  # fmt: skip
    """`name` is in `table` for every row: an error when in none, a warning when in some."""
    rows = table.get(name)
    if rows is None:
        message = f"{name!r} is not {what} of any supported slime image"
        hint = _nearest(name, table) + "names are case-sensitive; the list is in docs/api.md"
        if own_slime:  # another slime checkout may have more
            yield warn(path, message + " (runtime.slimeDir is your own)", hint)
        else:
            yield err(path, message, hint)
        return
    lacking = tuple(row for row in SGLANG_OF_ROW if row not in rows)
    if lacking:
        yield warn(
            path,
            f"{name!r} is {what} of {_rows(rows)} only; the image of {_rows(lacking)} refuses it",
            "run an image of a row that has it (images/README.md lists them)",
        )


def names_known(exp: RLExperiment) -> Iterator[Finding]:
    """`model.type` is a `scripts/models/<type>.sh` of the supported slime images, and
    `toolCallParser` and `reasoningParser` are parsers of their SGLang: an error with the
    nearest names when none has it (a warning with a `runtime.slimeDir` of your own), a
    warning when only some rows have it."""
    model = exp.spec.model
    own_slime = exp.spec.runtime.slime_dir != DEFAULT_SLIME_DIR
    yield from _known("spec.model.type", model.type, MODEL_TYPES, "a model type", own_slime)
    if model.tool_call_parser is not None:
        yield from _known("spec.model.toolCallParser", model.tool_call_parser,
                          TOOL_CALL_PARSERS, "a tool-call parser", own_slime)  # fmt: skip
    if model.reasoning_parser is not None:
        yield from _known("spec.model.reasoningParser", model.reasoning_parser,
                          REASONING_PARSERS, "a reasoning parser", own_slime)  # fmt: skip


def gateway_parsers(exp: RLExperiment) -> Iterator[Finding]:
    """With `rendererFamily: default` the gateway parses tool calls and reasoning with the
    renderers package's parsers: `toolCallParser` and `reasoningParser` name a format one of
    them reads (the gateway stops at start otherwise)."""
    model = exp.spec.model
    if model.renderer_family != DEFAULT_FAMILY:
        return  # a family parses its own format; SGLang's names serve SGLang only
    for field, name, table, theirs in (
        ("toolCallParser", model.tool_call_parser, GATEWAY_TOOL_PARSERS, GATEWAY_TOOLS),
        ("reasoningParser", model.reasoning_parser, GATEWAY_REASONING_PARSERS, GATEWAY_REASONING),
    ):
        if (
            name is None
            or name in table
            or name not in (TOOL_CALL_PARSERS if field == "toolCallParser" else REASONING_PARSERS)
        ):
            continue  # fine, or not SGLang's at all (names_known says so)
        readable = ", ".join(sorted(table))
        yield err(
            f"spec.model.{field}",
            f"with rendererFamily default the gateway parses with its own parsers "
            f"({', '.join(theirs)}), and none reads SGLang's {name!r} format",
            f"use one it reads ({readable}), or the model's renderer family",
        )


def fits_model_type(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `rendererFamily` or `toolCallParser` is written for another model family than
    `model.type` (qwen3 with a llama-3 renderer): it runs, and renders or parses the wrong
    chat format."""
    model = exp.spec.model
    family = family_of(model.type)
    if family is None:
        return
    for field, name, attribute in (
        ("rendererFamily", model.renderer_family, "renderers"),
        ("toolCallParser", model.tool_call_parser, "tools"),
    ):
        owners = [f for f in FAMILIES if name in getattr(f, attribute)]
        if name in (None, DEFAULT_FAMILY) or not owners or family in owners:
            continue
        expected: tuple[str, ...] = getattr(family, attribute)
        yield warn(
            f"spec.model.{field}",
            f"{name!r} is for {' and '.join(o.name for o in owners)} models; model.type "
            f"{model.type!r} is a {family.name} model",
            f"use {' or '.join(repr(e) for e in expected)}",
        )


# A parameter count in a model name: 3b, 0.5b, 30b, a3b (active parameters of an MoE).
_SIZE: Final = re.compile(r"a?\d+(?:\.\d+)?b")


def _sizes(name: str) -> frozenset[str]:
    return frozenset(t for t in re.split(r"[-_\s]+", name.lower()) if _SIZE.fullmatch(t))


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _named_family(name: str) -> ModelFamily | None:
    """The one family a checkpoint's name names (Qwen3.5 over Qwen3 in 'Qwen3.5-9B'), or
    None when it names none, or more than one."""
    found = {_key(p): f for f in FAMILIES for p in f.prefixes if _key(p) in _key(name)}
    kept = {f.name: f for k, f in found.items() if not any(k != o and k in o for o in found)}
    return next(iter(kept.values())) if len(kept) == 1 else None


def _checkpoint_name(path: str) -> str:
    """The last component of a directory or of a Hugging Face id."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def checkpoint_fits_type(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: the checkpoint's name (`model.path`, `model.refLoad`) names another model
    family or size than `model.type` (`Qwen2.5-7B-Instruct` with `qwen2.5-3B`). slime builds
    the model from `scripts/models/<type>.sh`; weights of another shape stop it on a GPU
    worker after the gang is scheduled. Judged by the names alone (the checkpoint is in the
    pods)."""
    model = exp.spec.model
    family, sizes = family_of(model.type), _sizes(model.type)
    for field, path in (("path", model.path), ("refLoad", model.ref_load)):
        if path is None:
            continue
        name = _checkpoint_name(path)
        theirs, their_sizes = _named_family(name), _sizes(name)
        other_family = family is not None and theirs is not None and theirs is not family
        other_size = bool(sizes and their_sizes) and not sizes & their_sizes
        if not (other_family or other_size):
            continue
        fits = [
            t for t in MODEL_TYPES
            if family_of(t) is (theirs or family) and their_sizes and _sizes(t) == their_sizes
        ]  # fmt: skip
        instead = f"model.type {fits[0]!r}" if len(fits) == 1 else "the checkpoint's model.type"
        yield warn(
            f"spec.model.{field}",
            f"{name!r} names another model than model.type {model.type!r}: slime builds the "
            f"model from scripts/models/{model.type}.sh and stops loading weights of another "
            "shape into it, on a GPU worker after the gang is scheduled",
            f"set {instead}, or point model.{field} at a {model.type} checkpoint",
        )


RULES: tuple[Rule, ...] = (names_known, gateway_parsers, fits_model_type, checkpoint_fits_type)
