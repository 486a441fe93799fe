"""Resuming a killed job: no prompt skipped, none trained twice, on slime's own data source.

The kill test runs slime's train.py loop (generate, train, then at each save interval the
model's checkpoint with Megatron's tracker, then `rollout_manager.save`, which is
`data_source.save`) around agentrl's real `generate_rollout` (over-sampling, carryOver),
on slime's `RolloutDataSourceWithBuffer` executed from the snapshots at both pinned
commits. The job is killed 20 times at random points (before or after a step's rollout,
after training, between the tracker and slime's own cursor file, after it); each restart
starts as slime does: a fresh process (data source, rollout runtime), `--load` set when a
tracker exists, `start_rollout_id` = the tracker's step + 1, `rollout_manager.load(start - 1)`.
"Training" appends a step's groups to the model; the model is what the last checkpoint
saved, so steps after it are lost with the kill, as their weights would be.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink

from agentrl.bundle.failures import AGENT_ERROR, SAMPLE_KEY
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rewards import post_process_rewards
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.carry import CarryStore
from agentrl.bundle.rollout.episode import EpisodeOutcome
from agentrl.bundle.rollout.filters import FilterError
from agentrl.bundle.rollout.report import Recorder
from agentrl.bundle.rollout.resume import (
    RolloutState,
    capture,
    prune,
    read,
    resume,
    state_path,
    tracker_step,
    write,
)
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import Status, slime_types
from agentrl.slimecmd.checkpoint import TRACKER

from .doubles import FakeGateway, StubAgent, failing_filter, runtime_config, simulated_clock
from .slime_upstream import COMMITS, data_source_module, dp_schedule_module, slime_args, write_rows

PROMPTS, SAMPLES, BATCH, OVER = 7, 2, 2, 4
STEPS, SAVE_INTERVAL, KILLS = 60, 3, 20
# Points after a (re)start a kill falls within: two save intervals (3 steps x 3 points, and
# 2 at a save), so a restart often gets past a checkpoint and 20 kills fit in the run.
KILL_WITHIN = 2 * (3 * SAVE_INTERVAL + 2)


class Killed(BaseException):
    """The process dies here: nothing after it happens, only the disk survives."""


@dataclass
class Job:
    """slime's train.py for one process lifetime, killed (if `kill`) at a random point."""

    root: Path
    commit: str
    rows: Path
    kill: bool
    rng: random.Random
    kill_at: int | None = None
    points: int = 0
    restored: list[RolloutState] = field(default_factory=list)

    def point(self) -> None:
        self.points += 1
        if self.points == self.kill_at:
            raise Killed

    def run(self) -> list[tuple[int, int]]:
        tracker = tracker_step(self.root)
        load = str(self.root) if tracker is not None else None
        args = slime_args(
            self.rows,
            SAMPLES,
            save=str(self.root),
            load=load,
            rollout_batch_size=BATCH,
            rollout_max_response_len=64,
            rollout_temperature=1.0,
            reward_key=None,
        )
        source = data_source_module(self.commit).RolloutDataSourceWithBuffer(args)
        start = 0 if tracker is None else tracker + 1
        if self.kill:
            self.kill_at = self.rng.randint(1, min(KILL_WITHIN, events(start)))
        model = self.load_model(tracker)
        if load is not None:  # create_training_models: rollout_manager.load(start - 1)
            source.load(start - 1)
            state = read(self.root, start - 1)
            if state is not None:
                self.restored.append(state)
        runtime = self.runtime()
        try:
            for step in range(start, STEPS):
                self.point()  # a kill here is a kill anywhere in the rollout: it writes last
                out = generate_rollout(args, step, source)
                self.point()
                model += [(g[0].group_index, g[0].metadata["id"]) for g in out.samples]
                self.point()
                if (step + 1) % SAVE_INTERVAL == 0 or step == STEPS - 1:
                    self.save_model(step, model)  # Megatron: the weights, then the tracker
                    self.point()
                    source.save(step)  # rollout_manager.save: slime's cursor
                    self.point()
        finally:
            install_runtime(None)
            runtime.close()
        return model

    def runtime(self) -> RolloutRuntime:
        config = runtime_config(
            max_concurrent=8,
            timeout=10**6,
            rolloutBatchSize=BATCH,
            samplesPerPrompt=SAMPLES,
            overSamplingBatchSize=OVER,
            stragglerPolicy="carryOver",
            maxPolicyLag=3,
        )
        gateway = FakeGateway()
        rng = self.rng

        def delay(request: Any, attempt: int) -> float:
            return rng.lognormvariate(3.0, 1.2)  # long-tailed: cuts and carried episodes

        agent = StubAgent(gateway, delay=delay, reward=lambda r, a: float(rng.random() < 0.5))

        async def build() -> RolloutContext:
            return RolloutContext(gateway, agent, asyncio.Semaphore(8))

        runtime = RolloutRuntime(build, LocalSink(BundleMetrics()), loop_factory=simulated_clock)
        install_runtime(runtime, config, slime_types(prefer_plain=True))
        return runtime

    def save_model(self, step: int, model: list[tuple[int, int]]) -> None:
        (self.root / f"model_{step}.json").write_text(json.dumps(model))
        (self.root / TRACKER).write_text(str(step))

    def load_model(self, tracker: int | None) -> list[tuple[int, int]]:
        if tracker is None:
            return []
        return [tuple(g) for g in json.loads((self.root / f"model_{tracker}.json").read_text())]  # type: ignore[misc]


