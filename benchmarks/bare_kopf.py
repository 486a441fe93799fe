"""The baseline of benchmarks/reconcile.py: a bare kopf handler that only creates a ConfigMap.

Run as `kopf run --standalone -A benchmarks/bare_kopf.py` against the emulator (the URL comes
from the kubeconfig in KUBECONFIG). Same shape as reconcile-anchor.md's bare operator: one
owned ConfigMap per CR (409 = success) and `status.phase` via kopf's own patch.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import kopf
import yaml

# Read at import, before kopf's loop starts: the server kopf itself logs in to.
with open(os.environ["KUBECONFIG"], encoding="utf-8") as fh:
    SERVER = yaml.safe_load(fh)["clusters"][0]["cluster"]["server"]
SESSION: dict[str, Any] = {}


@kopf.on.startup()
async def startup(**_: Any) -> None:
    SESSION["http"] = aiohttp.ClientSession(headers={"User-Agent": "bare-kopf-handler"})


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await SESSION["http"].close()


@kopf.on.create("example.io", "v1", "exps")
async def create(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    meta = {"name": f"{body.metadata.name}-cm", "namespace": body.metadata.namespace}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"hello": "world"}, "metadata": meta}
    kopf.adopt(cm, owner=body)
    url = f"{SERVER}/api/v1/namespaces/{body.metadata.namespace}/configmaps"
    async with SESSION["http"].post(url, json=cm) as resp:
        if resp.status not in (200, 201, 409):
            raise kopf.TemporaryError(f"ConfigMap: HTTP {resp.status}", delay=1)
    patch.status["phase"] = "Ready"
