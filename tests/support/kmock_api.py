"""A kmock KubernetesEmulator fit for an operator: fast, versioned, garbage-collecting.

kmock 0.8 is kopf's own in-memory API emulator, but three gaps would make our tests and the
benchmark measure kmock instead of the operator (reconcile-anchor.md):

1. Its dispatcher re-filters the whole request log on every request (quadratic). We trim the
   log to the requests still in flight and keep our own cheap, timestamped log instead; a
   request's membership in a filtered view is checked once, not by re-filtering the rest;
   and a named object is found by its key, not by scanning the store.
2. It never sets uid, creationTimestamp, generation or resourceVersion. kopf's JSON-patches
   test resourceVersion, and our operator keys everything by uid, so we assign them
   (generation moves only on spec changes, as on a real apiserver).
3. It has no garbage collector. Deleting an owner deletes its dependents here, the way the
   kube-controller-manager would, so "nothing left behind" can be asserted.

It can also answer chosen requests the way an API server refuses them (`refuse`): a Status
object with the code, reason and message a real one sends (422 Invalid, 403 Forbidden,
503 ServiceUnavailable...), for tests of how the operator takes refusals. A create sent as a
server-side dry run (`dryRun=All`) is answered and not stored, as a real one is.

    async with running_emulator() as api:      # api.url, api.objects, api.log
        api.refuse("POST", "v1/configmaps", 422, "Invalid", "too long", times=None)
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import functools
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp.web
import kmock
import yaml

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "agentrl.io/v1alpha1/rlexperiments": kmock.ResourceInfo(
        kind="RLExperiment", namespaced=True, subresources={"status"}
    ),
    "ray.io/v1/rayjobs": kmock.ResourceInfo(
        kind="RayJob", namespaced=True, subresources={"status"}
    ),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", namespaced=True),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"status"}),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False),
    "apiextensions.k8s.io/v1/customresourcedefinitions": kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False
    ),
}
VERBS = {"list", "watch", "get", "create", "patch", "update", "delete"}
WRITE_METHODS = {"POST", "PATCH", "PUT", "DELETE"}


def _filter_contains(self: kmock.Filter, item: Any) -> bool:
    """`request in view`, kmock's dispatch test, as kmock defines it for a Filter: among its
    source's requests and meeting its criteria. kmock evaluates the criteria for every
    request in flight until it meets this one (a burst of 1,000 creates makes that ~100
    per dispatch); once for this request gives the same answer (criteria are pure)."""
    if isinstance(item, kmock.Request):
        return item in self._source and bool(self.criteria(item))
    return bool(_VIEW_CONTAINS(self, item))


_VIEW_CONTAINS = kmock.View.__contains__
kmock.Filter.__contains__ = _filter_contains  # type: ignore[method-assign,assignment]


@dataclass
class Refusal:
    """Answer matching requests with an API server's error Status, `times` times (None: always)."""

    method: str
    resource: str
    code: int
    reason: str
    message: str
    name: str | None = None  # only requests about this object (None: any)
    times: int | None = None
    answered: int = 0

    def matches(self, logged: Logged) -> bool:
        return (logged.method == self.method and logged.resource == self.resource
                and self.name in (None, logged.name)
                and (self.times is None or self.answered < self.times))  # fmt: skip

    def response(self) -> aiohttp.web.Response:
        self.answered += 1
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": self.message, "reason": self.reason, "code": self.code}  # fmt: skip
        return aiohttp.web.json_response(status, status=self.code)


@dataclass(frozen=True)
class Logged:
    """One request as the emulator saw it."""

    at: float  # time.monotonic() on arrival
    method: str
    resource: str  # "v1/configmaps", "ray.io/v1/rayjobs", "" for discovery
    namespace: str | None
    name: str | None
    subresource: str | None
    agent: str  # User-Agent
    watch: bool

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS


class OperatorEmulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """KubernetesEmulator + trimmed request log + versions/uids + ownerReference GC."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.log: list[Logged] = []
        self.refusals: list[Refusal] = []
        self._inflight: set[int] = set()
        self._rv = itertools.count(1000)
        for key, info in RESOURCES.items():
            info.verbs = set(VERBS)
            self.resources[key] = info

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        self._inflight.add(id(request))
        # Only in-flight requests must stay matchable; the rest made dispatch quadratic.
        self._requests[:] = [r for r in self._requests if id(r) in self._inflight]
        self._record(request)
        try:
            refusal = next((r for r in self.refusals if r.matches(self.log[-1])), None)
            if refusal is not None:
                return refusal.response()
            if request.params.get("dryRun") == "All" and _value(request.method) == "POST":
                # A server-side dry run is admitted and validated, never stored.
                return aiohttp.web.json_response(request.data, status=201)
            self._stamp(request)
            response = await super()._handle(request)
            if _value(request.method) == "DELETE" and request.name:
                await self._collect_garbage()
            return response
        finally:
            self._inflight.discard(id(request))

    def _KubernetesEmulator__get_objs(self, request: Any, strict: bool) -> list[Any]:
        """kmock scans every stored object (comparing resources field by field) to serve a
        GET, PATCH or DELETE of one named object: quadratic in the store over a run. The
        stored key is (request.resource, namespace, name), so look it up directly; anything
        else (lists, watches, a miss) takes kmock's own scan, unchanged."""
        if strict and request.name is not None and request.resource is not None:
            key = (request.resource, request.namespace, request.name)
            if key in self._objects:
                return [self._objects._objects[key]]
        scan = kmock.KubernetesEmulator._KubernetesEmulator__get_objs  # type: ignore[attr-defined]
        return cast(list[Any], scan(self, request, strict))

    def _record(self, request: kmock.Request) -> None:
        res = request.resource
        resource = ""
        if res is not None:
            resource = "/".join(p for p in (res.group, res.version, res.plural) if p)
        self.log.append(Logged(
            at=time.monotonic(), method=_value(request.method),
            resource=resource, namespace=request.namespace,
            name=request.name or _body_name(request),
            subresource=request.subresource, agent=request.headers.get("User-Agent", ""),
            watch=request.params.get("watch") in ("true", "1"),
        ))  # fmt: skip

    def _stamp(self, request: kmock.Request) -> None:
        """Assign what a real apiserver assigns, before the object is stored."""
        if request.resource is None:
            return
        rv = str(next(self._rv))
        action = _value(request.action)
        if action == "CREATE" and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = rv
            meta.setdefault("generation", 1)
            if "generateName" in meta and "name" not in meta:
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        elif action == "UPDATE" and request.name:
            key = (request.resource, request.namespace, request.name)
            try:  # ObjectsArray has no .get()
                current = self._objects[key]
            except KeyError:
                current = None
            live = current is not None and not current.deleted
            generation = (current.get("metadata") or {}).get("generation", 1) if live else 1
            if isinstance(request.data, dict):
                meta = request.data.setdefault("metadata", {})
                meta["resourceVersion"] = rv
                if "spec" in request.data and not request.subresource:
                    meta["generation"] = generation + 1
            elif isinstance(request.data, list):
                request.data.append(
                    {"op": "replace", "path": "/metadata/resourceVersion", "value": rv}
                )

    async def _collect_garbage(self) -> None:
        """Delete every object whose owners are all gone (background propagation)."""
        while True:
            live = {(obj.get("metadata") or {}).get("uid") for obj in self._live()}
            orphans = [
                key for key, obj in self._live_items()
                if (refs := (obj.get("metadata") or {}).get("ownerReferences"))
                and not any(ref.get("uid") in live for ref in refs)
            ]  # fmt: skip
            if not orphans:
                return
            async with self._lock:
                for key in orphans:
                    raw = self._objects[key].raw
                    self._objects[key].delete()
                    await self._buses[key[0]].put({"type": "DELETED", "object": raw})

    def _live_items(self) -> list[tuple[Any, Any]]:
        return [(k, o) for k, o in self._objects.items() if not o.deleted]

    def _live(self) -> list[Any]:
        return [o for _, o in self._live_items()]

    # ---- conveniences for tests -------------------------------------------------------

    def refuse(
        self, method: str, resource: str, code: int, reason: str, message: str, *,
        name: str | None = None, times: int | None = None,
    ) -> Refusal:  # fmt: skip
        """Refuse matching requests from now on (`times` of them; None: until removed)."""
        refusal = Refusal(method, resource, code, reason, message, name, times)
        self.refusals.append(refusal)
        return refusal

    def live(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of a resource ("v1/configmaps"), optionally in one namespace."""
        out = []
        for (res, ns, _), obj in self._live_items():
            name = "/".join(p for p in (res.group, res.version, res.plural) if p)
            if name == resource and (namespace is None or ns == namespace):
                out.append(dict(obj))
        return out

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        for obj in self.live(resource, namespace):
            if obj["metadata"]["name"] == name:
                return obj
        return None


def _body_name(request: kmock.Request) -> str | None:
    """A POST names its object in the body, not in the URL."""
    data = request.data if isinstance(request.data, dict) else {}
    name = (data.get("metadata") or {}).get("name")
    return str(name) if name else None


def _value(enum: Any) -> str:
    return str(getattr(enum, "value", enum) or "").upper()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
KUBERAY_CRD = Path(__file__).resolve().parents[1] / "data" / "kuberay" / "ray.io_rayjobs.yaml"


@functools.cache
def _load_crd(path: Path) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # ~1 MB of YAML: parse it once
    crd: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    return crd


def kuberay_crd(path: Path = KUBERAY_CRD) -> dict[str, Any]:
    """A KubeRay rayjobs.ray.io CRD (the current release's unless told), a fresh copy."""
    return copy.deepcopy(_load_crd(path))


def install_kuberay_crd(api: OperatorEmulator, path: Path = KUBERAY_CRD) -> None:
    """Store KubeRay's rayjobs.ray.io CRD (the operator reads it at start-up)."""
    crd = kuberay_crd(path)
    crd["metadata"].setdefault("resourceVersion", "1")
    api.objects[CRDS, None, crd["metadata"]["name"]] = crd


@contextlib.asynccontextmanager
async def running_emulator() -> AsyncIterator[tuple[OperatorEmulator, str]]:
    """(emulator, base URL) served on 127.0.0.1, with the standard namespaces and the
    current KubeRay's RayJob CRD, as a cluster with KubeRay installed has."""
    async with OperatorEmulator() as api, kmock.Server(api) as server:
        for ns in ("default",):
            api.objects["v1/namespaces", None, ns] = {"metadata": {"name": ns}}
        install_kuberay_crd(api)
        yield api, str(server.url).rstrip("/")


def write_kubeconfig(path: Path, server: str, token: str = "kmock") -> Path:
    """A kubeconfig pointing at the emulator (kopf's login_with_kubeconfig reads it)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "kmock", "user": {"token": token}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
