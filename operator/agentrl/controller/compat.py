"""Whether the installed KubeRay keeps every field of the RayJob agentrl renders.

The API server drops (prunes), without a word, every field a CRD's schema does not declare.
On a KubeRay older than what agentrl renders for, `startupDeadlineSeconds` (KubeRay's
`preRunningDeadlineSeconds`) or `backoffLimit` would vanish from the RayJob and the run would
behave differently from its spec: no startup deadline, no retries. So the operator reads the
installed `rayjobs.ray.io` (one GET of that one object; the chart grants exactly that) and,
before creating a generation's RayJob or patching its lifecycle values, asks
`agentrl.render.kuberay.pruned_fields` what that CRD would drop.

Decision: a field the CRD would drop is a loss unless the RayJob carries it at the value its
absence means to KubeRay anyway (`backoffLimit: 0`, `suspend: false`,
`ttlSecondsAfterFinished: 0`: Go zero values, so dropping them changes nothing), or carries
agentrl's default for a field the spec left unset (`preRunningDeadlineSeconds` from the
default startup deadline: the operator still reports the deadline itself). A loss
stops that generation before anything is created (or, for a running RayJob, before the
patch): a run that silently differs from its spec is worse than one that does not start.
The experiment gets `KubeRayIncompatible` with `explain_pruned`'s messages (the field and
the KubeRay release it needs) and one event. Before refusing, the CRD is read again, so an
upgraded KubeRay is seen without restarting the operator.

When the CRD cannot be read (RBAC, a transient error) nothing is refused: the check is a
guard, not a gate the operator's own permissions could close. Transient errors of the GET
are retried with stamina (jittered backoff), a few times.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import aiohttp
import stamina

from agentrl.controller.kube import Kube, KubeError
from agentrl.render import kuberay

logger = logging.getLogger("agentrl.controller")
RAYJOB_CRD = "rayjobs.ray.io"
CRD_API = "apiextensions.k8s.io/v1"
# RayJob fields whose absence KubeRay reads as this value (Go zero values of its API types).
ABSENT_MEANS: Mapping[str, Any] = {
    "spec.backoffLimit": 0,
    "spec.suspend": False,
    "spec.ttlSecondsAfterFinished": 0,
}
# After a read failed on a transient error, how long before a reconcile tries again.
REREAD_AFTER = 60.0


def losses(
    rayjob: Mapping[str, Any], crd: Mapping[str, Any] | None, defaulted: Collection[str] = ()
) -> list[str]:
    """Why `rayjob` cannot be created as rendered on a KubeRay whose CRD is `crd` (None: not
    installed); [] when nothing it relies on would be dropped. `defaulted`: paths rendered
    from agentrl's defaults, not from the spec (`kuberay.defaulted`)."""
    if crd is None:
        return [f"KubeRay is not installed: the {RAYJOB_CRD} CRD was not found; install "
                f"KubeRay >= {kuberay.KUBERAY_MIN_VERSION}"]  # fmt: skip
    try:
        paths = kuberay.pruned_fields(rayjob, crd)
    except ValueError as err:  # the CRD does not serve ray.io/v1 at all
        return [str(err)]
    lost = [p for p in paths if p not in defaulted and not _harmless(rayjob, p)]
    return list(kuberay.explain_pruned(lost)) if lost else []


def _harmless(rayjob: Mapping[str, Any], path: str) -> bool:
    if path not in ABSENT_MEANS:
        return False
    node: Any = rayjob
    for key in path.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return bool(node == ABSENT_MEANS[path] and type(node) is type(ABSENT_MEANS[path]))


def patched(patch: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a RayJob merge patch the CRD must declare, shaped as a RayJob (removals,
    `None` values, need no field)."""
    spec = {k: v for k, v in (patch.get("spec") or {}).items() if v is not None}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {}, "spec": spec}


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, KubeError):
        return exc.transient
    return isinstance(exc, aiohttp.ClientError | TimeoutError | OSError)


class InstalledKubeRay:
    """The installed rayjobs.ray.io, read at start-up and again before any refusal."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        self.crd: dict[str, Any] | None = None
        self.known = False  # read successfully (found, or found missing)
        self._failed_at: float | None = None
        self._forbidden = False

    async def read(self) -> None:
        """GET the CRD; on failure keep what was known (or stay unknown) and log why."""
        if self._forbidden:
            return
        try:
            async for attempt in stamina.retry_context(on=_transient, attempts=4, timeout=20):
                with attempt:
                    self.crd = await self.kube.get(CRD_API, "CustomResourceDefinition", None,
                                                   RAYJOB_CRD)  # fmt: skip
            self.known, self._failed_at = True, None
        except KubeError as err:
            if err.status in (401, 403):
                self._forbidden = True
                logger.warning("cannot read the %s CRD (%s): the KubeRay version check is off; "
                               "grant get on it (the chart does)", RAYJOB_CRD, err)  # fmt: skip
            else:
                self._failed_at = self.clock()
                logger.warning("reading the %s CRD failed (%s); trying again later",
                               RAYJOB_CRD, err)  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            self._failed_at = self.clock()
            logger.warning("reading the %s CRD failed (%s); trying again later", RAYJOB_CRD, err)

    async def losses(self, rayjob: Mapping[str, Any], defaulted: Collection[str] = ()) -> list[str]:
        """`losses` against the installed CRD, read again before a refusal; [] when unknown."""
        if not self.known and self._may_retry():
            await self.read()
        if not self.known:
            return []
        found = losses(rayjob, self.crd, defaulted)
        if found:  # KubeRay may have been upgraded since the last read
            await self.read()
            found = losses(rayjob, self.crd, defaulted)
        return found

    def _may_retry(self) -> bool:
        return self._failed_at is None or self.clock() - self._failed_at >= REREAD_AFTER
