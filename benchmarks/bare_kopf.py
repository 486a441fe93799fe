"""The bare baseline of benchmarks/reconcile.py: a kopf handler that only creates a ConfigMap.

Run as `kopf run --standalone -A benchmarks/bare_kopf.py` against kmock or the local
kube-apiserver (the URL and token come from the kubeconfig in KUBECONFIG). The smallest
useful operator: one owned ConfigMap per object (409 = success) and `status.phase` through
kopf's own patch. It shows what kopf itself costs; benchmarks/same_work_kopf.py shows what
agentrl's requests cost.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import kopf
import yaml

# Read at import, before kopf's loop starts: the server kopf itself logs in to, and its token
# (the benchmark's kubeconfigs skip TLS verification: a throwaway local apiserver).
with open(os.environ["KUBECONFIG"], encoding="utf-8") as fh:
    _CONFIG = yaml.safe_load(fh)
SERVER = _CONFIG["clusters"][0]["cluster"]["server"]
TOKEN = _CONFIG["users"][0]["user"].get("token")
SESSION: dict[str, Any] = {}


@kopf.on.startup()
async def startup(**_: Any) -> None:
    headers = {"User-Agent": "bare-kopf-handler"}
    if TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    SESSION["http"] = aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=False)
    )


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
