"""Every second an agent ran for a train step is counted once: random workloads.

Each case runs a training job of several processes (slime's train.py restarted from the last
step's checkpoint after a step fails, and sometimes between steps) with slime's own data
source (`RolloutDataSourceWithBuffer` from the snapshot) and agentrl's real rollout, saving
and loading its rollout state, on a simulated clock, with heavy-tailed episode durations,
failing agents and a user filter that sometimes raises (the step fails), saves of the
rollout state that fail, a call interrupted (cancelled) while the batch's engines settle or
while its state is written (the write completes after the step failed), under each
straggler policy. The run's last step sometimes fails its first save (what it
drained from the carry store is counted once, by the step run again) or starts a restarted
process (it resumes and drains). A ledger around `run_one` records every episode the steps
ran: its time when it finished, or what it ran until stopped. Then:
- across the job, that time is exactly what the steps trained (each trained episode once,
  in the one step that trains it), what `agentrl_discarded_episode_seconds_total` counts
  (filtered, aborted, cut, masked, failed); the carry store is empty at the end (the
  episodes it held when the last step, slime's `num_rollout` - 1, ended never train and are
  counted as aborted). An episode in the batch of which no token trains is no trained time: a
  backfill's (a group the filter dropped, in the batch only to fill it), a carried-over one
  whose tokens `offPolicyTokens: mask` masked whole, and a failed one of a trained group
  (one stand-in slot, its loss mask 0);
- per step, the length bias's figures hold every episode the step ran once (trained, other,
  or cut), and the carried ones it trains a token of besides, none it hands back, filters
  or trains nothing of; its trained ones are exactly those a token of which trains.
Under carryOver, one saved state is made to hold a failed carried episode (the shape an
older agentrl wrote), and the job is then restarted from it three times in a row (a crash
loop: the first two restarts die before their step's state is saved): the episode's time is
counted once, by the first load, not once per load.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink

from agentrl.bundle.failures import AGENT_ERROR
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout import driver, generate_rollout, install_runtime, sampling
from agentrl.bundle.rollout.batch import RolloutContext, Ticket
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeOutcome, EpisodeSpec
from agentrl.bundle.rollout.filters import FilterError, has_reward_variance
from agentrl.bundle.rollout.resume import read, write
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.sampling import StepReport
from agentrl.bundle.rollout.types import slime_types
from agentrl.slimecmd.checkpoint import TRACKER

from .doubles import FakeGateway, StubAgent, runtime_config, simulated_clock
from .slime_upstream import data_source_module, install_filter, slime_args, write_rows

B, N, OVER, ROUNDS, STEPS = 3, 3, 6, 1, 8
REASONS = ("filtered", "aborted", "cut", "masked", "failed")


class Ledger:
    """What `run_one` ran, per step: finished episodes by session id, and the time of those
    stopped while running (cut by the policy, or cancelled with a failing step)."""

    def __init__(self, contexts: list[RolloutContext]) -> None:
        self.contexts = contexts  # one per process: a step's attempt is (process, step)
        self.finished: dict[str, tuple[tuple[int, int], float]] = {}  # sid -> attempt, seconds
        self.stopped: list[tuple[tuple[int, int], float]] = []

    def wrap(self, real: Any) -> Any:
        async def run_one(
            ctx: RolloutContext,
            inp: EpisodeInput,
            spec: EpisodeSpec,
            split: str,
            ticket: Ticket | None = None,
        ) -> EpisodeOutcome:
            ticket = ticket or Ticket()
            attempt = (self.contexts.index(ctx), spec.policy_version)
            try:
                outcome: EpisodeOutcome = await real(ctx, inp, spec, split, ticket)
            except BaseException:
                now = asyncio.get_running_loop().time()
                self.stopped.append((attempt, ticket.elapsed(now)))
                raise
            self.finished[outcome.session_id] = (attempt, outcome.seconds)
            return outcome

        return run_one


class Flaky:
    """When the user's filter raises: on the calls numbered in `fail_on`, and at random;
    `dropped` holds the sessions of each group it dropped."""

    def __init__(self) -> None:
        self.rng = random.Random()
        self.calls = 0
        self.fail_on: set[int] = set()
        self.dropped: list[set[str]] = []

    def seed(self, seed: int) -> None:
        self.rng.seed(seed)
        self.fail_on = {self.rng.randrange(2, 12), self.rng.randrange(12, 30)}


@pytest.fixture
def flaky_filter(monkeypatch: pytest.MonkeyPatch) -> Flaky:
    """A user filter (slime's signature) that drops groups without reward variance and
    sometimes raises (the step fails)."""
    flaky = Flaky()

    def keep_if_varied(args: Any, samples: list[Any], **kwargs: Any) -> bool:
        flaky.calls += 1
        if flaky.calls in flaky.fail_on or flaky.rng.random() < 0.03:
            raise RuntimeError("the user's filter has a bug")
        keep = has_reward_variance([s.get_reward_value(args) for s in samples])
        if not keep:
            flaky.dropped.append({s.session_id for s in samples})
        return keep

    install_filter(monkeypatch, "accounting_filter", keep_if_varied)
    return flaky


@pytest.mark.parametrize("policy", ["wait", "abort", "carryOver"])
@pytest.mark.parametrize("seed", range(6))
def test_every_second_an_episode_ran_is_counted_once(
    policy: str,
    seed: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flaky_filter: Flaky,
) -> None:
    """Steps fail (the filter raises, or saving the rollout state at the step's end does)
    and the job restarts; episodes fail (the agent crashes); maxPolicyLag 0 (even seeds)
    throws every carried episode away when its group comes back, 1 (odd seeds) reuses it."""
    rng = random.Random(seed)
    flaky_filter.seed(seed + 1000)
    rows = [
        {
            "id": i,
            "p": rng.choice([0.0, 0.5, 0.5, 1.0]),
            "behavior": [rng.choice(["ok"] * 5 + ["error"]) for _ in range(7)],
        }
        for i in range(300)
    ]
    rows_file = write_rows(tmp_path / "rows.jsonl", rows)
    durations = random.Random(seed + 100)

    def delay(request: Any, attempt: int) -> float:
        return round(60 * durations.lognormvariate(0, 1.2), 3)

    def reward(request: Any, attempt: int) -> float:
        return float(durations.random() < request.payload["p"])

    grpo: dict[str, Any] = {
        "rolloutBatchSize": B,
        "samplesPerPrompt": N,
        "dynamicSamplingFilter": "accounting_filter.keep_if_varied",
        "maxRefillRounds": ROUNDS,
        "stragglerPolicy": policy,
        "maxPolicyLag": seed % 2,
    }
    if policy != "wait":
        grpo["overSamplingBatchSize"] = OVER
    config = runtime_config(max_concurrent=6, timeout=10**6, **grpo)
    min_valid = config.spec.grpo.effective_min_valid_samples
    contexts: list[RolloutContext] = []
    ledger = Ledger(contexts)
    monkeypatch.setattr(sampling, "run_one", ledger.wrap(sampling.run_one))
    reports: dict[tuple[int, int], StepReport] = {}
    real_record = driver.record_step

    def record_step(ctx: RolloutContext, report: StepReport) -> None:
        assert ctx.generated is not None
        reports[(contexts.index(ctx), ctx.generated)] = report
        real_record(ctx, report)

    monkeypatch.setattr(driver, "record_step", record_step)
    saves = random.Random(seed + 2000)
    failing_saves = {saves.randrange(1, 6)}
    real_save = driver.save_step
    save_calls = 0

    crash_loop = 0  # saves still to fail after a state was given a failed carried episode
    last_save_fails = seed % 3 == 0

    interrupt_at = saves.randrange(1, 8)  # the first write from this call on is interrupted
    settling: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []
    written = threading.Event()
    writing: list[int] = []

    def save_step(*args: Any) -> None:
        """The rollout state's write at the step's end: fails on a chosen call and at random
        (the disk is full), after the batch is assembled, and during a crash loop."""
        nonlocal save_calls, crash_loop, last_save_fails
        save_calls += 1
        # The run's last step fails its first save in a third of the cases: what it drained
        # from the carry store is counted by the step run again, not by both.
        last = args[-1] == STEPS - 1 and last_save_fails
        last_save_fails = False if args[-1] == STEPS - 1 else last_save_fails
        if save_calls in failing_saves or saves.random() < 0.05 or crash_loop or last:
            crash_loop = max(0, crash_loop - 1)
            raise OSError(28, "No space left on device")
        if save_calls >= interrupt_at and not written.is_set():
            writing.append(save_calls)
            # The call interrupted while the state is written: the step is cancelled (and
            # fails), and the write, on its own thread, still completes after it.
            loop, task = settling[0]
            loop.call_soon_threadsafe(task.cancel)
            time.sleep(0.2)
            try:
                real_save(*args)
            finally:
                written.set()  # a dying process's executor thread ends before it exits
            return
        real_save(*args)

    monkeypatch.setattr(driver, "save_step", save_step)
    # The call interrupted (slime's actor cancelled, the pod stopped) while the batch's
    # engines settle: after the batch is assembled, before its state is saved.
    settles = random.Random(seed + 3000)
    failing_settles = {settles.randrange(1, 6)}
    real_settle = driver.settle_engines
    settle_calls = 0

    async def settle_engines(ctx: RolloutContext, kind: str, rollout_id: int) -> None:
        nonlocal settle_calls
        task = asyncio.current_task()
        assert task is not None
        settling[:] = [(asyncio.get_running_loop(), task)]
        if kind == "Rollout":
            settle_calls += 1
            if settle_calls in failing_settles:
                task.cancel()
                await asyncio.sleep(0)
        await real_settle(ctx, kind, rollout_id)

    monkeypatch.setattr(driver, "settle_engines", settle_engines)
    metrics = BundleMetrics()  # summed over the job's processes
    gateway = FakeGateway()
    agent = StubAgent(gateway, yields=0, delay=delay, reward=reward)
    root = tmp_path / "ckpt"
    root.mkdir()
    trained: dict[tuple[int, int], list[str]] = {}  # per attempt, the sessions in its batch
    untrained: set[str] = set()  # those of them of which no token trained
    backfills = 0
    failures = save_failures = restarts = injected = interrupted = 0

    def start_process(step: int) -> tuple[SimpleNamespace, Any, RolloutRuntime]:
        """slime's train.py starting at `step`: --load set when a checkpoint exists."""
        load = str(root) if step > 0 else None
        args = slime_args(
            rows_file,
            N,
            save=str(root),
            load=load,
            num_rollout=STEPS,
            rollout_batch_size=B,
            rollout_max_response_len=64,
            rollout_temperature=1.0,
            reward_key=None,
        )
        source = data_source_module("624b824").RolloutDataSourceWithBuffer(args)
        if load is not None:
            source.load(step - 1)

        async def build() -> RolloutContext:
            contexts.append(RolloutContext(gateway, agent, asyncio.Semaphore(6)))
            return contexts[-1]

        runtime = RolloutRuntime(build, LocalSink(metrics), loop_factory=simulated_clock)
        install_runtime(runtime, config, slime_types(prefer_plain=True))
        return args, source, runtime

    step = 0
    args, source, runtime = start_process(step)
    try:
        while step < STEPS:
            dropped_before = len(flaky_filter.dropped)
            try:
                out = generate_rollout(args, step, source)
            except (FilterError, OSError, asyncio.CancelledError) as exc:  # slime's train.py
                # dies with the step: restart from the last checkpoint
                failures += isinstance(exc, FilterError)
                save_failures += isinstance(exc, OSError)
                interrupted += isinstance(exc, asyncio.CancelledError)
                if writing:  # the interrupted write ends before the process does
                    assert written.wait(10)
                    writing.clear()
                install_runtime(None)
                runtime.close()
                args, source, runtime = start_process(step)
                continue
            trained[(len(contexts) - 1, step)] = list(
                dict.fromkeys(s.session_id for g in out.samples for s in g)
            )
            dropped = set().union(*flaky_filter.dropped[dropped_before:])
            for group in out.samples:
                failed = {s.session_id for s in group if s.metadata.get("episode_error")}
                sids = {s.session_id for s in group}
                # A backfill: dropped by the filter, or before it (too few task outcomes).
                if sids & dropped or len(sids - failed) < min_valid:
                    assert not any(any(s.loss_mask) for s in group)
                    backfills += 1
                    untrained |= sids
                    continue
                # No token of it trains: a failed one's stand-in, a carried one masked whole.
                untrained |= sids - {s.session_id for s in group if any(s.loss_mask)}
            source.save(step)  # rollout_manager.save, after Megatron's checkpoint
            (root / TRACKER).write_text(str(step))
            held = read(root, step)
            forced = False
            if policy == "carryOver" and not injected and step + 1 < STEPS and held is not None:
                for key, (kept_at, outcome) in held.carry.episodes.items():
                    # What an older agentrl saved for a cut group whose finished episode had
                    # failed; the next process drops it at load, and counts its time.
                    held.carry.episodes[key] = (kept_at, replace(outcome, failure=AGENT_ERROR))
                    write(root, held)
                    injected, crash_loop, forced = 1, 2, True
                    break
            step += 1
            # A preemption between steps; in a third of the cases the last step is the
            # first of a restarted process (it resumes, and it drains the carry store).
            resumed_last = seed % 3 == 1 and step == STEPS - 1
            if step < STEPS and (rng.random() < 0.2 or forced or resumed_last):
                restarts += 1
                install_runtime(None)
                runtime.close()
                args, source, runtime = start_process(step)
    finally:
        install_runtime(None)
        runtime.close()

    def counter(reason: str) -> float:
        value = metrics.registry.get_sample_value(
            "agentrl_discarded_episode_seconds_total", {"reason": reason}
        )
        return value or 0.0

    # Each trained episode trains once, in one step.
    trained_sids = [sid for sids in trained.values() for sid in sids]
    assert len(trained_sids) == len(set(trained_sids))
    trained_seconds = sum(ledger.finished[sid][1] for sid in trained_sids if sid not in untrained)
    pending = sum(o.seconds for _, o in contexts[-1].carry.episodes.values())
    ran = sum(s for _, s in ledger.finished.values()) + sum(s for _, s in ledger.stopped)
    counted = {reason: counter(reason) for reason in REASONS}
    assert trained_seconds + sum(counted.values()) == pytest.approx(ran), (
        f"ran {ran:.3f} s; trained {trained_seconds:.3f}, {counted}, carried {pending:.3f}, "
        f"{failures} failed step(s), {save_failures} failed save(s), {restarts} restart(s)"
    )

    assert pending == 0  # the run's last step threw away what it held, and counted it

    # Per step: the length bias's figures.
    assert set(reports) == set(trained)
    for n, report in reports.items():
        trains = [sid for sid in trained[n] if sid not in untrained]
        assert sorted(report.trained_seconds) == pytest.approx(
            sorted(ledger.finished[sid][1] for sid in trains)
        ), f"step {n}"
        ran_here = [s for at, s in ledger.finished.values() if at == n]
        stopped_here = [s for at, s in ledger.stopped if at == n]
        carried_in = [ledger.finished[sid][1] for sid in trains if ledger.finished[sid][0] != n]
        assert sum(report.trained_seconds) + sum(report.other_seconds) == pytest.approx(
            sum(ran_here) + sum(carried_in)
        ), f"step {n}"
        assert len(report.trained_seconds) + len(report.other_seconds) == len(ran_here) + len(
            carried_in
        ), f"step {n}"
        assert report.cut_seconds == pytest.approx(sum(stopped_here)), f"step {n}"
    # The workload exercises what is checked: failed steps, and cuts where allowed.
    assert failures > 0
    assert save_failures > 0
    assert interrupted > 0
    assert written.is_set()  # a step was interrupted while its state was written
    assert backfills > 0
    assert (sum(r.cut_seconds for r in reports.values()) > 0) == (policy != "wait")
    if policy == "carryOver":  # carried episodes trained (maxPolicyLag 1) or thrown away (0)
        assert injected and not crash_loop  # the crash loop ran
        reused = sum(r.episodes_reused for r in reports.values())
        restarted = sum(r.stale_restarted for r in reports.values())
        assert reused > 0 if seed % 2 else restarted > 0
        masked = sum(r.stale_tokens_masked for r in reports.values())
        assert (masked > 0) == (seed % 2 == 1)
