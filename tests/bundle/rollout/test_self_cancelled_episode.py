"""An episode whose agent backend ends in `asyncio.CancelledError` although nobody cancelled
it (a backend raising it on its own; AgentCore's thread pool shut down under it) is a failed
episode like any other: counted, logged with its session id, and the step goes on.

The step runs on the real sampling and batch code with slime's own data source; a wall-clock
timeout keeps a hang from hanging the test."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from agentrl.bundle.rollout.batch import RolloutContext, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeOutcome, EpisodeSpec
from agentrl.bundle.rollout.sampling import SamplingPlan, StepReport, fill_batch
from agentrl.bundle.rollout.source import DataSource

from .doubles import FakeGateway, StubAgent
from .slime_upstream import COMMITS, buffered_source, write_rows

SPEC = EpisodeSpec({"max_new_tokens": 8}, 64, 3600.0, "m")
HANG_GUARD_S = 10.0  # wall clock: the step needs a few scheduler turns, no sleeps


@pytest.mark.parametrize("policy", ["wait", "carryOver"])
@pytest.mark.parametrize("commit", COMMITS)
def test_an_episode_cancelled_by_its_own_backend_fails_and_the_step_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, commit: str
) -> None:
    rows = [{"id": 0, "behavior": ["ok", "cancel_itself"]}, {"id": 1}]
    source = DataSource(buffered_source(commit, write_rows(tmp_path / "rows.jsonl", rows), 2))
    gateway = FakeGateway()
    agent = StubAgent(gateway)
    ctx = RolloutContext(gateway, agent, asyncio.Semaphore(4))
    plan = SamplingPlan(batch_size=2, in_flight=2, max_refill_rounds=0, policy=policy)  # type: ignore[arg-type]

    async def step() -> tuple[list[list[EpisodeOutcome]], StepReport]:
        return await asyncio.wait_for(
            fill_batch(ctx, source, plan, spec=SPEC, group_filter=None, to_samples=list, step=0),
            HANG_GUARD_S,
        )

    with caplog.at_level(logging.WARNING, logger="agentrl"):
        groups, report = asyncio.run(step())

    assert [len(g) for g in groups] == [2, 2] and report.kept == 2
    failed = [o for g in groups for o in g if o.failure is not None]
    assert len(failed) == 1 and failed[0].failure == "internal_error"
    sid = failed[0].session_id
    assert sid in agent.cancelled
    assert [r.getMessage() for r in caplog.records if sid in r.getMessage()] == [
        f"train episode failed: session={sid} reason=internal_error: the agent backend raised "
        "CancelledError although the episode was not cancelled (an executor shut down "
        "under it, or a bug in the backend)"
    ]
    assert not gateway.open


def test_eval_counts_it_too_instead_of_failing_the_whole_batch() -> None:
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(4))
    inputs = [
        EpisodeInput("p", {"id": 0, "behavior": b}, None, group_index=0, index=i)
        for i, b in enumerate(["ok", "cancel_itself"])
    ]

    async def batch() -> list[list[EpisodeOutcome]]:
        return await asyncio.wait_for(run_groups(ctx, [inputs], SPEC, "eval"), HANG_GUARD_S)

    [outcomes] = asyncio.run(batch())
    assert [o.failure for o in outcomes] == [None, "internal_error"]
