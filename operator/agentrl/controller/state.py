"""What the operator knows about one experiment, kept in one object.

Everything the watches showed about an experiment and everything this process decided for it
lives in its `Experiment`: the last body, its RayJob's status, its stuck pods, the status last
written, the generation reconciled, the progress read so far. The controller keeps one per
live experiment, keyed by namespace/name, and drops it whole when the experiment is deleted
or a new object (a new uid) takes its name, so nothing about one object outlives it or leaks
into its successor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrl.api.constants import Phase
from agentrl.api.models import startup_deadline
from agentrl.controller import status
from agentrl.controller.preflight import Reading
from agentrl.controller.progress import Episodes, Pace
from agentrl.render.rayjob import COMPONENT_SUBMITTER

Key = tuple[str, str]  # (namespace, name)
Obj = dict[str, Any]


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return meta.get("namespace") or "default", meta["name"]


def startup_deadline_of(rayjob: Mapping[str, Any]) -> int | None:
    """A RayJob's spec.preRunningDeadlineSeconds (None: absent, or not a number)."""
    value = (rayjob.get("spec") or {}).get("preRunningDeadlineSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def uid_of(body: Mapping[str, Any]) -> str | None:
    uid = (body.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


@dataclass(eq=False)
class Experiment:
    key: Key
    uid: str | None
    body: Obj  # metadata, spec and status as last seen
    rayjob: Obj | None = None  # its RayJob's .status as last seen (None: no RayJob seen)
    # The startup deadline its RayJob carries (spec.preRunningDeadlineSeconds; None: not
    # seen, or dropped by an old KubeRay CRD): KubeRay enforces that one, whatever default
    # the operator's release would render today.
    rayjob_startup_deadline: int | None = None
    rayjob_deleted: bool = False  # gone, not by the experiment's own deletion (status.Observed)
    # Its RayJob's last status, deleted while the experiment could not be read to tell whose
    # deletion it was (the read failed): the sweep asks again (Controller.rayjob_gone).
    rayjob_gone: Obj | None = None
    # (deletionTimestamp, finalizers) while its RayJob is being deleted and finalizers (KubeRay's
    # ray.io/rayjob-finalizer) still hold it: its Ray cluster stays until the RayJob goes.
    rayjob_deleting: tuple[str, tuple[str, ...]] | None = None
    # pod -> (reason, message), in the order the pods were found stuck (the first speaks)
    stuck: dict[str, tuple[str, str]] = field(default_factory=dict)
    creating: dict[str, str] = field(default_factory=dict)  # pod -> when it began creating
    # pod -> (since, the scheduler's words) while it waits Unschedulable within the operator's
    # bound (an autoscaler may be bringing a node up); stuck once that has passed (the sweep)
    unschedulable: dict[str, tuple[str, str]] = field(default_factory=dict)
    # pod -> when a restarted container of it last started (or ended): a crash-looping pod
    # between two back-offs, kept stuck until it has run CRASH_SETTLED_SECONDS (the sweep)
    restarted: dict[str, str] = field(default_factory=dict)
    # Stuck pods this process took from the status it inherited (`status.inherited`) and has
    # not seen since: a pod deleted while no operator watched sends no event, so the sweep
    # lists the experiment's pods once to forget those that are gone (Controller.check_inherited).
    inherited_pods: set[str] = field(default_factory=set)
    # (reason, message) while KubeRay cannot create the cluster's pods, its first words kept
    # while the reason stays (each retry names a new pod)
    cluster_trouble: tuple[str, str] | None = None
    # (reason, message) while the Job controller cannot create KubeRay's submitter pod (its
    # first words kept while the reason stays)
    submitter_trouble: tuple[str, str] | None = None
    pods: dict[str, str] = field(default_factory=dict)  # pod -> component (metrics' pod map)
    written: Obj | None = None  # the status this process last wrote
    counted: str | None = None  # the phase agentrl_experiments counts it under
    linked: str | None = None  # the Ray dashboard address agentrl_experiment_info carries
    flagged: frozenset[tuple[str, str]] = frozenset()  # agentrl_experiment_condition's series
    reconciled: int | None = None  # the generation reconciled (None: not yet)
    reconciling: int | None = None  # the generation a reconcile is working on now
    changed: bool = False  # its RayJob or pods changed while that reconcile ran
    failures: int = 0  # consecutive failed reconciles, for the retry delay
    settled: bool = False  # status current: synced since anything about it was seen
    metrics_service: str | None = None  # known once the spec is valid, or its RayJob exists
    scrape: dict[str, float] | None = None  # the previous progress reading, raw
    progress: dict[str, Any] | None = None  # status.progress values from the last reading
    pace: Pace | None = None  # rollout step timing
    # The reading the count of training episodes runs from (None: none read since this
    # process started or the run last left Running), and the episodes last judged.
    episodes_from: dict[str, float] | None = None
    episodes: Episodes | None = None
    preflight: Reading | None = None  # the launcher's gang preflight result, last read
    wandb_run_url: str | None = None  # the W&B run the run's metrics last reported
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one status sync at a time

    @classmethod
    def seen(cls, body: Mapping[str, Any]) -> Experiment:
        exp = cls(key_of(body), uid_of(body), {})
        exp.update(body)
        return exp

    def update(self, body: Mapping[str, Any]) -> None:
        # A shallow copy of what the watch delivered: kopf reuses nothing of it afterwards.
        self.body = {k: body.get(k) for k in ("metadata", "spec", "status")}

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation") or 0)

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.body.get("spec") or {}

    @property
    def status(self) -> Obj:
        """The current status: what this process last wrote, else what the watch showed."""
        return dict(self.written or self.body.get("status") or {})

    @property
    def phase(self) -> str | None:
        return self.status.get("phase")

    @property
    def finished(self) -> bool:
        """Succeeded, or Failed in a way a new spec cannot clear (the run itself ended)."""
        return status.finished(self.status)

    @property
    def deleting(self) -> bool:
        """Deleted, and held by a finalizer (foreground deletion waits for the garbage
        collector to remove the children; another controller may hold it too). Setting
        deletionTimestamp moves the generation, so it is reconciled, but never with writes
        to children: whatever is created now is only collected again."""
        return bool(self.body["metadata"].get("deletionTimestamp"))

    @property
    def checkpoint(self) -> str | None:
        """spec.checkpoint.path when a new run would resume from what it holds."""
        ckpt = self.spec.get("checkpoint") or {}
        path = ckpt.get("path")
        return str(path) if path and ckpt.get("resume", True) is not False else None

    @property
    def startup_deadline(self) -> int:
        """The startup deadline in force: the RayJob's, else spec.startupDeadlineSeconds
        (its default when unset)."""
        if self.rayjob_startup_deadline is not None:
            return self.rayjob_startup_deadline
        return startup_deadline(self.spec.get("startupDeadlineSeconds"))

    @property
    def active_deadline(self) -> int | None:
        """spec.activeDeadlineSeconds (None: unset, or not a number: validation says so)."""
        value = self.spec.get("activeDeadlineSeconds")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def submitter_waits(self) -> bool:
        """KubeRay reports Running, Ray has no job, and no submitter pod exists: the Job
        controller may be unable to create it (its events say)."""
        return (self.phase == Phase.RUNNING and not (self.rayjob or {}).get("jobStatus")
                and COMPONENT_SUBMITTER not in self.pods.values())  # fmt: skip

    @property
    def clock_matters(self) -> bool:
        """Whether the status can change with time alone: the startup deadline is running
        (not Running yet, or Running while Ray has not seen the job), or a deletion of its
        RayJob waits on a finalizer."""
        if self.phase in (Phase.PENDING, Phase.INITIALIZING) or self.rayjob_deleting:
            return True
        return self.phase == Phase.RUNNING and not (self.rayjob or {}).get("jobStatus")
