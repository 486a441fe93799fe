"""Applying an experiment's rendered children: its only writes besides status and events.

Creation goes in the order the pods need: the ConfigMaps and the Service first (mounted and
selected by the pods), concurrently, then the RayJob, so KubeRay never starts a pod whose
volumes are missing. An object of that name that is already ours is success (a rerun, an
operator restart); one that is not stops the experiment with a name conflict; one left by a
deleted experiment of the same name is waited for while the garbage collector removes it.
One of ours rendered from an earlier generation (its RayJob was refused, or the operator
stopped before creating it) is brought up to date before the RayJob is created, and left as
it is when the RayJob already exists (its pods mount it).
Once the RayJob exists, only the lifecycle values the experiment changed are patched onto it.

Before the RayJob is created or patched, `check` (the installed KubeRay's CRD, see
`compat`) may find fields the API server would silently drop; then nothing is created or
patched for this generation, and the reasons come back as `incompatible`.

The API server's answers are sorted here. A refusal (a 4xx other than throttling, conflicts
and the like: `KubeError.transient`) is final for this generation and comes back as a
`Rejection` the status reports; anything transient propagates and the reconcile is retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from agentrl.api.models import RLExperimentSpec
from agentrl.controller import children, compat
from agentrl.controller.kube import Kube, KubeError
from agentrl.controller.state import startup_deadline_of
from agentrl.controller.status import FAILED_CREATE, FAILED_UPDATE, Rejection
from agentrl.render import Children

Obj = dict[str, Any]
T = TypeVar("T")
Check = Callable[[Mapping[str, Any]], Awaitable[list[str]]]
RAY_API = "ray.io/v1"
# How long to wait for the garbage collector to remove a deleted predecessor's child.
PREDECESSOR_WAIT = 5.0


class Retry(Exception):
    """Try the reconcile again after `delay` seconds (a wait, not a failure)."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


@dataclass(frozen=True)
class Applied:
    """What applying found: the RayJob, or a conflict, refused fields, a rejection."""

    rayjob_name: str | None = None  # set once the RayJob exists and is ours
    rayjob_status: Obj | None = None  # its .status as read or created (None: not read)
    conflict: str | None = None
    immutable: Sequence[str] | None = field(default_factory=list)  # None: not judged again
    rejection: Rejection | None = None
    incompatible: Sequence[str] = field(default_factory=list)
    # The status names the RayJob and it is gone: deleted outside the operator. Nothing is
    # created: a new RayJob would be a new GPU cluster nobody asked for (the status says so).
    rayjob_missing: bool = False
    # The RayJob's spec.preRunningDeadlineSeconds, as read or patched (None: not known).
    startup_deadline: int | None = None

    @property
    def result(self) -> str:
        """The reconcile's result label (agentrl_reconcile_total)."""
        if self.conflict:
            return "conflict"
        if self.rejection:
            return "rejected"
        if self.incompatible:
            return "incompatible"
        return "refused" if self.immutable else "ok"


class _Rejected(Exception):
    def __init__(self, rejection: Rejection) -> None:
        super().__init__(rejection.message)
        self.rejection = rejection


async def _nothing_lost(_: Mapping[str, Any]) -> list[str]:
    return []


async def apply_children(
    kube: Kube, uid: str | None, kids: Children, spec: RLExperimentSpec, *, known: bool,
    check: Check = _nothing_lost, again: bool = False,
) -> Applied:  # fmt: skip
    """Create (or adopt) every child, or update the existing RayJob's lifecycle values.

    `known`: the status already names the RayJob (it was created), so it is read, never
    created again: one that is gone comes back as `rayjob_missing`. `again`: this generation
    was already applied to an existing RayJob (an operator restart or upgrade), which is then
    read and neither patched nor judged again: what a newer release renders or hashes
    differently for the same spec is no edit of the experiment.
    """
    try:
        return await _apply(kube, uid, kids, spec, known=known, check=check,
                            again=again)  # fmt: skip
    except _Rejected as refused:
        return Applied(rejection=refused.rejection)


