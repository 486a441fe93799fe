"""The operator's only Kubernetes I/O: a small aiohttp client over the REST API.

Everything else in the controller is pure or kopf glue; this module owns sockets, status
codes and retries-by-caller semantics. It speaks plain JSON objects, maps 404 to None and
409-on-create to "here is the existing object", and keeps one connection pool for the life
of the operator (kopf's own watches use kopf's client; these are our reads and writes).

With leader election, a client can be fenced: every write asks the fence first and is not
sent unless it says this replica still leads (`NotLeading`). That one check covers every
write the controller makes (children, status, events), so a replica that has lost its Lease,
or was frozen past its renew deadline, writes nothing even before it notices and exits.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from agentrl import __version__

Obj = dict[str, Any]
USER_AGENT = f"agentrl-operator/{__version__}"
# kind -> plural for every kind the operator reads or writes.
PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Pod": "pods",
    "Event": "events",
    "RayJob": "rayjobs",
    "RLExperiment": "rlexperiments",
    "CustomResourceDefinition": "customresourcedefinitions",
    "Lease": "leases",
}
MERGE_PATCH = "application/merge-patch+json"
# The cause the API server's NamespaceLifecycle admission puts on its refusal to create
# anything in a namespace that is being deleted (core/v1 NamespaceTerminatingCause).
NAMESPACE_TERMINATING = "NamespaceTerminating"


# Answers that may change if the same request is sent again: throttling (429), timeouts
# (408), conflicts (409), an expired or rotated token (401, kopf logs in again), and the
# server's own failures (5xx). Every other 4xx is the API server refusing this request.
TRANSIENT_STATUSES = frozenset({401, 408, 409, 425, 429})
DETAIL_MAX = 1000


class KubeError(Exception):
    """A Kubernetes API call failed with a status we do not handle.

    `reason` and `message` are the API server's own (its `Status` object), e.g. `Invalid`
    and `ConfigMap "x" is invalid: []: Too long: must have at most 1048576 bytes`.
    """

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        self.status = status
        self.reason = ""
        # The Status object's details.causes by type (a StatusCause's type is its "reason").
        self.causes: tuple[str, ...] = ()
        detail: Any = body
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            detail = parsed.get("message", body)
            self.reason = str(parsed.get("reason") or "")
            details = parsed.get("details")
            causes = details.get("causes") if isinstance(details, dict) else None
            if isinstance(causes, list):
                self.causes = tuple(str(c.get("reason") or "") for c in causes
                                    if isinstance(c, dict))  # fmt: skip
        self.message = str(detail)[:DETAIL_MAX]
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed later (else: refused until it changes)."""
        return self.status >= 500 or self.status in TRANSIENT_STATUSES


class NotLeading(Exception):
    """A write that was not sent: the fence says this replica does not hold the leader Lease.

    Not a KubeError on purpose: the API server never saw the request, so nothing may read it
    as the server's refusal of a child (which would be recorded on the experiment)."""


@dataclass(frozen=True)
class Credentials:
    """What kopf's login handlers found (kubeconfig, in-cluster ServiceAccount, ...)."""

    server: str
    token: str | None = None
    scheme: str | None = None
    ca_path: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    certificate_path: str | None = None
    private_key_path: str | None = None


def object_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{quote(namespace)}")
    parts.append(PLURALS[kind])
    if name:
        parts.append(quote(name))
    return "/".join(parts)


def _ssl_context(creds: Credentials) -> ssl.SSLContext | bool:
    if not creds.server.startswith("https"):
        return False
    if creds.insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=creds.ca_path, cadata=creds.ca_data)
    if creds.certificate_path:
        ctx.load_cert_chain(creds.certificate_path, creds.private_key_path)
    return ctx


