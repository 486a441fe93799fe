"""slime's entry point end to end on a local CPU Ray: hub actor, metrics, train and eval.

One Ray instance for the module (starting Ray costs seconds on this 2-core box). The hub
runs as the real pinned actor; the agent and the gateway are the doubles, because neither
an AgentCore runtime nor a GPU engine runs here.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray

from agentrl.api.constants import HEAD_RAY_RESOURCE
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.hub import HEAD_RESOURCE_SHARE, HubSink, ensure_hub
from agentrl.bundle.rollout import generate_rollout, install_runtime
from agentrl.bundle.rollout.batch import RolloutContext
from agentrl.bundle.rollout.runtime import RolloutRuntime
from agentrl.bundle.rollout.types import PlainEvalOutput, PlainTrainOutput, slime_types

from .doubles import FakeGateway, StubAgent, runtime_config

ARGS = SimpleNamespace(rollout_batch_size=2, rollout_max_response_len=64, rollout_temperature=1.0)


@dataclass
class SourceSample:  # what slime's data source hands over, reduced to what we read
    prompt: str
    metadata: dict[str, Any]
    group_index: int
    index: int
    label: str | None = None
    tokens: list[int] = field(default_factory=list)


class DataSource:
    """slime's RolloutDataSource shape: get_samples(n) -> n groups of n_samples_per_prompt."""

    def __init__(self, rows: list[dict[str, Any]], n_samples: int) -> None:
        self.rows, self.n_samples, self.next_group, self.next_index = rows, n_samples, 0, 0

    def get_samples(self, n: int) -> list[list[SourceSample]]:
        groups = []
        for _ in range(n):
            row = self.rows[self.next_group % len(self.rows)]
            group = []
            for _ in range(self.n_samples):
                group.append(
                    SourceSample("p", dict(row), self.next_group, self.next_index, tokens=[5, 6])
                )
                self.next_index += 1
            groups.append(group)
            self.next_group += 1
        return groups


@dataclass
class Rig:
    hub: Any
    port: int
    gateway: FakeGateway
    agent: StubAgent
    config: RuntimeConfig


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    eval_file = Path(tmp_path_factory.mktemp("eval")) / "eval.jsonl"
    rows = [
        {"prompt": "q1", "metadata": {"behavior": "ok", "reward": 1.0}},
        {"prompt": "q2", "metadata": {"behavior": "error"}},
        {"prompt": "q3", "metadata": {"behavior": "fanout", "reward": 0.5}},
    ]
    eval_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = runtime_config(
        max_concurrent=2,
        eval_sets=[{"name": "held-out", "path": str(eval_file), "samplesPerPrompt": 2}],
    )
    ray.init(
        address="local",  # a cluster of this test's own, never one already running here
        num_cpus=2,
        resources={HEAD_RAY_RESOURCE: 1},
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    hub = ensure_hub(config, host="127.0.0.1", port=0)
    port = ray.get(hub.start_metrics.remote())
    gateway = FakeGateway()
    agent = StubAgent(gateway)

    async def build() -> RolloutContext:
        import asyncio

        return RolloutContext(gateway, agent, asyncio.Semaphore(config.spec.agent.max_concurrent))

    runtime = RolloutRuntime(build, HubSink(hub))
    install_runtime(runtime, config, slime_types(prefer_plain=True))
    try:
        yield Rig(hub, port, gateway, agent, config)
    finally:
        install_runtime(None)
        runtime.close()
        ray.get(hub.stop.remote())
        ray.kill(hub)
        ray.shutdown()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        return str(resp.read().decode())


def test_hub_is_pinned_to_the_head_resource(rig: Rig) -> None:
    assert ray.available_resources()[HEAD_RAY_RESOURCE] == pytest.approx(1 - HEAD_RESOURCE_SHARE)
    assert ensure_hub(rig.config, host="127.0.0.1", port=0)._actor_id == rig.hub._actor_id


def test_train_output_groups_episodes_by_prompt_with_one_rollout_id_each(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [{"behavior": "fanout", "reward": 1.0}, {"behavior": "ok", "reward": 0.0}]
    with caplog.at_level("INFO", logger="agentrl.rollout"):
        out = generate_rollout(ARGS, 4, DataSource(rows, n_samples=2))

    # One summary line for the batch and nothing per successful session.
    assert [r.getMessage() for r in caplog.records if r.name == "agentrl.rollout"] == [
        "Rollout 4 batch: episodes=4 (succeeded=4 failed=0) sequences=6"
    ]
    assert isinstance(out, PlainTrainOutput)
    assert [len(g) for g in out.samples] == [4, 2]  # fan-out: 2 episodes x 2 sequences
    for g, group in enumerate(out.samples):
        assert {s.group_index for s in group} == {g}
    fan = out.samples[0]
    assert fan[0].rollout_id == fan[1].rollout_id != fan[2].rollout_id == fan[3].rollout_id
    ids = {s.rollout_id for g in out.samples for s in g}
    assert len(ids) == 4  # one per episode = rollout_batch_size x n_samples_per_prompt
    assert out.metrics["agentrl/episodes"] == 4 and out.metrics["agentrl/failed_episodes"] == 0
    assert out.metrics["agentrl/masked_turns"] == 0 == out.metrics["agentrl/dropped_over_budget"]
    for s in (s for g in out.samples for s in g):
        assert s.tokens[-s.response_length :] and len(s.loss_mask) == s.response_length


def test_eval_output_per_set_with_rewards_per_episode(rig: Rig) -> None:
    out = generate_rollout(ARGS, 5, None, evaluation=True)

    assert isinstance(out, PlainEvalOutput)
    data = out.data["held-out"]
    # Prompt order, 2 per prompt; the second prompt's 2 failed episodes are counted, not 0s.
    assert data["rewards"] == [1.0, 1.0, 0.5, 0.5]
    assert data["truncated"] == [False, False, True, True]
    assert len(data["samples"]) == 2 + 4
    assert out.metrics["eval/held-out/failed_ratio"] == pytest.approx(2 / 6)
    assert rig.agent.max_live <= rig.config.spec.agent.max_concurrent


def test_metrics_reach_the_hub_and_pass_promtool(rig: Rig, tmp_path: Path) -> None:
    text = scrape(rig.port)
    assert 'agentrl_episodes_total{outcome="succeeded",split="train"} 4.0' in text
    assert 'agentrl_failed_sessions_total{reason="agent_error",split="eval"} 2.0' in text
    assert "agentrl_rollout_step 4.0" in text
    assert 'agentrl_trace_breaks_total{reason="identical_prompt"} 4.0' in text  # 2 train + 2 eval
    assert 'agentrl_sessions_in_flight{split="eval"} 0.0' in text
    assert "agentrl_connection_pool_size 4.0" in text
    assert "agentrl_samples_total 6.0" in text  # train sequences only, eval not counted
    assert "agentrl_truncated_samples_total 2.0" in text  # the fan-out's length-stopped turns
    # Only the 4 eval episodes that reported a reward: a failure's 0 is no reward.
    assert 'agentrl_episode_reward_count{split="eval"} 4.0' in text
    (tmp_path / "metrics.txt").write_text(text)
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
