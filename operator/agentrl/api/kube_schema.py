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
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
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
    _check(value, {"$ref": kind}, path, found)
    return found[:_MAX_FINDINGS]


def _check(value: Any, node: Mapping[str, Any], path: str, out: list[Finding]) -> None:
    # Appends to `out` rather than yielding: it runs for every value of every pass-through
    # object on every validation, and generators cost a frame object per value.
    if len(out) >= _MAX_FINDINGS:
        return
    ref = node.get("$ref")
    if ref is not None:
        if ref == QUANTITY:
            out.extend(_quantity(value, path))
        else:
            _check(value, definition(ref), path, out)
        return
    types = node.get("type")
    allowed = (types,) if isinstance(types, str) else tuple(types or ())
    if value is None:
        if allowed and "null" not in allowed:
            out.append(err(path, "must not be null", "remove the field or give it a value"))
        return
    kind = _kind(value)
    if allowed and kind not in allowed and not (kind == "integer" and "number" in allowed):
        wanted = " or ".join(t for t in allowed if t != "null")
        out.append(err(path, f"must be {_article(wanted)}, not {_article(kind)}", ""))
        return
    if kind == "object":
        _object(value, node, path, out)
    elif kind == "array":
        items = node.get("items")
        if items is not None:
            for i, item in enumerate(value):
                _check(item, items, f"{path}[{i}]", out)
    elif kind == "integer" and node.get("format") in _INT_RANGES:
        low, high = _INT_RANGES[node["format"]]
        if not low <= value <= high:
            out.append(err(path, f"out of the {node['format']} range Kubernetes accepts", ""))


def _object(
    value: Mapping[str, Any], node: Mapping[str, Any], path: str, out: list[Finding]
) -> None:
    props: Mapping[str, Any] = node.get("properties") or {}
    extra = node.get("additionalProperties", True)
    required = node.get("required") or ()
    if extra is False and any(k not in props for k in value):
        unknown = [k for k in value if k not in props]
        # A misspelt required field is one mistake: its "unknown field" finding names it.
        meant = {m for k in unknown for m in difflib.get_close_matches(k, list(props), n=1)}
    else:
        meant = set()
    for name in required:
        if name not in value and name not in meant:
            out.append(err(join(path, name), "required field is missing", ""))
    for key, item in value.items():
        child = props.get(key)
        if child is not None:
            _check(item, child, join(path, key), out)
        elif extra is False:
            out.append(err(join(path, key), "unknown field", _did_you_mean(key, props)))
        elif isinstance(extra, Mapping):
            _check(item, extra, join(path, key), out)


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


_KINDS: Final = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object",
                 list: "array"}  # fmt: skip


def _kind(value: Any) -> str:
    exact = _KINDS.get(type(value))
    if exact is not None:
        return exact
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
