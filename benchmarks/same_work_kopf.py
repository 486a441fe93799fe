"""The same-work baseline of benchmarks/reconcile.py: agentrl's API work with the least code.

Run as `kopf run --standalone -A benchmarks/same_work_kopf.py`. For every new RLExperiment it
makes exactly the requests agentrl makes, with the same bodies: POST the runtime-config
ConfigMap, the bundle ConfigMap and the Service at once, then the RayJob, then one PATCH of
the status subresource. What it skips is everything agentrl decides: no validation, no
rendering per experiment, no status computation, no bookkeeping. The four bodies are
rendered once at import (by agentrl's renderer, for a template experiment) and kept as JSON
text; per experiment only the name, namespace and uid are substituted in that text. So it
is a lower bound for any operator doing this work in kopf, and agentrl's distance to it is
agentrl's own cost.

An event handler rather than kopf's create handler: a create handler also writes kopf's
diff-base annotation, one request more than agentrl makes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import minimal_body  # noqa: E402

from agentrl.api.validation import parse_experiment  # noqa: E402
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all  # noqa: E402

USER_AGENT = "same-work-kopf"
# Stand-ins that occur nowhere else in the rendered text.
NAME, NAMESPACE, UID = "tmplxname", "tmplyns", "tmplz-0000-uid"


def templates() -> list[tuple[str, str]]:
    """(collection path, JSON body with placeholders) of each child, in agentrl's order."""
    body = minimal_body()
    body["metadata"] = {"name": NAME, "namespace": NAMESPACE, "uid": UID}
    exp, problems = parse_experiment(body)
    if exp is None:
        raise SystemExit(f"template experiment invalid: {problems}")
    out = []
    defaults = OperatorDefaults(image=os.environ["AGENTRL_IMAGE"])  # what agentrl is given
    for obj in render_all(exp, defaults, collect_bundle_files()):
        base = "api/v1" if obj["apiVersion"] == "v1" else f"apis/{obj['apiVersion']}"
        plural = {"ConfigMap": "configmaps", "Service": "services", "RayJob": "rayjobs"}
        out.append((f"{base}/namespaces/{NAMESPACE}/{plural[obj['kind']]}", json.dumps(obj)))
    return out


TEMPLATES = templates()
with open(os.environ["KUBECONFIG"], encoding="utf-8") as fh:
    _CONFIG = yaml.safe_load(fh)
SERVER = _CONFIG["clusters"][0]["cluster"]["server"].rstrip("/")
TOKEN = _CONFIG["users"][0]["user"].get("token")
STATE: dict[str, Any] = {}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False  # as agentrl: no event per handler log line
    headers = {"User-Agent": USER_AGENT, "Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    STATE["http"] = aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=False, limit=64)
    )


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await STATE["http"].close()


async def _send(method: str, path: str, text: str, content_type: str | None = None) -> None:
    headers = {"Content-Type": content_type} if content_type else None
    async with STATE["http"].request(method, f"{SERVER}/{path}", data=text.encode(),
                                     headers=headers) as resp:  # fmt: skip
        await resp.read()
        if resp.status >= 300 and resp.status != 409:
            raise kopf.TemporaryError(f"{method} {path}: HTTP {resp.status}", delay=1)


@kopf.on.event("agentrl.io", "v1alpha1", "rlexperiments")
async def experiment(body: kopf.Body, type: str | None, **_: Any) -> None:
    if type == "DELETED" or (body.get("status") or {}).get("phase"):
        return  # deleted, or done: the status PATCH echoes back as an event
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]

    def fill(text: str) -> str:
        return text.replace(UID, uid).replace(NAMESPACE, namespace).replace(NAME, name)

    *first, last = TEMPLATES
    await asyncio.gather(*(_send("POST", fill(path), fill(text)) for path, text in first))
    await _send("POST", fill(last[0]), fill(last[1]))
    status = json.dumps({"status": {"phase": "Pending", "rayJobName": name}})
    path = f"apis/agentrl.io/v1alpha1/namespaces/{namespace}/rlexperiments/{name}/status"
    await _send("PATCH", path, status, "application/merge-patch+json")
