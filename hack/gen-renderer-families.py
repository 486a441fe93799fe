#!/usr/bin/env python3
"""Write operator/agentrl/api/renderer_families.py from the installed `renderers` package.

The gateway builds its chat renderer with `renderers.config_from_name(spec.model.rendererFamily)`
on the head pod. The core CLI must not import `renderers` (a bundle dependency), so the names
that call accepts are generated here, from the pinned version, and checked in;
tests/api/test_api_renderer_families.py fails when the two disagree.

    .venv/bin/python hack/gen-renderer-families.py   # after changing the pin in pyproject.toml
"""

from __future__ import annotations

import sys
from pathlib import Path

import renderers
from renderers.configs import _CONFIG_BY_NAME
from renderers.parsers import REASONING_PARSERS, TOOL_PARSERS

OUT = Path(__file__).resolve().parent.parent / "operator/agentrl/api/renderer_families.py"


def render() -> str:
    names = sorted(n for n in _CONFIG_BY_NAME if n != "auto")
    body = "".join(f'    "{n}",\n' for n in names)
    return f'''"""The chat renderer families the gateway can build: generated, do not edit by hand.

`hack/gen-renderer-families.py` writes this file from the `renderers` package pinned in
pyproject.toml (the `bundle` extra), so `agentrl validate` knows the names without importing
it; a test fails when the installed package and this list disagree.
"""

from typing import Final

RENDERERS_VERSION: Final = "{renderers.__version__}"
# Resolve the family from the tokenizer's Hugging Face id (model.path must be a hub id).
AUTO: Final = "auto"
FAMILIES: Final = (
{body})
# The parsers the `default` family takes (renderers.parsers), by the gateway's own names.
TOOL_PARSERS: Final = {_tuple(sorted(TOOL_PARSERS))}
REASONING_PARSERS: Final = {_tuple(sorted(REASONING_PARSERS))}
'''


def _tuple(names: list[str]) -> str:
    """A tuple literal as ruff format writes it."""
    if len(names) == 1:
        return f'("{names[0]}",)'
    return "(\n" + "".join(f'    "{n}",\n' for n in names) + ")"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text(encoding="utf-8") == text else 1)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} (renderers {renderers.__version__})")