def events(start: int) -> int:
    """The kill points of a run from step `start` to the end."""
    steps = range(start, STEPS)
    saves = sum(1 for s in steps if (s + 1) % SAVE_INTERVAL == 0 or s == STEPS - 1)
    return 3 * len(steps) + 2 * saves


@pytest.mark.parametrize("commit", COMMITS)
def test_twenty_random_kills_train_every_prompt_exactly_once_per_epoch(
    tmp_path: Path, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="agentrl.rollout")  # 20 restarts' worth of lines
    rows = write_rows(tmp_path / "rows.jsonl", [{"id": i} for i in range(PROMPTS)])
    root = tmp_path / "ckpt"
    root.mkdir()
    rng = random.Random(f"kill-{commit}")
    kills, jobs = 0, []
    while True:
        job = Job(root, commit, rows, kills < KILLS, rng)
        jobs.append(job)
        try:
            model = job.run()
        except Killed:
            kills += 1
            continue
        break
    assert kills == KILLS and tracker_step(root) == STEPS - 1

    # Every group slime numbered went to training exactly once, or is still handed back
    # (pending for the next step, in the final rollout state): none skipped, none twice.
    trained = [g for g, _ in model]
    assert len(trained) == len(set(trained)) == STEPS * BATCH
    final = read(root, STEPS - 1)
    assert final is not None
    pending = {s.group_index for group in final.buffer for s in group[:1]}
    assert set(trained).isdisjoint(pending)
    assert set(trained) | pending == set(range(final.cursor["sample_group_index"]))
    # Group g is prompt g mod 7 of epoch g // 7 (slime numbers groups in dataset order).
    assert all(prompt == g % PROMPTS for g, prompt in model)
    epochs: dict[int, list[int]] = {}
    for g, prompt in model:
        epochs.setdefault(g // PROMPTS, []).append(prompt)
    complete = [e for e in epochs if all(e * PROMPTS + i not in pending for i in range(PROMPTS))]
    assert len(complete) >= 15
    for e in complete:
        assert sorted(epochs[e]) == list(range(PROMPTS)), e
    # The restarts really had something to resume: handed-back groups and carried episodes.
    restored = [s for job in jobs for s in job.restored]
    print(f"{len(restored)} restarts restored a state; {sum(bool(s.buffer) for s in restored)} "
          f"with handed-back groups, {sum(bool(s.carry.episodes) for s in restored)} with "
          "carried episodes")  # fmt: skip
    assert len(restored) >= KILLS // 2
    assert any(s.buffer for s in restored) and any(s.carry.episodes for s in restored)


# ---- episode ids across a restart ------------------------------------------------------------

# Prompt 0's first episode finishes at t=5, its second hangs: prompts 1 and 2 fill the batch
# of 2 at t=20, prompts 0 and 3 are cut, and prompt 0's finished episode is carried over.
CARRY_ROWS = [
    {"id": 0, "sleep": [5, 1000], "reward": 1},
    {"id": 1, "sleep": 10, "reward": [1, 0]},
    {"id": 2, "sleep": 20, "reward": [0, 1]},
    {"id": 3, "sleep": 1000, "reward": [1, 0]},
]


def one_process(
    root: Path,
    rows: Path,
    config_path: Path,
    commit: str,
    *,
    step: int,
    reward: float | None,
    fail_filter: bool = False,
    metrics: BundleMetrics | None = None,
    **grpo: Any,
) -> tuple[SimpleNamespace, Any]:
    """A process lifetime of slime's train.py that runs step `step` (restoring the state of
    step - 1 when there is one, as a restart does), then saves; its agent scores `reward`.
    `grpo`: more GRPO keys; `fail_filter` is an arg a test's filter may read; `metrics`: the
    registry the hub of that process serves."""
    load = str(root) if step > 0 else None
    args = slime_args(
        rows,
        2,
        save=str(root),
        load=load,
        rollout_batch_size=2,
        rollout_max_response_len=64,
        rollout_temperature=1.0,
        reward_key=None,
        agentrl_config_path=str(config_path),
        fail_filter=fail_filter,
    )
    source = data_source_module(commit).RolloutDataSourceWithBuffer(args)
    if load is not None:
        source.load(step - 1)
    config = runtime_config(
        max_concurrent=16,
        timeout=3600,
        overSamplingBatchSize=4,
        stragglerPolicy="carryOver",
        **grpo,
    )
    config_path.write_text(config.to_json())
    gateway = FakeGateway()
    agent = StubAgent(gateway, reward=None if reward is None else lambda r, a: reward)

    async def build() -> RolloutContext:
        return RolloutContext(gateway, agent, asyncio.Semaphore(16))

    sink = LocalSink(metrics or BundleMetrics())
    runtime = RolloutRuntime(build, sink, loop_factory=simulated_clock)
    install_runtime(runtime, config, slime_types(prefer_plain=True))
    try:
        out = generate_rollout(args, step, source)
    finally:
        install_runtime(None)
        runtime.close()
    source.save(step)
    (root / TRACKER).write_text(str(step))  # Megatron's checkpoint of the step
    return args, out


@pytest.mark.parametrize("commit", COMMITS)
def test_a_restart_never_gives_a_fresh_episode_the_rollout_id_of_a_carried_one(
    tmp_path: Path, commit: str
) -> None:
    """The carried-over episode keeps the `rollout_id` its process gave it; the restarted
    process numbers its own episodes from 0 again. slime takes a shared id for one episode:
    its DP schedule counts 3 rollouts for 4 episodes (and asserts: fewer than the global
    batch), and the reward post-process refuses an episode with two rewards (or, with equal
    rewards, counts two episodes as one)."""
    rows = write_rows(tmp_path / "rows.jsonl", CARRY_ROWS)
    root = tmp_path / "ckpt"
    root.mkdir()
    config_path = tmp_path / "config.json"
    first = one_process(root, rows, config_path, commit, step=0, reward=None)[1]
    assert [g[0].metadata["id"] for g in first.samples] == [1, 2]

    args, out = one_process(root, rows, config_path, commit, step=1, reward=0.0)  # restart

    assert [g[0].metadata["id"] for g in out.samples] == [0, 3]
    flat = [s for g in out.samples for s in g]
    carried = out.samples[0][0]
    assert carried.metadata["policy_version"] == 0 and carried.reward == 1.0
    episodes: dict[int, set[str]] = {}
    for s in flat:
        episodes.setdefault(s.rollout_id, set()).add(s.session_id)
    assert all(len(sessions) == 1 for sessions in episodes.values()), episodes
    assert len(episodes) == len({s.session_id for s in flat}) == 4
    # Prompt 0 is (1 carried, 0 fresh): the fresh episode's advantage is -0.5.
    assert post_process_rewards(args, flat)[1] == [0.5, -0.5, 0.0, 0.0]
    # slime's RolloutManager splits the step by rollout_id into global batches of rollouts.
    schedule = dp_schedule_module(commit).build_dp_schedule(
        SimpleNamespace(
            use_dynamic_batch_size=False,
            max_tokens_per_gpu=None,
            micro_batch_size=1,
            balance_by_flops=False,
            balance_data=False,
        ),
        {"dp_size": 1, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1},
        [len(s.tokens) for s in flat],
        global_batch_size=4,  # rolloutBatchSize x samplesPerPrompt: one training step
        rollout_indices=[s.rollout_id for s in flat],
    )
    partitions, _, _, global_batch_sizes = schedule
    assert global_batch_sizes == [4] and sorted(partitions[0]) == [0, 1, 2, 3]


@pytest.mark.parametrize("commit", COMMITS)
def test_a_failed_episode_carried_in_an_older_state_is_dropped_at_load(
    tmp_path: Path, commit: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A state written before only task outcomes were carried over (cd244fa) may hold a cut
        group's failed episode. Loaded as it was, the restart reused it once: its stand-in (reward
        0, no tokens) trained as one of prompt 0's two outcomes. It is dropped at load, named once
        with its session id, its time counted as thrown away in the restarted job's metrics (as
        the other discarded episodes' is), and prompt 0 runs both of its episodes again. A second
    restart from the same checkpoint (a crash loop) neither names nor counts it again."""
    rows = write_rows(tmp_path / "rows.jsonl", CARRY_ROWS)
    root = tmp_path / "ckpt"
    root.mkdir()
    config_path = tmp_path / "config.json"
    one_process(root, rows, config_path, commit, step=0, reward=None)
    # The old shape: the same state, its carried episode a failure (what the step kept
    # for prompt 0 when its finished episode had failed, before cd244fa).
    old = read(root, 0)
    assert old is not None and len(old.carry.episodes) == 1
    ((key, (step, ok)),) = old.carry.episodes.items()
    failed = replace(
        ok,
        reward=0.0,
        failure=AGENT_ERROR,
        samples=[
            replace(s, reward=0.0, loss_mask=[0] * len(s.loss_mask), remove_sample=True,
                    status=Status.FAILED, metadata={**s.metadata, SAMPLE_KEY: AGENT_ERROR})
            for s in ok.samples
        ],
    )  # fmt: skip
    old.carry.episodes[key] = (step, failed)
    write(root, old)
    caplog.set_level(logging.INFO, logger="agentrl.rollout")
    metrics = BundleMetrics()  # the restarted job's hub: a new head pod, counting from 0

    _, out = one_process(root, rows, config_path, commit, step=1, reward=0.0, metrics=metrics)

    assert [g[0].metadata["id"] for g in out.samples] == [0, 3]
    group = out.samples[0]
    assert ok.session_id not in {s.session_id for s in group}
    assert [s.metadata["policy_version"] for s in group] == [1, 1]
    assert [s.metadata[SAMPLE_KEY] for s in group] == [None, None]
    lines = [r.getMessage() for r in caplog.records if ok.session_id in r.getMessage()]
    assert len(lines) == 1 and "reason=carry_failed" in lines[0], lines
    assert lines[0].startswith("train episode discarded: session=")
    assert "0 carried-over episode(s), 1 failed carried-over episode(s) dropped" in caplog.text
    # The step itself throws nothing else away (carryOver keeps what it cuts), so the
    # counter holds the dropped episode's time alone.
    assert failed.seconds > 0
    thrown_away = metrics.registry.get_sample_value(
        "agentrl_discarded_episode_seconds_total", {"reason": "aborted"}
    )
    assert thrown_away == failed.seconds
    # The job dies again before a newer checkpoint and restarts from the same one (a crash
    # loop): the state no longer holds the episode, so the second load neither names it nor
    # counts its time again (the first process already exported it), and the restart runs
    # the same step again the same way.
    held = read(root, 0)  # the state the restart loads (that restart then moves the tracker)
    caplog.clear()
    again = BundleMetrics()

    _, out = one_process(root, rows, config_path, commit, step=1, reward=0.0, metrics=again)

    assert [g[0].metadata["id"] for g in out.samples] == [0, 3]
    assert ok.session_id not in caplog.text
    assert "0 carried-over episode(s), 0 failed carried-over episode(s) dropped" in caplog.text
    assert not again.registry.get_sample_value(
        "agentrl_discarded_episode_seconds_total", {"reason": "aborted"}
    )
    assert held is not None and held.carry.episodes == {}  # written back without it


def test_a_failed_carried_episode_in_another_runs_state_is_said_to_count_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the run's own checkpoint directory is written to: a state loaded from elsewhere
    keeps the dropped episode, and the warning says a restart from it counts it again."""
    failed = EpisodeOutcome("s-failed", [], 0.0, AGENT_ERROR, seconds=12.0)
    carried = CarryStore(episodes={(0, 0): (2, failed)}, cut_groups={0: 2})
    other = tmp_path / "other"
    write(other, RolloutState(2, {"sample_offset": 2}, [], carried))
    caplog.set_level(logging.INFO, logger="agentrl.rollout")
    recorder = Recorder()
    args = SimpleNamespace(load=str(other), save=str(tmp_path / "mine"))
    assert resume(args, SimpleNamespace(), CarryStore(), 3, recorder)
    held = read(other, 2)
    assert held is not None and list(held.carry.episodes) == [(0, 0)]
    assert "stay in" in caplog.text and "a restart from it counts their time again" in caplog.text
    assert recorder.take().counters == {("discarded_episode_seconds", ("aborted",)): 12.0}


@pytest.mark.parametrize("commit", COMMITS)
def test_a_carried_episode_of_a_step_that_fails_is_kept_for_the_restart(
    tmp_path: Path,
    commit: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Step 0 cuts prompt 0 and keeps its finished episode; step 1 takes it out of the carry
    store, then the user's filter raises and the step fails (slime's train.py dies with it).
    The rollout state of step 0 still holds the episode, so the restart from step 0's
    checkpoint trains it. It was logged as discarded (reason=step_failed, "trains nothing")
    and its time counted as thrown away; only step 1's fresh episodes are lost."""
    spec = {"dynamicSamplingFilter": failing_filter(tmp_path, monkeypatch, "resume_filters")}
    rows = write_rows(tmp_path / "rows.jsonl", CARRY_ROWS)
    root = tmp_path / "ckpt"
    root.mkdir()
    config_path = tmp_path / "config.json"
    one_process(root, rows, config_path, commit, step=0, reward=None, **spec)
    state = read(root, 0)
    assert state is not None
    ((_, (_, kept)),) = state.carry.episodes.items()
    caplog.set_level(logging.INFO, logger="agentrl.rollout")

    with pytest.raises(FilterError, match="the user's filter has a bug"):
        one_process(root, rows, config_path, commit, step=1, reward=0.0, fail_filter=True, **spec)

    failed_step = [r.getMessage() for r in caplog.records]
    assert not [line for line in failed_step if kept.session_id in line and "discarded" in line]
    lost = [line for line in failed_step if "reason=step_failed" in line]
    assert lost and all(kept.session_id not in line for line in lost), lost
    assert sum(kept.session_id in line for line in failed_step) == 1  # kept, said once
    caplog.clear()

    _, out = one_process(root, rows, config_path, commit, step=1, reward=0.0, **spec)  # restart

    assert [g[0].metadata["id"] for g in out.samples] == [0, 3]
    reused = out.samples[0][0]
    assert reused.session_id == kept.session_id and reused.metadata["policy_version"] == 0


# ---- the state file ------------------------------------------------------------------------


def state(step: int) -> RolloutState:
    return RolloutState(step, {"sample_offset": step}, [], CarryStore())


def test_states_older_than_the_tracker_are_deleted_newer_ones_kept(tmp_path: Path) -> None:
    for step in range(6):
        write(tmp_path, state(step))
    assert sorted(p.name for p in (tmp_path / "rollout").iterdir())[0] == "agentrl_state_0.pkl"
    (tmp_path / TRACKER).write_text("3")
    prune(tmp_path)
    names = {p.name for p in (tmp_path / "rollout").iterdir()}
    assert names == {f"agentrl_state_{s}.pkl" for s in (3, 4, 5)}
    (tmp_path / TRACKER).write_text("release")  # no step: nothing is deleted
    prune(tmp_path)
    assert len(list((tmp_path / "rollout").iterdir())) == 3


def test_a_write_killed_midway_leaves_the_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, state(4))
    before = state_path(tmp_path, 4).read_bytes()

    def dies(*_: Any) -> None:
        raise Killed

    monkeypatch.setattr("agentrl.bundle.rollout.resume.os.replace", dies)
    with pytest.raises(Killed):
        write(tmp_path, RolloutState(4, {"sample_offset": 99}, [], CarryStore()))
    assert state_path(tmp_path, 4).read_bytes() == before
    assert [p.name for p in (tmp_path / "rollout").iterdir()] == ["agentrl_state_4.pkl"]


