"""The operator's behaviour between kopf's events and the API: spec in, children and status out.

It follows docs/operator.md step by step:

1. **Watch.** Every event of an experiment, its RayJob or its pods updates the experiment's
   one state object (`state.Experiment`). A spec generation this process has not reconciled
   yet goes on the work queue (`workqueue`).
2. **Validate, create the children.** A reconcile validates the spec as `agentrl validate`
   does, renders the children and applies them (`apply`).
3. **Report.** `sync` computes the whole status purely (`status`), PATCHes the difference,
   and posts one event per transition. It is the only place status is written.

Between events, the sweep (`sweep`) reads progress and notices deadlines.

The spec is reconciled level-triggered, the way KubeRay's controllers decide: whenever the
watch shows an experiment whose `metadata.generation` this process has not handled yet
(which includes every experiment seen for the first time after a restart). kopf's
create/update/resume handlers would do the same job but keep a diff-base annotation and
progress records per object: one more write and one more watch event per change, which
generation already answers. No kopf import here: the handlers are glue, this is the
behaviour the tests drive.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import random
import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from agentrl.api import validation
from agentrl.api.constants import API_VERSION, KIND, LABEL_COMPONENT, LABEL_EXPERIMENT, Phase
from agentrl.api.images import DefaultImage
from agentrl.controller import checkpoints, children, conditions, observe, status
from agentrl.controller.apply import Retry, apply_children
from agentrl.controller.compat import InstalledKubeRay
from agentrl.controller.config import OperatorConfig, ray_dashboard_link
from agentrl.controller.kube import Kube, KubeError, NotLeading
from agentrl.controller.metrics import OperatorMetrics
from agentrl.controller.state import Experiment, Key, key_of, startup_deadline_of, uid_of
from agentrl.controller.workqueue import WorkQueue, jittered, retry_delay
from agentrl.render import Bundle, kuberay, render_all
from agentrl.render.names import metrics_service_name, metrics_service_of
from agentrl.render.objects import gateway_url
from agentrl.render.rayjob import COMPONENT_SUBMITTER

logger = logging.getLogger("agentrl.controller")


def utcnow() -> str:
    return status.format_time(datetime.now(UTC))


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        bundle_files: Mapping[str, str],
        metrics: OperatorMetrics,
        *,
        clock: Callable[[], str] = utcnow,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.kube, self.config, self.metrics, self.now, self.rand = (
            kube, config, metrics, clock, rand)  # fmt: skip
        self.defaults = config.defaults()
        # Validation judges the pods' image with the operator's own default (None: none set).
        self.default_image = DefaultImage(self.defaults.image)
        self.bundle = Bundle.of(bundle_files)  # hashed and laid out once, not per render
        self.experiments: dict[Key, Experiment] = {}
        # Pods seen before their experiment: the watches list experiments and pods at the
        # same time (every start, every new leader), so a pod may come first. Kept, by
        # experiment, until it arrives or the pod goes (garbage collection follows a deleted
        # experiment), then replayed: a running pod may not change again for days.
        self.early_pods: dict[Key, dict[str, Mapping[str, Any]]] = {}
        self.kuberay = InstalledKubeRay(kube)  # read after login (handlers), and on demand
        self.sweeps = 0  # completed sweeps (tests wait on it; never on time)
        # Spec reconciles: CPU-bound (render, encode), so a few at a time in arrival order,
        # which gets each experiment its RayJob sooner than all of them interleaved would.
        self.queue: WorkQueue[Key] = WorkQueue(self._attempt, config.reconcile_concurrency)
        self.instance = os.environ.get("HOSTNAME") or socket.gethostname()

    def start(self) -> None:
        """Start the reconcile workers (in the operator's event loop)."""
        self.queue.start()

    async def close(self) -> None:
        """Stop the workers and pending retries; the next operator resumes them (it
        reconciles every experiment it sees once)."""
        await self.queue.close()

    # ---- 1. what the watches show ----------------------------------------------------

    async def on_experiment(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        if deleted:
            self._forget(key_of(body))
            return
        exp = self.experiments.get(key_of(body))
        if exp is None or exp.uid != uid_of(body):  # new, or a new object under that name
            if exp is not None:
                self._forget(exp.key)
            exp = self.experiments[key_of(body)] = Experiment.seen(body)
            self._inherit(exp)
            for pod in self.early_pods.pop(exp.key, {}).values():
                await self.on_pod(pod)
        else:
            exp.update(body)
        self._count(exp, exp.phase)
        self._flag(exp, exp.status)
        self._link(exp, exp.status.get("dashboardURL"))
        if self._due(exp):
            self.queue.add(exp.key)

    def _inherit(self, exp: Experiment) -> None:
        """Take what the inherited status says this experiment is Stalled by as observed
        (`status.inherited`): the watches list experiments, RayJobs and pods at once, in no
        set order, and a reconcile or an event may sync before the rest is replayed. Each is
        replaced by what this process sees itself: the pod's next event (or the sweep's
        list, for a pod that went while no operator watched), the RayJob, the submitter
        Job's events."""
        found = status.inherited(exp.status)
        if found.pod is not None:
            pod, reason, said = found.pod
            exp.stuck[pod] = (reason, said)
            exp.inherited_pods.add(pod)
            if found.submitter_pod:
                self._component(exp, pod, COMPONENT_SUBMITTER)
        exp.cluster_trouble, exp.submitter_trouble = found.cluster, found.submitter
        if found.rayjob_held is not None:
            moment, held = found.rayjob_held
            since = status.parse_time(moment) - timedelta(seconds=self.config.stuck_creating_after)
            exp.rayjob_deleting = (status.format_time(since), held)

    def _due(self, exp: Experiment) -> bool:
        """Not reconciled by this process yet, or its spec changed since (a new generation).
        Status writes (our own included, while the reconcile that wrote them runs) and
        metadata edits do not move the generation, so they never are; a generation that
        failed waits for its scheduled retry, not for the next event."""
        if exp.generation in (exp.reconciled, exp.reconciling):
            return False
        retrying, for_generation = self.queue.retrying(exp.key)
        return not retrying or for_generation != exp.generation

    def _forget(self, key: Key) -> None:
        exp = self.experiments.pop(key, None)
        self.queue.cancel(key)
        if exp is not None:
            self._count(exp, None)
            self._link(exp, None)
            self._flag(exp, {})
            for pod, component in exp.pods.items():
                self.metrics.pod(exp.key, pod, component, None)

    async def on_rayjob(self, rayjob: Mapping[str, Any], deleted: bool = False) -> None:
        exp = self._owner(rayjob)
        if exp is None or not children.owned_by(rayjob, exp.uid):
            return
        if deleted:
            # Gone: nothing holds its deletion any more, whoever deleted it.
            exp.rayjob_gone, exp.rayjob_deleting = dict(rayjob.get("status") or {}), None
            await self.rayjob_gone(exp)
            return
        exp.rayjob, exp.rayjob_gone = dict(rayjob.get("status") or {}), None
        meta = rayjob.get("metadata") or {}
        since, held = meta.get("deletionTimestamp"), tuple(meta.get("finalizers") or ())
        exp.rayjob_deleting = (str(since), held) if since and held else None
        exp.rayjob_startup_deadline = startup_deadline_of(rayjob)
        await self._observed(exp)

    async def rayjob_gone(self, exp: Experiment) -> None:
        """Its RayJob was deleted: by the user (the run is over), or by the garbage collector
        with the experiment, or by the namespace controller with the whole namespace (nothing
        failed). The garbage collector deletes it once the experiment is gone or has a
        deletionTimestamp, and the RayJob's watch may show that before the experiment's does
        (separate streams, in no set order); so read the experiment, and for one still
        there, ask whether its namespace is being deleted. A read that fails decides nothing
        (the RayJob's last status stays): the sweep asks again, rather than fail a run that
        may only be being deleted."""
        last = exp.rayjob_gone
        if last is None:
            return
        body: Mapping[str, Any] | None = exp.body
        if not exp.deleting:
            try:
                body = await self.kube.get(API_VERSION, KIND, *exp.key)
                if _alive(body, exp.uid) and await self._namespace_terminating(exp):
                    # The namespace controller deletes a namespace's content one resource
                    # type at a time, in no set order: the experiment goes next.
                    logger.info("%s/%s: its RayJob was deleted with its namespace (being "
                                "deleted): not a failure of the run", *exp.key)  # fmt: skip
                    body = None
            except (KubeError, OSError, NotLeading) as err:  # the probe is a (dry-run) POST
                logger.warning("%s/%s: its RayJob was deleted and the experiment was not read "
                               "to tell by whom (%s); asking again", *exp.key, err)  # fmt: skip
                return
            if exp.rayjob_gone is not last:  # a newer RayJob event came meanwhile: it decides
                return
        exp.rayjob_gone = None
        if _alive(body, exp.uid):
            # Deleted outside the operator: its last status says whether the run had ended.
            exp.rayjob, exp.rayjob_deleted = last, True
        else:  # the experiment's own deletion; the status mirror keeps the last phase
            exp.rayjob = None
        await self._observed(exp)

    async def on_pod(self, pod: Mapping[str, Any], deleted: bool = False) -> None:
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        exp = self._owner(pod)
        if exp is None:
            key = (meta.get("namespace") or "default",
                   (meta.get("labels") or {}).get(LABEL_EXPERIMENT, ""))  # fmt: skip
            early = self.early_pods.setdefault(key, {})
            if deleted:
                early.pop(name, None)
            else:
                early[name] = pod
            if not early:
                del self.early_pods[key]
            return
        exp.inherited_pods.discard(name)  # seen: what it shows now decides
        self._component(exp, name, None if deleted else (meta.get("labels") or {}).get(
            LABEL_COMPONENT, ""))  # fmt: skip
        found = None if deleted else observe.pod_stuck(pod)
        if found is not None and found[0] == observe.UNSCHEDULABLE:
            found = self._unschedulable(exp, name, observe.unschedulable_since(pod) or "", found)
        else:
            exp.unschedulable.pop(name, None)
        creating = None if deleted or found else observe.creating_since(pod)
        if creating is None:
            exp.creating.pop(name, None)
        else:
            exp.creating[name] = creating
        old = exp.stuck.get(name)
        if found is None and creating is not None and old and old[0] in observe.EVENT_REASONS:
            found = old  # held in ContainerCreating by what its events said (the sweep)
        exp.restarted.pop(name, None)
        if found is None and not deleted and old and old[0] in observe.CRASH_REASONS:
            # Running again, or ended again, between two back-offs: still the crash loop
            # until a restarted container has run long enough (the sweep clears it).
            since = observe.restarted_at(pod)
            if since is not None and not self._crash_settled(since or self.now()):
                exp.restarted[name], found = since or self.now(), old
        if old is not None and found is not None and observe.same_trouble(old[0], found[0]):
            return  # the same trouble again: its first words stay (one write, one event)
        if found is None and old is None:
            return
        if found is None:
            del exp.stuck[name]
        else:
            exp.stuck[name] = found
        await self._observed(exp)

    def _component(self, exp: Experiment, pod: str, component: str | None) -> None:
        """Record a pod's component (None: the pod is gone), and move its metrics series."""
        if component != exp.pods.get(pod):
            self.metrics.pod(exp.key, pod, exp.pods.get(pod), component)
            if component is None:
                exp.pods.pop(pod, None)
            else:
                exp.pods[pod] = component

    def _unschedulable(
        self, exp: Experiment, pod: str, since: str, found: observe.Trouble
    ) -> observe.Trouble | None:
        """An Unschedulable pod's trouble once it has waited `stuck_unschedulable_after`
        since the scheduler first found no node for it; None before (kept, with the
        scheduler's latest words, for the sweep to look at again), as an autoscaler may be
        bringing a node up for it."""
        if self._unschedulable_settled(since):
            exp.unschedulable.pop(pod, None)
            return found
        if pod not in exp.unschedulable:
            logger.info("%s/%s: pod %s waits for a node (%s); Stalled if it still does %ss "
                        "after %s", *exp.key, pod, found[1],
                        f"{self.config.stuck_unschedulable_after:g}", since)  # fmt: skip
        exp.unschedulable[pod] = (since, found[1])
        return None

    def _seconds_since(self, since: str) -> float:
        """Seconds from `since` (an API server timestamp) to now."""
        return (status.parse_time(self.now()) - status.parse_time(since)).total_seconds()

    def _unschedulable_settled(self, since: str) -> bool:
        """Whether a pod Unschedulable since then has waited the bound out (a pod whose
        wait cannot be told has)."""
        try:
            waited = self._seconds_since(since)
        except (ValueError, TypeError):  # no time, or one without its zone
            return True
        return waited >= self.config.stuck_unschedulable_after

    async def check_unschedulable(self, exp: Experiment) -> None:
        """Pods Unschedulable for longer than `stuck_unschedulable_after`: no node came
        for them, so they are stuck, with the scheduler's words. A pod that keeps waiting
        may get no new event (the scheduler rewrites its condition only when its message
        changes), so only time tells."""
        for pod, (since, said) in list(exp.unschedulable.items()):
            if self._unschedulable_settled(since) and exp.unschedulable.get(pod) == (since, said):
                del exp.unschedulable[pod]
                if pod not in exp.stuck:
                    exp.stuck[pod] = (observe.UNSCHEDULABLE, said)
                    await self._observed(exp)

    async def check_creating(self, exp: Experiment) -> None:
        """Pods creating for longer than `stuck_creating_after`: their events say whether
        a volume or the sandbox holds them (a large image pull holds them too, and is fine)."""
        bound = self.config.stuck_creating_after
        for pod, since in list(exp.creating.items()):
            if pod in exp.stuck or self._seconds_since(since) < bound:
                continue
            try:
                events = await self.kube.pod_events(exp.key[0], pod)
            except (KubeError, OSError) as err:  # the next sweep asks again
                logger.info("%s/%s: events of pod %s not read (%s)", *exp.key, pod, err)
                continue
            found = observe.creating_trouble(events)
            if found is not None and exp.creating.get(pod) == since:  # still creating
                exp.stuck[pod] = found
                await self._observed(exp)

    async def check_inherited(self, exp: Experiment) -> None:
        """Stuck pods the inherited status named (`_inherit`) that no pod event has shown
        since: one deleted while no operator watched sends none, so one list of the
        experiment's pods tells. Those it lacks are gone, and their trouble with them;
        those it has are the watch's to replay. A failed list decides nothing (the next
        sweep asks again)."""
        asked = set(exp.inherited_pods)
        try:
            listed = await self.kube.list_of(
                "v1", "Pod", exp.key[0], {LABEL_EXPERIMENT: exp.key[1]}
            )
        except (KubeError, OSError) as err:
            logger.info("%s/%s: pods not listed (%s); asking again", *exp.key, err)
            return
        there = {str((pod.get("metadata") or {}).get("name")) for pod in listed}
        gone = (asked & exp.inherited_pods) - there  # one an event showed meanwhile: it decided
        exp.inherited_pods -= asked
        for pod in gone:
            logger.info("%s/%s: pod %s, stuck when this operator started, is gone", *exp.key, pod)
            exp.stuck.pop(pod, None)
            self._component(exp, pod, None)
        if gone:
            await self._observed(exp)

    def _crash_settled(self, since: str) -> bool:
        return self._seconds_since(since) >= observe.CRASH_SETTLED_SECONDS

    async def check_restarted(self, exp: Experiment) -> None:
        """Crash-looping pods whose restarted container has now run long enough: their
        crash loop is over. The pod's watch shows nothing more of a container that keeps
        running, so only time tells."""
        for pod, since in list(exp.restarted.items()):
            if self._crash_settled(since) and exp.restarted.get(pod) == since:
                del exp.restarted[pod]
                exp.stuck.pop(pod, None)
                await self._observed(exp)

    async def check_submitter(self, exp: Experiment) -> None:
        """KubeRay Running for longer than `stuck_creating_after` with no submitter pod and
        no Ray job: the submitter Job's events say whether the Job controller cannot create
        its pod (a quota, a policy). KubeRay names the Job after the RayJob, and never fails
        the RayJob for it; without this the startup deadline, an hour by default, was the
        first word."""
        running = conditions.get(exp.status, "Running") or {}
        since = running.get("lastTransitionTime")
        name = exp.status.get("rayJobName")
        if running.get("status") != "True" or not since or not name:
            return
        if self._seconds_since(str(since)) < self.config.stuck_creating_after:
            return
        try:
            events = await self.kube.events_of(exp.key[0], "Job", str(name))
        except (KubeError, OSError) as err:  # the next sweep asks again
            logger.info("%s/%s: events of Job %s not read (%s)", *exp.key, name, err)
            return
        found = observe.job_trouble(events)
        old = exp.submitter_trouble
        if found is not None and old is not None and found[0] == old[0]:
            return  # the same trouble: its first words stay (each retry names a new pod)
        if found != old and exp.submitter_waits:
            exp.submitter_trouble = found
            await self._observed(exp)

    async def _observed(self, exp: Experiment) -> None:
        """Something the status shows changed: sync now, or when the reconcile under way
        ends (its own sync reads the latest; one status write instead of two)."""
        if exp.reconciling is not None:
            exp.changed = True
            return
        await self.sync(exp)

    def _owner(self, child: Mapping[str, Any]) -> Experiment | None:
        meta = child.get("metadata") or {}
        name = (meta.get("labels") or {}).get(LABEL_EXPERIMENT, "")
        return self.experiments.get((meta.get("namespace") or "default", name))

    # ---- 2. the spec: validate, create the children ----------------------------------

    async def _attempt(self, key: Key) -> None:
        """One reconcile of the latest body, its outcome counted; failures come back later."""
        exp = self.experiments.get(key)
        if exp is None:  # deleted meanwhile
            return
        generation = exp.reconciling = exp.generation
        start, result = time.perf_counter(), "error"
        try:
            result = await self.reconcile_spec(exp)
            exp.reconciled, exp.failures = generation, 0
        except Retry as retry:
            result = "retry"
            delay = jittered(retry.delay, self.rand)
            logger.info("%s/%s: %s; retrying in %.1fs", *key, retry, delay)
            self.queue.add_after(key, delay, generation)
        except Exception as err:  # the API may fail in any way; the next attempt may not
            exp.failures += 1
            delay = retry_delay(exp.failures, self.rand)
            logger.warning("%s/%s: reconcile failed (%s: %s); retrying in %.1fs", *key,
                           type(err).__name__, err, delay)  # fmt: skip
            self.queue.add_after(key, delay, generation)
        finally:
            exp.reconciling = None
            self.metrics.reconcile_total.labels(result).inc()
            self.metrics.reconcile_seconds.observe(time.perf_counter() - start)
        if exp.changed:  # seen while it ran, maybe after its own sync
            exp.changed = False
            try:
                await self.sync(exp)
            except Exception as err:  # the sweep syncs what is not settled
                logger.info("%s/%s: status sync failed (%s); the sweep retries", *key, err)

    async def reconcile_spec(self, exp: Experiment) -> str:
        """Validate, render, create or update children, record the outcome. Returns a result."""
        known = bool(exp.status.get("rayJobName"))
        # An ended run is never created again, but an edit made after the end still reaches
        # its RayJob: KubeRay keeps reading `ttlSecondsAfterFinished` until the cluster is
        # gone, and after a deadline the Ray job trains on, on the GPUs, until then. Only a
        # new generation is read (not every finished experiment at each operator start).
        edited_after_end = known and exp.generation > (exp.status.get("observedGeneration") or 0)
        if exp.finished and not edited_after_end:
            # Its spec is history, judged when it ran: a restart under a tightened policy
            # (or a newer release's rules) does not judge it again, nor post a Warning
            # for every ended experiment a namespace keeps.
            await self.sync(exp)
            return "ok"
        parsed, problems = validation.parse_experiment(
            exp.body, self.config.policy, default_image=self.default_image
        )
        outcome = status.SpecOutcome(
            generation=exp.generation or None,
            problems=[str(p) for p in validation.errors(problems)],
            warnings=[str(p) for p in problems if p.severity == "warning"],
            rayjob_name=exp.status.get("rayJobName"),
        )
        if parsed is not None:
            exp.metrics_service = metrics_service_name(parsed)
        elif known:
            # Its RayJob and metrics Service were created from a spec accepted then (the
            # policy has since been tightened): it runs on, and its progress is still read.
            exp.metrics_service = metrics_service_of(exp.key[1])
        if parsed is None or exp.deleting:
            await self.sync(exp, outcome)
            return "invalid" if parsed is None else "ok"
        if not known and (clash := await self._checkpoint_clash(exp)) is not None:
            # Before any child: no RayJob, so no GPU, for a run that would save into
            # another's checkpoint directory.
            await self.sync(exp, dataclasses.replace(outcome, checkpoint_conflict=clash))
            logger.warning("%s/%s: %s", *exp.key, clash)
            return "conflict"
        kids = render_all(parsed, self.defaults, self.bundle)
        check = functools.partial(self.kuberay.losses, defaulted=kuberay.defaulted(parsed.spec))
        # A restart (or a newer release) reconciles every experiment once: a generation
        # already applied gets no lifecycle patch and no new immutable-field verdict from
        # what only the renderer or its defaults changed.
        again = status.applied(exp.status, exp.generation)
        applied = await apply_children(self.kube, exp.uid, kids, parsed.spec, known=known,
                                       check=check, again=again)  # fmt: skip
        if applied.rayjob_status is not None and exp.rayjob is None:
            exp.rayjob = applied.rayjob_status  # the watch, when it has shown one, is newer
        if applied.startup_deadline is not None:
            exp.rayjob_startup_deadline = applied.startup_deadline
        if applied.rayjob_missing and not await self._namespace_terminating(exp):
            exp.rayjob_deleted = True  # deleted while no operator watched: as the watch would
        await self.sync(exp, status.SpecOutcome(
            generation=outcome.generation, warnings=outcome.warnings,
            conflict=applied.conflict, immutable=applied.immutable,
            rayjob_name=applied.rayjob_name, gateway_url=gateway_url(parsed),
            rejection=applied.rejection, incompatible=applied.incompatible,
        ))  # fmt: skip
        if applied.rejection is not None:
            logger.warning("%s/%s: %s", *exp.key, applied.rejection.message)
        return applied.result

    async def _checkpoint_clash(self, exp: Experiment) -> str | None:
        """Why this experiment may not have the checkpoint directory it names (another
        experiment of its namespace keeps it: `checkpoints`), or None. A refusal already
        recorded for this generation stands without a look."""
        if checkpoints.location(exp.spec) is None:
            return None  # nothing another experiment could share: no read
        if (refused := checkpoints.held(exp.status, exp.generation)) is not None:
            return refused
        others = await self.kube.list_of(API_VERSION, KIND, exp.key[0])
        found = checkpoints.collision(exp.body, others)
        return found.message if found is not None else None

    # ---- 3. report: the one place status is written ----------------------------------

    async def sync(self, exp: Experiment, outcome: status.SpecOutcome | None = None) -> None:
        async with exp.lock:
            exp.settled = False  # until this sync has written (or needed nothing)
            if self.experiments.get(exp.key) is not exp:  # deleted or replaced meanwhile
                return
            base, now = exp.status, self.now()
            new = status.apply_spec(base, outcome, now) if outcome else base
            found = observe.cluster_trouble(exp.rayjob)
            old = exp.cluster_trouble
            # With no RayJob seen (an operator that has just started), what it said stands.
            if exp.rayjob is not None and (found is None or old is None or found[0] != old[0]):
                exp.cluster_trouble = old = found
            if not exp.submitter_waits:  # a submitter pod, or Ray's job: that trouble is over
                exp.submitter_trouble = None
            cluster = (exp.rayjob or {}).get("rayClusterName") or base.get("rayClusterName")
            seen = status.Observed(
                rayjob=exp.rayjob,
                stuck=[(pod, r, m) for pod, (r, m) in exp.stuck.items()],
                created=exp.body["metadata"].get("creationTimestamp"),
                startup_deadline=exp.startup_deadline,
                rayjob_deleted=exp.rayjob_deleted,
                checkpoint=exp.checkpoint,
                cluster=(str(cluster or "of this experiment"), *old) if old else None,
                suspended=status.suspended_message(exp.spec),
                active_deadline=exp.active_deadline,
                submitter=exp.submitter_trouble,
                rayjob_held=self._rayjob_held(exp, now),
                submitter_pods=frozenset(
                    pod for pod, component in exp.pods.items() if component == COMPONENT_SUBMITTER
                ),
            )
            new = status.apply_observed(new, seen, now)
            new = status.apply_episodes(new, exp.episodes, exp.key[1], now)
            if new.get("phase") != Phase.RUNNING:
                # A next attempt's (or a resumed run's) head counts from 0, and its episodes
                # are judged afresh: a judgement of this one, or a count from its totals, must
                # not turn the condition True again when it runs, before a sweep forgot them.
                exp.episodes_from = exp.episodes = None
            if exp.progress is not None:
                new = status.apply_progress(new, exp.progress, now)
            if exp.preflight is not None:
                new = status.apply_preflight(new, exp.preflight, now)
            if exp.wandb_run_url is not None:
                new = {**new, "wandbRunURL": exp.wandb_run_url}
            patch = status.diff(base, new)
            if patch is None:
                exp.settled = True
                return
            # The status subresource takes the object's shape: {"status": {...}}.
            if not await self.kube.patch(
                API_VERSION, KIND, exp.key[0], exp.key[1], {"status": patch}, subresource="status"
            ):
                return  # deleted meanwhile
            exp.written, exp.settled = new, True
            self._count(exp, new.get("phase"))
            self._link(exp, new.get("dashboardURL"))
            self._flag(exp, new)
            for event in conditions.events_between(base, new):
                await self._post_event(exp, event, now)

    def _rayjob_held(self, exp: Experiment, now: str) -> tuple[str, tuple[str, ...]] | None:
        """(when the wait became too long, finalizers) once its RayJob's deletion has waited
        on finalizers for `stuck_creating_after` (KubeRay removes its own within seconds
        while it runs); None before, or when nothing holds it."""
        if exp.rayjob_deleting is None:
            return None
        since, held = exp.rayjob_deleting
        late = status.parse_time(since) + timedelta(seconds=self.config.stuck_creating_after)
        return (status.format_time(late), held) if status.parse_time(now) >= late else None

    def _link(self, exp: Experiment, address: Any) -> None:
        """agentrl_experiment_info{ray_dashboard_url}, moved when KubeRay reports a new
        address: the link users open (AGENTRL_RAY_DASHBOARD_URL), made from it."""
        url = None
        if isinstance(address, str) and address:
            url = ray_dashboard_link(self.config.ray_dashboard_url, exp.key, address,
                                     exp.status.get("rayClusterName"))  # fmt: skip
        if url != exp.linked:
            self.metrics.link(exp.key, exp.linked, url)
            exp.linked = url

    def _flag(self, exp: Experiment, st: Mapping[str, Any]) -> None:
        """agentrl_experiment_condition, moved when the experiment's problems change."""
        found = conditions.problems(st)
        if found != exp.flagged:
            self.metrics.flag(exp.key, exp.flagged, found)
            exp.flagged = found

    def _count(self, exp: Experiment, phase: str | None) -> None:
        """agentrl_experiments{phase}, moved per change (a recount costs O(experiments))."""
        if phase != exp.counted:
            self.metrics.move(exp.counted, phase, exp.key)
            exp.counted = phase

    async def _namespace_terminating(self, exp: Experiment) -> bool:
        """Whether the experiment's namespace is being deleted. A transient failure to tell
        is raised (asked again at the next sweep); a refusal that says nothing about the
        namespace is taken as not (the verdict is not held back for ever)."""
        probe = self._event_object(exp, conditions.Event("Normal", "NamespaceProbe", ""),
                                   self.now())  # fmt: skip
        try:
            return await self.kube.namespace_terminating(probe)
        except KubeError as err:
            if err.transient:
                raise
            logger.warning("%s/%s: could not tell whether its namespace is being deleted (%s)",
                           *exp.key, err)  # fmt: skip
            return False

    def _event_object(self, exp: Experiment, event: conditions.Event, now: str) -> dict[str, Any]:
        namespace, name = exp.key
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": name,
                               "namespace": namespace, "uid": exp.uid},
            "type": event.type, "reason": event.reason, "message": event.message[:1024],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "agentrl-operator"},
            "reportingComponent": "agentrl.io/operator", "reportingInstance": self.instance,
        }  # fmt: skip

    async def _post_event(self, exp: Experiment, event: conditions.Event, now: str) -> None:
        namespace, name = exp.key
        try:
            await self.kube.post_event(self._event_object(exp, event, now))
        except (KubeError, OSError) as err:  # an event is a courtesy; status is the record
            logger.warning("event %s for %s/%s not posted: %s", event.reason, namespace, name,
                           err)  # fmt: skip


def _alive(body: Mapping[str, Any] | None, uid: str | None) -> bool:
    """The experiment `uid` as read: there, not replaced, and not being deleted."""
    meta = (body or {}).get("metadata") or {}
    return body is not None and uid_of(body) == uid and not meta.get("deletionTimestamp")
