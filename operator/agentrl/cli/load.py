"""Read one RLExperiment document from a file or stdin, with messages a user can act on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml


class LoadError(Exception):
    """The file cannot be read as exactly one YAML/JSON mapping."""


def load_document(path: str) -> Any:
    """The single document in `path` ('-' is stdin); raises LoadError with the reason."""
    text = _read(path)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise LoadError(f"{path}: not valid YAML: {_yaml_reason(exc)}") from None
    if not docs:
        raise LoadError(f"{path}: the file is empty")
    if len(docs) > 1:
        raise LoadError(f"{path}: holds {len(docs)} documents; put one RLExperiment per file")
    return docs[0]


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LoadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LoadError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError:
        raise LoadError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read: {exc.strerror}") from None


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)
