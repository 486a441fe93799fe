"""Limits on the shape of an experiment document, checked before anything parses it.

The API server bounds what it stores: a request body of at most 3 MiB, an object of at most
about 1.5 MiB (etcd's default request limit), JSON values only (strings, 64-bit numbers,
booleans, null, lists, string-keyed maps). A document outside those bounds would be refused
by the cluster, and before that it can exhaust the tools that read it: 20,000 levels of
nesting overflow recursive parsers, a YAML alias bomb of 850 bytes expands to a billion
nodes, a 5,000-digit integer stops Python's int(). So every reader (the CLI's loader, the
operator, `parse_experiment`) checks these limits first, with a walk that neither recurses
nor expands more than `MAX_NODES` values, and reports each violation at its field path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentrl.api.formats import hidden_character

# kube-apiserver's limit on a request body (apiserver.MaxRequestBodyBytes).
MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
# etcd's default --max-request-bytes: an object larger than this is never stored.
MAX_OBJECT_BYTES: Final = 1536 * 1024
# The deepest field of an experiment (an affinity term's matchExpressions values, or an
# ephemeral volume's claim template) is about 15 levels down.
MAX_DEPTH: Final = 64
# Values in the document once YAML aliases are expanded; an experiment holds a few hundred.
MAX_NODES: Final = 200_000
# JSON integers as the API server decodes them.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# Python refuses to convert longer digit strings (sys.int_info.default_max_str_digits).
MAX_INT_DIGITS: Final = 4300


@dataclass(frozen=True)
class Violation:
    """One bound a document breaks, at a wire path ("" for the whole document)."""

    path: str
    message: str
    hint: str


def join(path: str, key: str | int) -> str:
    """'spec.data' + 'eval' -> 'spec.data.eval'; + 0 -> 'spec.data.eval[0]'. Unprintable
    characters of a key (NUL, bidi controls) are escaped: a path is printed to terminals."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = printable(key)
    return f"{path}.{key}" if path else key


def printable(text: str) -> str:
    """`text` with every unprintable character as a Python escape ('a\\x00b')."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def check_document(doc: Any) -> list[Violation]:
    """Every bound `doc` breaks (nesting, size, value types, hidden characters), at most a
    few dozen; [] when the document can be handed to a parser.
    """
    found: list[Violation] = []
    nodes = 0
    size = 0
    # Serialized bytes per field a few levels down, to name the field that makes it too big.
    sizes: dict[str, int] = {}
    # (value, path, depth, the field its size counts for); a stack instead of recursion, so
    # depth costs no Python frames.
    stack: list[tuple[Any, str, int, str]] = [(doc, "", 1, "")]
    while stack:
        value, path, depth, bucket = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            found.append(
                Violation(
                    path,
                    f"the document holds more than {MAX_NODES:,} values (after expanding YAML "
                    "aliases)",
                    "an experiment holds a few hundred; remove the repeated anchors/aliases",
                )
            )
            return found
        if depth > MAX_DEPTH:
            found.append(
                Violation(
                    path,
                    f"nested deeper than {MAX_DEPTH} levels",
                    "no field of an RLExperiment is this deep; check the indentation",
                )
            )
            continue  # do not descend: the rest of this branch is the same mistake
        kind = type(value)
        # Exact types first: this walk runs on every reconcile of every experiment.
        if kind is str:
            cost = len(value) + 2 if value.isascii() else _string_size(value)
            if not value.isprintable() or not value.isascii():
                problem = _scalar_problem(value)
                if problem is not None:
                    found.append(Violation(path, *problem))
        elif kind is dict or (kind is not list and isinstance(value, Mapping)):
            cost = 2
            deeper = depth < _SIZE_DEPTH
            for key in reversed(list(value)):
                if type(key) is not str:
                    found.append(
                        Violation(
                            join(path, str(key)),
                            f"map key {key!r} is not a string",
                            "quote the key",
                        )
                    )
                    continue
                child = f"{path}.{key}" if path and key.isprintable() else join(path, key)
                stack.append((value[key], child, depth + 1, child if deeper else bucket))
                cost += len(key) + 3
        elif kind is list or kind is tuple:
            cost = 2
            deeper = depth < _SIZE_DEPTH
            for i in range(len(value) - 1, -1, -1):
                child = f"{path}[{i}]"
                stack.append((value[i], child, depth + 1, child if deeper else bucket))
        else:
            cost = _scalar_size(value)
            problem = _scalar_problem(value)
            if problem is not None:
                found.append(Violation(path, *problem))
        size += cost
        sizes[bucket] = sizes.get(bucket, 0) + cost
        if size > MAX_OBJECT_BYTES:
            found.append(
                Violation(
                    max(sizes, key=lambda p: (sizes[p], p)),
                    f"the object is larger than {MAX_OBJECT_BYTES // 1024} KiB; this field is "
                    "the largest part",
                    "Kubernetes (etcd) stores objects up to 1.5 MiB; move large data to a volume",
                )
            )
            return found
        if len(found) >= 50:  # enough to act on; a hostile document could list millions
            return found
    return found


# Fields this many levels down are the ones a size violation names (spec.runtime.extraArgs).
_SIZE_DEPTH = 4


def _scalar_problem(value: Any) -> tuple[str, str] | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return (
                "integer outside the 64-bit range Kubernetes stores",
                "use a smaller number",
            )
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return (f"{value} is not a finite number", "JSON (and Kubernetes) has no inf or NaN")
        return None
    if isinstance(value, str):
        hidden = hidden_character(value)
        if hidden is not None:
            return (
                f"contains a {hidden}",
                "remove it: NUL ends strings in the container runtime and bidirectional "
                "controls make text read differently from what runs",
            )
        return None
    kind = type(value).__name__
    return (
        f"a YAML {kind} is not a JSON value",
        "quote it to make it a string (YAML reads unquoted dates and !!binary as non-JSON types)",
    )


def _scalar_size(value: Any) -> int:
    if isinstance(value, str):
        return _string_size(value)
    if isinstance(value, Mapping | list | tuple):
        return 2
    # Out-of-range integers are reported, never printed (str() of 5,000 digits raises).
    if isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX:
        return len(str(value))
    return 24


def _string_size(value: str) -> int:
    # Quotes and UTF-8; escapes are ignored (a few bytes where a limit is 1.5 MiB).
    return len(value.encode("utf-8", "surrogatepass")) + 2
