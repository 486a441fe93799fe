"""What holds for every train step, whatever the durations and rewards: random workloads.

Each case runs several steps of `generate_rollout` against slime's own data source (from
the snapshot) on a simulated clock, with random episode durations (heavy-tailed) and
random per-prompt pass rates, under each straggler policy, and checks:
- every step returns exactly rolloutBatchSize groups of samplesPerPrompt episodes;
- every session opened was closed, and no episode is live between steps;
- no prompt is lost: each group taken from the data source was trained, filtered (the
  filter saw it and dropped it), or is back in slime's buffer;
- no prompt starves: a group whose episodes ran in step k is settled by step k + 1 (a cut
  group is waited for when it returns);
- a step starts at most (1 + maxRefillRounds) x overSamplingBatchSize groups;
- a group the filter dropped is trained only as a backfill, once the refills ran out.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.metrics import LocalSink

from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.filters import has_reward_variance
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import slime_types

from .doubles import FakeGateway, StubAgent, runtime_config, simulated_clock
from .slime_upstream import buffered_source, install_filter, write_rows

B, N, OVER, ROUNDS, STEPS = 4, 3, 6, 2, 5


class Watch:
    """Wraps slime's data source: which groups went out, which came back."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.fetched: list[list[int]] = []  # per call, the row ids handed out

    def get_samples(self, n: int) -> list[list[Any]]:
        groups = self.source.get_samples(n)
        self.fetched.append([g[0].metadata["id"] for g in groups])
        return groups

    def add_samples(self, groups: list[list[Any]]) -> None:
        self.source.add_samples(groups)


@pytest.fixture
def recording_filter(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A user filter (slime's signature) that drops groups without reward variance and
    records which, so the test can account for every group."""
    dropped: list[int] = []

    def keep_if_varied(args: Any, samples: list[Any], **kwargs: Any) -> bool:
        keep = has_reward_variance([s.get_reward_value(args) for s in samples])
        if not keep:
            dropped.append(samples[0].metadata["id"])
        return keep

    install_filter(monkeypatch, "recording_filter", keep_if_varied)
    return dropped


@pytest.mark.parametrize("policy", ["wait", "abort", "carryOver"])
@pytest.mark.parametrize("seed", range(4))
def test_every_step_is_whole_and_no_prompt_is_lost_or_starved(
    policy: str, seed: int, tmp_path: Path, recording_filter: list[int]
) -> None:
    rng = random.Random(seed)
    rows = [{"id": i, "p": rng.choice([0.0, 0.3, 0.7, 1.0])} for i in range(400)]
    durations = random.Random(seed + 100)

    def delay(request: Any, attempt: int) -> float:
        return 60 * durations.lognormvariate(0, 1.2)

    def reward(request: Any, attempt: int) -> float:
        return float(durations.random() < request.payload["p"])

    grpo: dict[str, Any] = {
        "rolloutBatchSize": B,
        "samplesPerPrompt": N,
        "dynamicSamplingFilter": "recording_filter.keep_if_varied",
        "maxRefillRounds": ROUNDS,
        "stragglerPolicy": policy,
    }
    if policy != "wait":
        grpo["overSamplingBatchSize"] = OVER
    gateway = FakeGateway()
    agent = StubAgent(gateway, yields=0, delay=delay, reward=reward)

    async def build() -> RolloutContext:
        return RolloutContext(gateway, agent, asyncio.Semaphore(8))

    metrics = BundleMetrics()
    runtime = RolloutRuntime(build, LocalSink(metrics), loop_factory=simulated_clock)
    install_runtime(runtime, runtime_config(timeout=10**6, **grpo), slime_types(prefer_plain=True))
    source = Watch(buffered_source("624b824", write_rows(tmp_path / "rows.jsonl", rows), N))
    args = SimpleNamespace(
        rollout_batch_size=B, rollout_max_response_len=64, rollout_temperature=1.0, reward_key=None
    )
    trained: list[int] = []
    first_ran: dict[int, int] = {}  # row id -> the step its episodes first ran in
    try:
        for step in range(STEPS):
            calls_before, requests_before = len(source.fetched), len(agent.requests)
            out = generate_rollout(args, step, source)

            assert [len(g) for g in out.samples] == [N] * B
            assert not gateway.open and len(gateway.closed) == len(gateway.created)
            assert agent.live == 0
            started = sum(len(c) for c in source.fetched[calls_before:])
            assert started <= (1 + ROUNDS) * (B if policy == "wait" else OVER)
            trained += [g[0].metadata["id"] for g in out.samples]
            for request in agent.requests[requests_before:]:
                first_ran.setdefault(request.payload["id"], step)
            settled = set(trained) | set(recording_filter)
            overdue = {i for i, first in first_ran.items() if first < step and i not in settled}
            assert not overdue, f"step {step}: ran before, still not settled: {overdue}"
    finally:
        install_runtime(None)
        runtime.close()

    fetched = {i for call in source.fetched for i in call}
    buffered = {g[0].metadata["id"] for g in source.source.buffer}
    # Every group handed out is accounted for at the end, and trained at most once.
    assert fetched == set(trained) | set(recording_filter) | buffered
    assert len(set(trained)) == len(trained) == B * STEPS
    # A group both dropped by the filter and trained is a backfill (refills ran out).
    backfilled = metrics.registry.get_sample_value(
        "agentrl_groups_total", {"outcome": "backfilled"}
    )
    assert len(set(trained) & set(recording_filter)) == (backfilled or 0)
    # The workload exercises what is checked: groups were filtered, and cut where allowed.
    cut = sum(
        metrics.registry.get_sample_value("agentrl_groups_total", {"outcome": o}) or 0
        for o in ("aborted", "carried_over")
    )
    assert recording_filter and (cut > 0) == (policy != "wait")