class Kube:
    """Async Kubernetes client; `configure` (re)points it after each kopf login."""

    def __init__(
        self, request_timeout: float = 30.0, *, fence: Callable[[], bool] | None = None
    ) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._creds: Credentials | None = None
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._fence = fence  # None: every write may go (no leader election)

    async def configure(self, creds: Credentials) -> None:
        if creds == self._creds and self._session is not None:
            return
        await self.close()
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if creds.token:
            headers["Authorization"] = f"{creds.scheme or 'Bearer'} {creds.token}"
        connector = aiohttp.TCPConnector(ssl=_ssl_context(creds), limit=64)
        self._session = aiohttp.ClientSession(
            base_url=creds.server.rstrip("/") + "/", headers=headers, connector=connector,
            timeout=self._timeout,
        )  # fmt: skip
        self._creds = creds

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
        params: Mapping[str, str] | None = None, ok404: bool = False, parse: bool = True,
    ) -> tuple[int, Obj | None]:  # fmt: skip
        if self._session is None:
            raise RuntimeError("kube client used before login")
        if method != "GET" and self._fence is not None and not self._fence():
            raise NotLeading(f"{method} {path} not sent: this replica does not hold the "
                             "leader Lease")  # fmt: skip
        # orjson: an experiment's children are ~370 KB of JSON (the bundle ConfigMap), which
        # the standard library encodes about 7x slower.
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        async with self._session.request(
            method, path.lstrip("/"), data=data, headers=headers, params=params
        ) as resp:
            # Read even a body we will not parse: an unread one closes the pooled connection.
            raw = await resp.read()
            if resp.status < 300 and not parse:
                return resp.status, {}
            if resp.status == 404 and ok404:
                return 404, None
            if resp.status == 409 and method == "POST":
                return 409, None
            if resp.status >= 400:
                raise KubeError(resp.status, method, path, raw.decode(errors="replace"))
            return resp.status, (orjson.loads(raw) if raw else None)

    async def create(
        self, obj: Mapping[str, Any], *, want_body: bool = True
    ) -> tuple[Obj | None, Obj | None]:
        """(created, None), or (None, existing) when the name is taken (409).

        `want_body=False` skips decoding the echo of what we sent (a bundle ConfigMap is
        hundreds of KB); `created` is then `{}`.
        """
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        status, created = await self._call("POST", path, obj, parse=want_body)
        if status != 409:
            return created, None
        existing = await self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"),
                                  meta["name"])  # fmt: skip
        if existing is None:  # deleted between the POST and the GET: let the caller retry
            raise KubeError(409, "POST", path, "conflict, then not found")
        return None, existing

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> Obj | None:
        _, obj = await self._call(
            "GET", object_path(api_version, kind, namespace, name), ok404=True
        )
        return obj

    async def list_of(
        self, api_version: str, kind: str, namespace: str, labels: Mapping[str, str] | None = None
    ) -> list[Obj]:
        """Every object of `kind` in `namespace`, or those with all of `labels` (one LIST;
        the API server pages nothing unless asked to)."""
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
        params = {"labelSelector": selector} if selector else None
        _, body = await self._call("GET", object_path(api_version, kind, namespace), params=params)
        return [o for o in (body or {}).get("items") or () if isinstance(o, dict)]

    async def replace(self, obj: Mapping[str, Any]) -> Obj:
        """PUT the whole object. Its `metadata.resourceVersion` makes the write conditional:
        if the object changed since it was read, the API server answers 409 (a KubeError)."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        _, replaced = await self._call("PUT", path, obj)
        return replaced or {}

    async def patch(
        self, api_version: str, kind: str, namespace: str | None, name: str,
        patch: Mapping[str, Any], *, subresource: str | None = None,
    ) -> bool:  # fmt: skip
        """JSON merge patch; False if the object is gone. The patched object is not read."""
        path = object_path(api_version, kind, namespace, name)
        if subresource:
            path += f"/{subresource}"
        status, _ = await self._call("PATCH", path, patch, content_type=MERGE_PATCH,
                                     ok404=True, parse=False)  # fmt: skip
        return status != 404

    async def pod_events(self, namespace: str, pod: str) -> list[Obj]:
        """The core/v1 Events about one pod (what `kubectl describe pod` lists)."""
        return await self.events_of(namespace, "Pod", pod)

    async def events_of(self, namespace: str, kind: str, name: str) -> list[Obj]:
        """The core/v1 Events about one object (what `kubectl describe` lists)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        _, body = await self._call("GET", object_path("v1", "Event", namespace),
                                   params={"fieldSelector": selector})  # fmt: skip
        items = (body or {}).get("items") or ()
        # The field selector does the work; the check keeps a server that ignores it honest.
        return [e for e in items if (e.get("involvedObject") or {}).get("kind") == kind
                and (e.get("involvedObject") or {}).get("name") == name]  # fmt: skip

    async def namespace_terminating(self, event: Mapping[str, Any]) -> bool:
        """Whether the event's namespace is being deleted: a server-side dry run of creating
        `event` (nothing is stored) is refused with the NamespaceTerminating cause exactly
        while it is. It needs only `create` on events, which the operator has; reading the
        Namespace would need a grant the cluster-wide install does not have. Any other
        refusal is raised (a KubeError)."""
        path = object_path("v1", "Event", event["metadata"]["namespace"])
        try:
            await self._call("POST", path, event, params={"dryRun": "All"}, parse=False)
        except KubeError as err:
            if err.status == 403 and NAMESPACE_TERMINATING in err.causes:
                return True
            raise
        return False

    async def post_event(self, event: Mapping[str, Any]) -> None:
        """Create a core/v1 Event (what `kubectl describe` shows)."""
        path = object_path("v1", "Event", event["metadata"]["namespace"])
        await self._call("POST", path, event, parse=False)
