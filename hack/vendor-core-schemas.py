#!/usr/bin/env python3
"""Write operator/agentrl/api/schemas/core-v1.json from the `kubernetes-validate` package.

An experiment passes a few Kubernetes objects through to its pods (volumes, volume mounts,
tolerations, affinity). The API server prunes unknown fields inside them instead of refusing
them, so `validate` checks them against Kubernetes' own core/v1 definitions. The core CLI
stays light (pydantic and pyyaml only), so those definitions -- the closure of the four roots
below, descriptions dropped -- are vendored from kubernetes-validate's strict schemas, and
tests/api/test_api_kube_schema.py fails when the vendored file and the installed package
disagree.

    .venv/bin/python hack/vendor-core-schemas.py          # rewrite
    .venv/bin/python hack/vendor-core-schemas.py --check  # exit 1 when stale
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import kubernetes_validate

KUBERNETES_VERSION = "1.37.0"
ROOTS = (
    "io.k8s.api.core.v1.Volume",
    "io.k8s.api.core.v1.VolumeMount",
    "io.k8s.api.core.v1.Toleration",
    "io.k8s.api.core.v1.Affinity",
)
OUT = Path(__file__).resolve().parent.parent / "operator/agentrl/api/schemas/core-v1.json"


def definitions() -> dict[str, Any]:
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = base / f"v{KUBERNETES_VERSION}-local-strict" / "_definitions.json"
    return json.loads(path.read_text(encoding="utf-8"))["$defs"]  # type: ignore[no-any-return]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        return out + [r for k, v in node.items() if k != "$ref" for r in _refs(v)]
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "description" or key.startswith("x-kubernetes-"):
                continue
            if key == "properties":
                out[key] = {name: _strip(child) for name, child in value.items()}
            elif key == "$ref":
                out[key] = value.rsplit("/", 1)[-1]
            else:
                out[key] = _strip(value)
        return out
    if isinstance(node, list):
        return [_strip(item) for item in node]
    return node


def render() -> str:
    defs = definitions()
    seen: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_refs(defs[name]))
    doc = {
        "source": f"kubernetes-validate {version('kubernetes-validate')}, "
        f"v{KUBERNETES_VERSION}-local-strict (descriptions dropped)",
        "kubernetesVersion": KUBERNETES_VERSION,
        "roots": list(ROOTS),
        "definitions": {name: _strip(defs[name]) for name in sorted(seen)},
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text(encoding="utf-8") == text else 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text):,} bytes)")
