"""A healthy run's metrics over time, from the bundle's real code, as promtool input series.

The rollout's `Recorder` is driven in the order slime's training loop calls the rollout
(https://github.com/THUDM/slime/blob/005bd1a07607bdeefc454434d0eef6e8685b548e/train.py: an
eval pass at rollout 0 before the first step, then generate, train, and an eval pass after
every `eval_interval`-th step, each under the id of the step it follows), its deltas are
applied to a `BundleMetrics` as the hub applies them, slime's checkpoint saves write
Megatron's tracker file (its iteration is the rollout id) that the hub reads at each scrape,
and the registry's exposition is read every scrape interval, as the PodMonitor reads the head
pod. Nothing here sets a metric by
hand: what the dashboard and the alerts see is what the code exports.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentrl.bundle.hub import apply_delta, read_checkpoint
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout.report import Recorder
from agentrl.slimecmd.checkpoint import TRACKER

SCRAPE_S = 15  # the PodMonitor's default interval
TARGET = {"namespace": "rl", "experiment": "demo", "pod": "demo-head-x1"}
EVAL_SET = "gsm8k-test"


@dataclass(frozen=True)
class Run:
    """A healthy run's pace, in seconds."""

    startup_s: int = 300  # model load, SGLang start, weight sync
    eval_s: int = 300  # one eval pass over EVAL_SET
    generate_s: int = 960  # one train rollout (generate)
    train_s: int = 240  # Megatron's step, checkpoint, weight update
    eval_interval: int = 2
    save_interval: int = 1
    steps: int = 4
    num_rollouts: int = 200  # spec.grpo.numRollouts (the run is watched before it ends)


def events(run: Run) -> Iterator[tuple[int, str, int]]:
    """(second, what, rollout id): slime's loop, an event where a rollout call returns."""
    t = run.startup_s
    for rollout_id in range(run.steps):
        if rollout_id == 0:
            t += run.eval_s
            yield t, "eval", rollout_id
        t += run.generate_s
        yield t, "train", rollout_id
        t += run.train_s
        if (rollout_id + 1) % run.save_interval == 0:
            yield t, "save", rollout_id
        if (rollout_id + 1) % run.eval_interval == 0:
            t += run.eval_s
            yield t, "eval", rollout_id


def scrapes(run: Run, until_s: int) -> list[tuple[int, dict[str, float]]]:
    """(second, {series: value}) at every scrape from the head pod's start to `until_s`."""
    with tempfile.TemporaryDirectory() as checkpoints:
        return _scrapes(run, until_s, Path(checkpoints))


def _scrapes(run: Run, until_s: int, checkpoints: Path) -> list[tuple[int, dict[str, float]]]:
    now = [0.0]  # the hub's clock: the moment each rollout call returns
    metrics = BundleMetrics(clock=lambda: now[0])
    pending = list(events(run))
    out = []
    for t in range(0, until_s + 1, SCRAPE_S):
        while pending and pending[0][0] <= t:
            when, what, rollout_id = pending.pop(0)
            now[0] = when
            rec = Recorder()
            if what == "save":  # what Megatron's save_checkpoint writes once a save is whole
                (checkpoints / TRACKER).write_text(str(rollout_id))
            elif what == "eval":
                rec.eval_set_finished(EVAL_SET, rollout_id, 0.3 + rollout_id / 100)
                rec.batch_finished("eval", rollout_id, 0.3 + rollout_id / 100)
                rec.step_seconds("eval", run.eval_s)
            else:
                rec.batch_finished(
                    "train", rollout_id, 0.2 + rollout_id / 100, total_steps=run.num_rollouts
                )
                rec.step_seconds("train", run.generate_s)
            apply_delta(metrics, rec.take())
        read_checkpoint(metrics, checkpoints)
        out.append((t, read(generate_latest(metrics.registry).decode())))
    return out


def read(text: str) -> dict[str, float]:
    series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {**sample.labels, **TARGET}
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            series[f"{sample.name}{{{inner}}}"] = sample.value
    return series


def input_series(run: Run, until_s: int) -> list[dict[str, str]]:
    """promtool's input_series (interval SCRAPE_S): `_` where a series was not exported."""
    taken = scrapes(run, until_s)
    names = sorted({name for _, series in taken for name in series})
    out = []
    for name in names:
        values = [series.get(name) for _, series in taken]
        out.append({"series": name, "values": " ".join(fmt(v) for v in values)})
    return out


def fmt(value: float | None) -> str:
    if value is None:
        return "_"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))
