"""Between watch events: training progress of running experiments, and deadlines.

One task for all experiments, every `AGENTRL_SWEEP_INTERVAL` seconds (per-object kopf timers
would put a finalizer on every experiment). A sweep reads the metrics of each Running
experiment and the events of pods creating for longer than `AGENTRL_STUCK_CREATING_SECONDS`,
asks again whose deletion a deleted RayJob's was where the experiment could not be read then,
and re-evaluates only the experiments whose status can have moved: new progress, a startup
deadline still running, or a sync that did not finish. The rest are
current (a sync follows every watch event), so a thousand steady experiments cost nothing
here. The same read judges the training episodes finished since the count's start (the
EpisodesFailing condition: `progress.episodes_window`). An unreachable or unparsable
endpoint leaves progress as it was: no error loop, no event; the next sweep tries again.
A crash-looping pod whose restarted container has run long enough is cleared here too
(`Controller.check_restarted`): a container that keeps running changes nothing more.
A pod Unschedulable for longer than `AGENTRL_STUCK_UNSCHEDULABLE_SECONDS` is found stuck
here (`Controller.check_unschedulable`): one that keeps waiting may show no new event.
After a start, a stuck pod the inherited status names and no event has shown is looked for
once (`Controller.check_inherited`): one deleted while no operator ran sends no event.
"""

from __future__ import annotations

import asyncio
import logging

from agentrl.api.constants import METRICS_PORT, Phase
from agentrl.controller import preflight, progress
from agentrl.controller.reconcile import Controller
from agentrl.controller.scrape import read_metrics
from agentrl.controller.state import Experiment
from agentrl.controller.status import parse_time

logger = logging.getLogger("agentrl.controller")


async def forever(controller: Controller) -> None:
    while True:
        await asyncio.sleep(controller.config.sweep_interval)
        try:
            await sweep(controller)
        except Exception:  # the next sweep is the retry; one bad round must not end them
            logger.exception("sweep failed")


async def sweep(controller: Controller) -> None:
    gate = asyncio.Semaphore(controller.config.scrape_concurrency)
    experiments = list(controller.experiments.values())
    running = [exp for exp in experiments if exp.phase == Phase.RUNNING]
    await asyncio.gather(*(scrape(controller, exp, gate) for exp in running))
    for exp in experiments:
        if exp.rayjob_gone is not None:  # deleted, and whose deletion not read yet
            await controller.rayjob_gone(exp)
        if exp.creating and not exp.finished:
            await controller.check_creating(exp)
        if exp.unschedulable and not exp.finished:
            await controller.check_unschedulable(exp)
        if exp.restarted:
            await controller.check_restarted(exp)
        if exp.inherited_pods:
            await controller.check_inherited(exp)
        if exp.submitter_waits:
            await controller.check_submitter(exp)
        if exp.finished or (exp.settled and not exp.clock_matters):
            continue
        await controller.sync(exp)
    controller.sweeps += 1


async def scrape(controller: Controller, exp: Experiment, gate: asyncio.Semaphore) -> None:
    """Read one experiment's metrics into its progress (the next sync writes it)."""
    if exp.metrics_service is None:
        return
    url = controller.config.metrics_url.format(
        service=exp.metrics_service, namespace=exp.key[0], port=METRICS_PORT, name=exp.key[1]
    )
    async with gate:
        text = await read_metrics(url, controller.config.scrape_timeout)
    if text is None:
        return  # unreachable: progress stays as it was
    try:
        reading = preflight.parse_preflight(text)
    except ValueError:
        reading = None
    if reading is not None and reading != exp.preflight:
        exp.preflight, exp.settled = reading, False
    try:
        raw, run_url = progress.parse_reading(text)
    except ValueError:
        logger.debug("metrics of %s/%s not parseable", *exp.key)
        return
    if run_url is not None and run_url != exp.wandb_run_url:
        exp.wandb_run_url, exp.settled = run_url, False
    if "rollout" in raw:
        rollout, at = int(raw["rollout"]), parse_time(controller.now())
        if exp.pace is None:  # first reading here: keep the step time the status shows
            known = (exp.status.get("progress") or {}).get("stepSeconds")
            exp.pace = progress.Pace(rollout, at, moved=False, step_seconds=known)
        else:
            exp.pace = progress.pace_after(exp.pace, rollout, at)
    total = (exp.spec.get("grpo") or {}).get("numRollouts")
    fields = progress.progress_fields(raw, exp.scrape, total, exp.pace)
    if fields != exp.progress:
        exp.settled = False
    exp.progress, exp.scrape = fields, raw
    exp.episodes_from, counted = progress.episodes_window(exp.episodes_from, raw)
    if counted is not None and counted != exp.episodes:
        exp.episodes, exp.settled = counted, False
