"""The operator's logic between kopf's events and the API: spec in, children and status out.

kopf handlers call into one `Controller`, which keeps what the watches showed (experiments,
their RayJobs' status, stuck pods, the last progress scrape) and owns the single place where
status is written: `sync`, which computes the whole status purely (`status`), compares it
with the last known one and PATCHes the difference, posting one event per transition.

The spec is reconciled level-triggered, the way KubeRay's controllers decide: whenever the
watch shows an experiment whose `metadata.generation` this process has not handled yet
(which includes every experiment seen for the first time after a restart). kopf's
create/update/resume handlers would do the same job but keep a diff-base annotation and
progress records per object: one more write and one more watch event per change, which
generation already answers. Reconciles run on a work queue (`workqueue`), and failed ones
come back from it after a delay.
No kopf import here: the handlers are glue, this is the behaviour the tests drive.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentrl.api import validation
from agentrl.api.constants import API_VERSION, KIND, LABEL_EXPERIMENT, METRICS_PORT, Phase
from agentrl.api.images import DefaultImage
from agentrl.controller import children, conditions, observe, status
from agentrl.controller.config import OperatorConfig
from agentrl.controller.kube import Kube, KubeError
from agentrl.controller.metrics import OperatorMetrics
from agentrl.controller.workqueue import WorkQueue
from agentrl.render import Bundle, render_all
from agentrl.render.names import metrics_service_name
from agentrl.render.objects import gateway_url

logger = logging.getLogger("agentrl.controller")
Key = tuple[str, str]  # (namespace, name)
Obj = dict[str, Any]
RAY_API = "ray.io/v1"
# Backoff of a reconcile that failed unexpectedly (API errors): 1, 2, 4 ... 60 seconds.
RETRY_FIRST_DELAY = 1.0
RETRY_MAX_DELAY = 60.0


def utcnow() -> str:
    return status.format_time(datetime.now(UTC))


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return meta.get("namespace") or "default", meta["name"]


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        bundle_files: Mapping[str, str],
        metrics: OperatorMetrics,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.kube, self.config, self.metrics, self.now = kube, config, metrics, clock
        self.defaults = config.defaults()
        # Validation judges the pods' image with the operator's own default (None: none set).
        self.default_image = DefaultImage(self.defaults.image)
        self.bundle = Bundle.of(bundle_files)  # hashed and laid out once, not per render
        self.exps: dict[Key, Obj] = {}  # last body seen (metadata, spec, status)
        self.rayjobs: dict[Key, Obj] = {}  # the experiment's RayJob .status
        self.stuck: dict[Key, dict[str, tuple[str, str]]] = {}  # pod -> (reason, message)
        self.scrapes: dict[Key, dict[str, float]] = {}  # previous raw scrape
        self.progress: dict[Key, dict[str, Any]] = {}
        self.written: dict[str, Obj] = {}  # uid -> the status we last wrote
        self.phases: dict[Key, str] = {}
        self.services: dict[Key, str] = {}  # the metrics Service of each valid experiment
        self.sweeps = 0  # completed sweeps (tests wait on it; never on time)
        # Experiments whose status is current: synced since anything about them was seen.
        self._settled: set[Key] = set()
        # Spec reconciles: CPU-bound (render, encode), so a few at a time in arrival order,
        # which gets each experiment its RayJob sooner than all of them interleaved would.
        self.queue: WorkQueue[Key] = WorkQueue(self._attempt, config.reconcile_concurrency)
        self._locks: dict[Key, asyncio.Lock] = {}
        self._handled: dict[str, int | None] = {}  # uid -> generation reconciled
        self._failures: dict[Key, int] = {}  # consecutive failed attempts (backoff)
        self.instance = os.environ.get("HOSTNAME") or socket.gethostname()

    # ---- what the watches show -------------------------------------------------------

    async def on_experiment(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """Every watch event of an experiment: remember it, queue its spec if due."""
        self.remember(body, deleted=deleted)
        if not deleted and self._due(body):
            self.queue.add(key_of(body))

    def _due(self, body: Mapping[str, Any]) -> bool:
        """Not reconciled by this process yet, or its spec changed since (a new generation).
        Status writes and metadata edits do not move the generation, so they never are; a
        generation that failed waits for its scheduled retry, not for the next event."""
        meta = body["metadata"]
        uid, generation = str(meta.get("uid")), meta.get("generation")
        if uid in self._handled and self._handled[uid] == generation:
            return False
        retrying, for_generation = self.queue.retrying(key_of(body))
        return not retrying or for_generation != generation

    def remember(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        key = key_of(body)
        if deleted:
            for cache in (self.exps, self.rayjobs, self.stuck, self.scrapes, self.progress,
                          self.services, self._failures):  # fmt: skip
                cache.pop(key, None)
            self._settled.discard(key)
            uid = str(body["metadata"].get("uid"))
            self.written.pop(uid, None)
            self._handled.pop(uid, None)
            self._locks.pop(key, None)
            self.queue.cancel(key)
            self._set_phase(key, None)
            return
        self.exps[key] = {k: body.get(k) for k in ("metadata", "spec", "status")}
        current = self._current(key)
        if current.get("phase"):
            self._set_phase(key, current["phase"])

    async def on_rayjob(self, rayjob: Mapping[str, Any], deleted: bool = False) -> None:
        meta = rayjob.get("metadata") or {}
        exp = (meta.get("labels") or {}).get(LABEL_EXPERIMENT)
        key = (meta.get("namespace") or "default", exp or "")
        body = self.exps.get(key)
        if body is None or not children.owned_by(rayjob, body["metadata"].get("uid")):
            return
        if deleted:
            self.rayjobs.pop(key, None)  # the status mirror keeps the last phase
        else:
            self.rayjobs[key] = dict(rayjob.get("status") or {})
        await self.sync(key)

    async def on_pod(self, pod: Mapping[str, Any], deleted: bool = False) -> None:
        meta = pod.get("metadata") or {}
        key = (
            meta.get("namespace") or "default",
            (meta.get("labels") or {}).get(LABEL_EXPERIMENT, ""),
        )
        if key not in self.exps:
            return
        found = None if deleted else observe.pod_stuck(pod)
        pods = self.stuck.setdefault(key, {})
        if pods.get(meta.get("name", "")) == found:
            return
        if found is None:
            pods.pop(meta.get("name", ""), None)
        else:
            pods[meta.get("name", "")] = found
        await self.sync(key)

    # ---- the spec ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the reconcile workers (in the operator's event loop)."""
        self.queue.start()

    async def close(self) -> None:
        """Stop the workers and pending retries; the next operator resumes them (it
        reconciles every experiment it sees once)."""
        await self.queue.close()

    async def _attempt(self, key: Key) -> None:
        """One reconcile of the latest body, its outcome counted; failures come back later."""
        body = self.exps.get(key)
        if body is None:  # deleted meanwhile
            return
        meta = body["metadata"]
        start, result = time.perf_counter(), "error"
        try:
            result = await self.reconcile_spec(body)
            self._handled[str(meta.get("uid"))] = meta.get("generation")
            self._failures.pop(key, None)
        except Retry as retry:
            result = "retry"
            logger.info("%s/%s: %s; retrying in %ss", *key, retry, retry.delay)
            self.queue.add_after(key, retry.delay, meta.get("generation"))
        except Exception as err:  # the API may fail in any way; the next attempt may not
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            delay = min(RETRY_MAX_DELAY, RETRY_FIRST_DELAY * 2 ** (failures - 1))
            logger.warning("%s/%s: reconcile failed (%s: %s); retrying in %ss", *key,
                           type(err).__name__, err, delay)  # fmt: skip
            self.queue.add_after(key, delay, meta.get("generation"))
        finally:
            self.metrics.reconcile_total.labels(result).inc()
            self.metrics.reconcile_seconds.observe(time.perf_counter() - start)

    async def reconcile_spec(self, body: Mapping[str, Any]) -> str:
        """Validate, render, create or update children, record the outcome. Returns a result."""
        self.remember(body)
        key, meta = key_of(body), body["metadata"]
        exp, problems = validation.parse_experiment(
            body, self.config.policy, default_image=self.default_image
        )
        outcome = status.SpecOutcome(
            generation=meta.get("generation"),
            problems=[str(p) for p in validation.errors(problems)],
            warnings=[str(p) for p in problems if p.severity == "warning"],
            rayjob_name=self._current(key).get("rayJobName"),
        )
        if exp is not None:
            self.services[key] = metrics_service_name(exp)
        if exp is None or self._finished(key):
            await self.sync(key, outcome)
            return "invalid" if exp is None else "ok"
        objs = render_all(exp, self.defaults, self.bundle)
        job = objs[-1]
        children.annotate(job, body.get("spec") or {})
        found = await self._ensure_children(key, meta.get("uid"), objs, body.get("spec") or {})
        outcome = status.SpecOutcome(
            generation=outcome.generation, warnings=outcome.warnings, conflict=found.conflict,
            immutable=found.immutable, rayjob_name=found.rayjob_name,
            gateway_url=gateway_url(exp),
        )  # fmt: skip
        await self.sync(key, outcome)
        if found.conflict:
            return "conflict"
        return "refused" if found.immutable else "ok"

    def _finished(self, key: Key) -> bool:
        st = self._current(key)
        failed = conditions.get(st, "Failed") or {}
        spec_failure = failed.get("reason") in status.SPEC_FAILURE_REASONS
        return bool(st.get("phase") in (Phase.SUCCEEDED, Phase.FAILED) and not spec_failure)

    async def _ensure_children(
        self, key: Key, uid: str | None, objs: list[Obj], spec: Mapping[str, Any]
    ) -> _Found:
        job = objs[-1]
        jname = job["metadata"]["name"]
        if self._current(key).get("rayJobName"):
            # Created before: the RayJob carries what later changes are compared against.
            existing = await self.kube.get(RAY_API, "RayJob", key[0], jname)
            if existing is not None:
                return await self._update_rayjob(key, uid, existing, job, spec)
        # ConfigMaps and Service first (the pods mount and select them), concurrently; the
        # RayJob last, so KubeRay never starts a pod whose volumes are missing.
        results = await asyncio.gather(
            *(self.kube.create(obj, want_body=False) for obj in objs[:-1])
        )
        for _, existing in results:
            if existing is not None and (problem := self._foreign(existing, key, uid)):
                return _Found(conflict=problem)
        created, existing = await self.kube.create(job)
        if existing is not None:
            if problem := self._foreign(existing, key, uid):
                return _Found(conflict=problem)
            return await self._update_rayjob(key, uid, existing, job, spec)
        self.rayjobs[key] = dict((created or {}).get("status") or {})
        return _Found(rayjob_name=jname)

    def _foreign(self, existing: Obj, key: Key, uid: str | None) -> str | None:
        """A conflict message if `existing` is not ours; Retry if a predecessor's."""
        if children.left_by_predecessor(existing, key[1], uid):
            # A deleted experiment of the same name: the garbage collector is about to
            # remove it, so this is a wait, not a conflict.
            raise Retry(f"{children.describe(existing)} belongs to a deleted experiment of "
                        "the same name; waiting for garbage collection", delay=5)  # fmt: skip
        if not children.owned_by(existing, uid):
            return children.conflict_message(existing)
        return None

    async def _update_rayjob(
        self, key: Key, uid: str | None, existing: Obj, job: Obj, spec: Mapping[str, Any]
    ) -> _Found:
        name = existing["metadata"]["name"]
        if not children.owned_by(existing, uid):
            return _Found(conflict=children.conflict_message(existing))
        self.rayjobs[key] = dict(existing.get("status") or {})
        refused = children.changed_immutable(existing, spec)
        patch = children.lifecycle_patch(existing, job)
        if patch is not None:
            await self.kube.patch(RAY_API, "RayJob", key[0], name, patch)
        return _Found(rayjob_name=name, immutable=refused)

    # ---- the one place status is written ---------------------------------------------

    def _current(self, key: Key) -> Obj:
        body = self.exps.get(key) or {}
        uid = str((body.get("metadata") or {}).get("uid"))
        return dict(self.written.get(uid) or body.get("status") or {})

    async def sync(self, key: Key, outcome: status.SpecOutcome | None = None) -> None:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            self._settled.discard(key)  # until this sync has written (or needed nothing)
            body = self.exps.get(key)
            if body is None:
                return
            base, now = self._current(key), self.now()
            new = status.apply_spec(base, outcome, now) if outcome else base
            spec, meta = body.get("spec") or {}, body["metadata"]
            seen = status.Observed(
                rayjob=self.rayjobs.get(key),
                stuck=[(pod, r, m) for pod, (r, m) in self.stuck.get(key, {}).items()],
                created=meta.get("creationTimestamp"),
                startup_deadline=spec.get("startupDeadlineSeconds"),
            )
            new = status.apply_observed(new, seen, now)
            if key in self.progress:
                new = status.apply_progress(new, self.progress[key], now)
            patch = status.diff(base, new)
            if patch is None:
                self._settled.add(key)
                return
            # The status subresource takes the object's shape: {"status": {...}}.
            if not await self.kube.patch(
                API_VERSION, KIND, key[0], key[1], {"status": patch}, subresource="status"
            ):
                return  # deleted meanwhile
            self.written[str(meta.get("uid"))] = new
            self._settled.add(key)
            self._set_phase(key, new.get("phase"))
            for event in conditions.events_between(base, new):
                await self._post_event(body, event, now)

    def _set_phase(self, key: Key, phase: str | None) -> None:
        old = self.phases.pop(key, None)
        if phase is not None:
            self.phases[key] = phase
        self.metrics.move(old, phase)  # per change: a recount would cost O(experiments)

    async def _post_event(self, body: Mapping[str, Any], event: conditions.Event, now: str) -> None:
        meta = body["metadata"]
        obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace")},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"],
                               "namespace": meta.get("namespace"), "uid": meta.get("uid")},
            "type": event.type, "reason": event.reason, "message": event.message[:1024],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "agentrl-operator"},
            "reportingComponent": "agentrl.io/operator", "reportingInstance": self.instance,
        }  # fmt: skip
        try:
            await self.kube.post_event(obj)
        except (KubeError, OSError) as err:  # an event is a courtesy; status is the record
            logger.warning("event %s for %s/%s not posted: %s", event.reason,
                           meta.get("namespace"), meta["name"], err)  # fmt: skip

    # ---- periodic: progress and deadlines ----------------------------------------------

    async def sweep(self) -> None:
        """Scrape running experiments' metrics, then re-evaluate the live experiments whose
        status may have moved: new progress, a startup deadline running, or a failed sync.
        The rest are current (a sync follows every watch event), so a thousand steady
        experiments cost nothing here."""
        gate = asyncio.Semaphore(self.config.scrape_concurrency)
        running = [k for k in list(self.exps) if self._current(k).get("phase") == Phase.RUNNING]
        await asyncio.gather(*(self._scrape(k, gate) for k in running))
        for key in list(self.exps):
            if self._finished(key) or (key in self._settled and not self._clock_matters(key)):
                continue
            await self.sync(key)
        self.sweeps += 1

    def _clock_matters(self, key: Key) -> bool:
        """Whether the status can change with time alone: a startup deadline still running."""
        spec = (self.exps.get(key) or {}).get("spec") or {}
        waiting = self._current(key).get("phase") in (Phase.PENDING, Phase.INITIALIZING)
        return waiting and spec.get("startupDeadlineSeconds") is not None

    async def _scrape(self, key: Key, gate: asyncio.Semaphore) -> None:
        body, service = self.exps.get(key), self.services.get(key)
        if body is None or service is None:
            return
        url = self.config.metrics_url.format(
            service=service, namespace=key[0], port=METRICS_PORT, name=key[1]
        )
        async with gate:
            text = await self.kube.scrape(url, self.config.scrape_timeout)
        if text is None:
            return  # unreachable: progress stays as it was; the next sweep tries again
        try:
            raw = observe.parse_progress(text)
        except ValueError:
            logger.debug("metrics of %s/%s not parseable", *key)
            return
        total = ((body.get("spec") or {}).get("grpo") or {}).get("numRollouts")
        progress = observe.progress_fields(raw, self.scrapes.get(key), total)
        if progress != self.progress.get(key):
            self._settled.discard(key)
        self.progress[key] = progress
        self.scrapes[key] = raw


class Retry(Exception):
    """Try the reconcile again after `delay` seconds (kopf: TemporaryError)."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


@dataclass(frozen=True)
class _Found:
    """What ensuring the children found: a conflict, refused immutable fields, the RayJob."""

    conflict: str | None = None
    immutable: list[str] = field(default_factory=list)
    rayjob_name: str | None = None
