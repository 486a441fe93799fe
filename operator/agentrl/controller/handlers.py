"""kopf glue: settings, login, and thin handlers that hand every event to the Controller.

Handlers register on import (kopf's model). Each one is a line or two: the behaviour lives in
`reconcile.Controller` (testable without kopf), I/O in `kube`, decisions in pure modules.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import kopf

from agentrl.api.constants import (
    ANNOTATION_PREFIX,
    GROUP,
    LABEL_EXPERIMENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    VERSION,
)
from agentrl.controller import config as config_mod
from agentrl.controller import sweep
from agentrl.controller.kube import Credentials, Kube
from agentrl.controller.metrics import OperatorMetrics
from agentrl.controller.reconcile import Controller, utcnow
from agentrl.render import collect_bundle_files

FINALIZER = f"{ANNOTATION_PREFIX}/finalizer"


class NoEssenceStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf builds an "essence" of every body on every watch event (a deep copy, status
    included) to find changes for change handlers. This operator registers none (the
    Controller compares generations; tests/controller/test_handlers.py keeps it so), so
    the essence is empty: RayJob and pod events then cost no copies of their bodies."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Only event handlers below, so kopf keeps no per-object state today. Should a change
    # handler ever be added, its bookkeeping goes to our own annotations, never to status
    # (our status schema is strict) and never under kopf's default prefix.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = NoEssenceStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Events are posted by the Controller, exactly one per transition; kopf's would repeat
    # every handler log line as an event.
    settings.posting.enabled = False
    # Reconnect watches every few minutes even if the apiserver never closes them.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.networking.request_timeout = 60
    cfg = memo.get("config") or config_mod.load(os.environ)
    metrics = memo.get("metrics") or OperatorMetrics()
    clock = memo.get("clock") or utcnow  # tests pass a fake clock for deadlines
    # With leader election, every write asks the Lease first (agentrl.controller.leader).
    kube = Kube(fence=memo.get("fence"))
    memo.controller = Controller(kube, cfg, collect_bundle_files(), metrics, clock=clock)
    memo.controller.start()
    memo.sweeper = asyncio.create_task(sweep.forever(memo.controller))


@kopf.on.login()
async def login(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> Any:
    """In-cluster ServiceAccount first, then a kubeconfig; our client follows the same one."""
    info = connection(settings)
    await memo.controller.kube.configure(credentials(info))
    # Which KubeRay is installed: read once the client can (a failure is logged and retried
    # by the first reconcile that needs it).
    await memo.controller.kuberay.read()
    return info


def connection(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo:
    """kopf's own login: the in-cluster ServiceAccount, else a kubeconfig (the leader
    election's client logs in the same way before kopf runs)."""
    settings = settings or kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings) or (
        kopf.login_with_kubeconfig(settings=settings)
    )
    if info is None:
        raise kopf.LoginError("no in-cluster ServiceAccount token and no usable kubeconfig")
    return info


def credentials(info: kopf.ConnectionInfo) -> Credentials:
    return Credentials(server=info.server, token=info.token, scheme=info.scheme,
                       ca_path=_str(info.ca_path), ca_data=_str(info.ca_data),
                       insecure=bool(info.insecure), certificate_path=_str(info.certificate_path),
                       private_key_path=_str(info.private_key_path))  # fmt: skip


def _str(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    sweeper = memo.get("sweeper")
    if sweeper is not None:
        sweeper.cancel()
    await memo.controller.close()
    await memo.controller.kube.close()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def experiment_event(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    """The spec's only entry: the Controller reconciles when the generation is new to it."""
    await memo.controller.on_experiment(body, deleted=type == "DELETED")


@kopf.on.event("ray.io", "v1", "rayjobs", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def rayjob_event(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    await memo.controller.on_rayjob(body, deleted=type == "DELETED")


@kopf.on.event("v1", "pods", labels={LABEL_EXPERIMENT: kopf.PRESENT})
async def pod_event(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    await memo.controller.on_pod(body, deleted=type == "DELETED")
