"""Kubernetes objects an experiment passes through, checked against core/v1's own schema.

`runtime.volumes`, `runtime.volumeMounts`, the tolerations and the affinity are copied into
the pod templates as written. The API server prunes unknown fields there instead of refusing
them, so `persistentVolumeClaim.claimNme` would vanish silently and the pod would wait for a
claim named "" forever. `schemas/core-v1.json` holds the core/v1 definitions these objects
use, vendored from the `kubernetes-validate` package (`hack/vendor-core-schemas.py`; a test
keeps the two equal), and this module checks a value against them: types, required and
unknown fields, int32/int64 ranges and quantities. It is a small validator of its own because
the core CLI depends on nothing but pydantic and pyyaml; the vendored schemas use only
`type`, `properties`, `additionalProperties`, `required`, `items`, `format`, `$ref` and, for
Quantity, `oneOf`.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any, Final

from agentrl.api.bounds import join
from agentrl.api.findings import Finding, err
from agentrl.api.quantity import parse_quantity

VOLUME: Final = "io.k8s.api.core.v1.Volume"
VOLUME_MOUNT: Final = "io.k8s.api.core.v1.VolumeMount"
TOLERATION: Final = "io.k8s.api.core.v1.Toleration"
AFFINITY: Final = "io.k8s.api.core.v1.Affinity"
QUANTITY: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# Findings per object: enough to fix a paste of the wrong object without flooding the output.
_MAX_FINDINGS: Final = 20


@functools.cache
def schemas() -> dict[str, Any]:
    """The vendored document: {"definitions": {...}, "kubernetesVersion": ..., ...}."""
    text = resources.files("agentrl.api").joinpath("schemas/core-v1.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def definition(name: str) -> dict[str, Any]:
    found: dict[str, Any] = schemas()["definitions"][name]
    return found


def check(value: Any, kind: str, path: str) -> list[Finding]:
    """Every way `value` breaks the core/v1 definition `kind`, at wire paths under `path`."""
    found: list[Finding] = []
    for finding in _check(value, {"$ref": kind}, path):
        found.append(finding)
        if len(found) >= _MAX_FINDINGS:
            break
    return found


def _check(value: Any, node: Mapping[str, Any], path: str) -> Iterator[Finding]:
    ref = node.get("$ref")
    if ref == QUANTITY:
        yield from _quantity(value, path)
        return
    if ref is not None:
        yield from _check(value, definition(ref), path)
        return
    types = node.get("type")
    allowed = [types] if isinstance(types, str) else list(types or [])
    if value is None:
        if allowed and "null" not in allowed:
            yield err(path, "must not be null", "remove the field or give it a value")
        return
    kind = _kind(value)
    if allowed and kind not in allowed and not (kind == "integer" and "number" in allowed):
        wanted = " or ".join(t for t in allowed if t != "null")
        yield err(path, f"must be {_article(wanted)}, not {_article(kind)}", "")
        return
    if kind == "integer" and node.get("format") in _INT_RANGES:
        low, high = _INT_RANGES[node["format"]]
        if not low <= value <= high:
            yield err(path, f"out of the {node['format']} range Kubernetes accepts", "")
    elif kind == "object":
        yield from _object(value, node, path)
    elif kind == "array" and "items" in node:
        for i, item in enumerate(value):
            yield from _check(item, node["items"], join(path, i))


def _object(value: Mapping[str, Any], node: Mapping[str, Any], path: str) -> Iterator[Finding]:
    props: Mapping[str, Any] = node.get("properties") or {}
    extra = node.get("additionalProperties", True)
    unknown = [k for k in value if k not in props] if extra is False else []
    # A misspelt required field is one mistake: its "unknown field" finding names it.
    meant = {m for k in unknown for m in difflib.get_close_matches(k, list(props), n=1)}
    for name in node.get("required") or ():
        if name not in value and name not in meant:
            yield err(join(path, name), "required field is missing", "")
    for key, item in value.items():
        if key in props:
            yield from _check(item, props[key], join(path, key))
        elif extra is False:
            yield err(join(path, key), "unknown field", _did_you_mean(key, props))
        elif isinstance(extra, Mapping):
            yield from _check(item, extra, join(path, key))


def _quantity(value: Any, path: str) -> Iterator[Finding]:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        yield err(path, "must be a quantity (e.g. 10Gi)", "")
        return
    try:
        parse_quantity(value if isinstance(value, str) else str(value))
    except ValueError as exc:
        yield err(path, str(exc), "e.g. 10Gi, 500m or 8")


def _did_you_mean(key: str, props: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(props), n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return "accepted: " + ", ".join(sorted(props))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _article(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"