def test_a_file_that_is_not_the_steps_state_is_refused(tmp_path: Path) -> None:
    write(tmp_path, state(2))
    state_path(tmp_path, 5).write_bytes(state_path(tmp_path, 2).read_bytes())
    with pytest.raises(ValueError, match="not an agentrl rollout state for step 5"):
        read(tmp_path, 5)
    state_path(tmp_path, 6).write_bytes(pickle.dumps({"sample_offset": 1}))
    with pytest.raises(ValueError):
        read(tmp_path, 6)


def test_a_restart_without_a_state_says_what_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrl.rollout")
    args = SimpleNamespace(load=str(tmp_path))
    assert not resume(args, object(), CarryStore(), 4, Recorder())
    assert "without agentrl's rollout state of step 3" in caplog.text
    assert not resume(
        SimpleNamespace(load=None), object(), CarryStore(), 4, Recorder()
    )  # a first run


@pytest.mark.parametrize("commit", COMMITS)
def test_a_resubmission_with_another_samples_per_prompt_leaves_old_groups_out(
    commit: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The experiment resubmitted on the same checkpoint.path with samplesPerPrompt 2 -> 4:
    the saved step's handed-back groups hold 2 samples each, and slime's own buffer asserts
    that every group it takes holds 4, at the first step after the restart (and at each
    retry's). They are left out, said once; the cursor is restored."""
    rows = write_rows(tmp_path / "rows.jsonl", [{"id": i} for i in range(6)])
    module = data_source_module(commit)
    before = module.RolloutDataSourceWithBuffer(slime_args(rows, 2, save=str(tmp_path)))
    groups = before.get_samples(3)
    before.add_samples(groups[1:])  # two groups handed back at step 3
    write(tmp_path, capture(before, CarryStore(), 3))
    caplog.set_level(logging.WARNING, logger="agentrl.rollout")
    args = slime_args(rows, 4, load=str(tmp_path), save=str(tmp_path))
    after = module.RolloutDataSourceWithBuffer(args)
    assert resume(args, after, CarryStore(), 4, Recorder())
    assert after.buffer == [] and after.sample_offset == 3
    assert "2 group(s) handed back" in caplog.text and "samplesPerPrompt is now 4" in caplog.text
    again = module.RolloutDataSourceWithBuffer(slime_args(rows, 2, load=str(tmp_path)))
    assert resume(SimpleNamespace(**{**vars(args), "n_samples_per_prompt": 2}), again,
                  CarryStore(), 4, Recorder())  # fmt: skip
    assert [len(g) for g in again.buffer] == [2, 2]  # the same size: all back