async def _apply(
    kube: Kube, uid: str | None, kids: Children, spec: RLExperimentSpec, *, known: bool,
    check: Check, again: bool,
) -> Applied:  # fmt: skip
    job = kids.rayjob
    meta = job["metadata"]
    if known:
        read = kube.get(RAY_API, "RayJob", meta["namespace"], meta["name"])
        existing = await _call(FAILED_UPDATE, "reading", job, read)
        if existing is None:
            return Applied(rayjob_missing=True)
        return await _update(kube, uid, existing, job, spec, check=check, again=again)
    if lost := await check(job):
        return Applied(incompatible=lost)
    results = await asyncio.gather(
        *(_call(FAILED_CREATE, "creating", obj, kube.create(obj, want_body=False))
          for obj in kids.prerequisites),
        return_exceptions=True,
    )  # fmt: skip
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:  # a refusal explains more than a transient error seen at the same time
        raise next((f for f in failures if isinstance(f, _Rejected)), failures[0])
    stale: list[tuple[Obj, dict[str, Any]]] = []
    for obj, result in zip(kids.prerequisites, results, strict=True):
        _, found = cast(tuple[Obj | None, Obj | None], result)
        if found is None:
            continue
        if problem := _foreign(found, meta["name"], uid):
            return Applied(conflict=problem)
        if (patch := children.refresh_patch(found, obj)) is not None:
            stale.append((obj, patch))
    if stale:
        # Ours, but rendered for an earlier generation (its RayJob was refused, or the
        # operator stopped before creating it, and the spec changed since). A RayJob
        # created now must not mount the old runtime config; but one that exists already
        # (the operator stopped after creating it) runs with these, so they stay.
        read = kube.get(RAY_API, "RayJob", meta["namespace"], meta["name"])
        if (existing := await _call(FAILED_CREATE, "reading", job, read)) is not None:
            if problem := _foreign(existing, meta["name"], uid):
                return Applied(conflict=problem)
            return await _update(kube, uid, existing, job, spec, check=check, again=again)
        await _refresh(kube, stale)
    created, found = await _call(FAILED_CREATE, "creating", job, kube.create(job))
    if found is not None:
        if problem := _foreign(found, meta["name"], uid):
            return Applied(conflict=problem)
        return await _update(kube, uid, found, job, spec, check=check, again=again)
    return Applied(
        rayjob_name=meta["name"], rayjob_status=dict((created or {}).get("status") or {})
    )


async def _refresh(kube: Kube, stale: Sequence[tuple[Obj, dict[str, Any]]]) -> None:
    """Patch each (rendered object, patch) in place; one deleted meanwhile is waited for."""
    for obj, patch in stale:
        meta = obj["metadata"]
        write = kube.patch(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], patch)
        if not await _call(FAILED_CREATE, "updating", obj, write):
            raise Retry(f"{children.describe(obj)} was deleted while it was brought up to "
                        "date", PREDECESSOR_WAIT)  # fmt: skip


async def _call(reason: str, verb: str, what: Mapping[str, Any], request: Awaitable[T]) -> T:
    """Await one API request about `what`; a refusal becomes a rejection of this generation."""
    try:
        return await request
    except KubeError as err:
        if err.transient:
            raise
        code = f"HTTP {err.status}" + (f" {err.reason}" if err.reason else "")
        message = (f"the API server refused {verb} {children.describe(what)} ({code}): "
                   f"{err.message}")  # fmt: skip
        raise _Rejected(Rejection(reason, message)) from err


def _foreign(existing: Obj, experiment: str, uid: str | None) -> str | None:
    """A conflict message if `existing` is not ours; Retry if a predecessor's."""
    if children.left_by_predecessor(existing, experiment, uid):
        # A deleted experiment of the same name: the garbage collector is about to remove
        # it, so this is a wait, not a conflict.
        raise Retry(f"{children.describe(existing)} belongs to a deleted experiment of the "
                    "same name; waiting for garbage collection", PREDECESSOR_WAIT)  # fmt: skip
    if not children.owned_by(existing, uid):
        return children.conflict_message(existing)
    return None


async def _update(
    kube: Kube, uid: str | None, existing: Obj, job: Obj, spec: RLExperimentSpec, *,
    check: Check, again: bool = False,
) -> Applied:  # fmt: skip
    meta = existing["metadata"]
    if not children.owned_by(existing, uid):
        return Applied(conflict=children.conflict_message(existing))
    found = dict(existing.get("status") or {})
    deadline = startup_deadline_of(existing)
    if again:  # the status keeps this generation's verdict on immutable fields
        return Applied(rayjob_name=meta["name"], rayjob_status=found, immutable=None,
                       startup_deadline=deadline)  # fmt: skip
    refused = children.changed_immutable(existing, spec)
    patch = children.lifecycle_patch(existing, job)
    if patch is not None and (lost := await check(compat.patched(patch))):
        return Applied(rayjob_name=meta["name"], rayjob_status=found, immutable=refused,
                       incompatible=lost)  # fmt: skip
    rejection = None
    if patch is not None:
        try:
            write = kube.patch(RAY_API, "RayJob", meta["namespace"], meta["name"], patch)
            await _call(FAILED_UPDATE, "updating", existing, write)
            deadline = startup_deadline_of({"spec": {**(existing.get("spec") or {}),
                                                     **(patch.get("spec") or {})}})  # fmt: skip
        except _Rejected as refused_patch:  # the RayJob runs on; the status says why
            rejection = refused_patch.rejection
    return Applied(rayjob_name=meta["name"], rayjob_status=found, immutable=refused,
                   rejection=rejection, startup_deadline=deadline)  # fmt: skip
