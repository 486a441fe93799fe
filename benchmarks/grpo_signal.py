"""The GRPO signal under infrastructure failures and carry-over: how wrong are the advantages?

Replays the rollout-efficiency workload (benchmarks/rollout_efficiency.py: 64 groups x 8
episodes per step, lognormal durations with a median of 180 s and sigma 1.0, pass rates
Beta(2, 2), agentrl's policy: over-sampling 72, zeroRewardVariance, carryOver) through the
real `generate_rollout` and the real reward post-process, on a simulated clock, with
infrastructure failures injected: each episode, once its agent has its reward, fails instead
(`agent_error`) with probability 0%, 5% or 15%, and the benchmark keeps the reward it would
have reported.

The oracle is the run without failures: for every trained group, the advantages GRPO gives
when every episode reports its true reward. Each task outcome's advantage is compared with
its oracle value. Printed (and with `--json`, these fixed keys):
- `advantage_error_p99`: the 99th percentile of |advantage - oracle| over the task outcomes
  of the trained groups, at 15% failures (excluded failures leave their group with fewer
  rewards, so some error remains; counting them as 0 adds a bias);
- `failed_episodes_in_advantage`: failed episodes that entered their group's mean or std, or
  got an advantage, at 5% and 15% (must be 0 under `failedEpisodes: exclude`);
- `stale_tokens_trained`: tokens of carried-over episodes trained although an older policy
  sampled them (must be 0 under `offPolicyTokens: mask`);
- `useful_groups_per_time_ratio`: groups with reward variance trained per unit of time,
  agentrl's policy over wait-for-all, at 0% failures (rollout_efficiency's figure; must not
  fall below its 2.3x).
The same runs with `failedEpisodes: zeroReward` (agentrl's old behaviour) are measured too,
for comparison, under `zero_reward`.

    python benchmarks/signal.py            # 8 steps per run, a table
    python benchmarks/signal.py --json     # one JSON object
    python benchmarks/signal.py --quick    # 2 steps per run (run by a test)

benchmarks/signal.py is the documented entry; the code lives here because a module called
`signal` in this folder must also stand in for the standard library's (see that file).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from rollout_efficiency import (  # noqa: E402 (the path above)
    GROUPS,
    POLICY,
    SAMPLES,
    TimedAgent,
    replay,
)

RATES = (0.0, 0.05, 0.15)
SIGMA = 1.0
KEYS = (
    "advantage_error_p99",
    "failed_episodes_in_advantage",
    "stale_tokens_trained",
    "useful_groups_per_time_ratio",
)


class FailingAgent:
    """The workload's agent; a drawn share of its episodes fail after reaching their reward."""

    def __init__(self, inner: TimedAgent, rate: float, seed: int) -> None:
        self.inner, self.rate = inner, rate
        self.rng = random.Random(f"failures-{seed}-{rate}")
        self.true_reward: dict[str, float] = {}  # session id -> what the agent would report

    async def run(self, request: Any) -> Any:
        from agentrl.bundle.agents.base import AgentError
        from agentrl.bundle.failures import AGENT_ERROR

        result = await self.inner.run(request)
        self.true_reward[request.session_id] = result.reward
        if self.rng.random() < self.rate:
            raise AgentError(AGENT_ERROR, "injected infrastructure failure")
        return result

    def pool_stats(self) -> Any:
        return self.inner.pool_stats()

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Run:
    seconds: float = 0.0
    useful: int = 0  # trained groups whose task outcomes' rewards vary
    errors: list[float] = field(default_factory=list)  # |advantage - oracle|, task outcomes
    failed_in_advantage: int = 0
    failed_trained: int = 0  # failed episodes in trained groups
    stale_trained: float = 0.0
    stale_masked: float = 0.0
    skipped: float = 0.0  # groups trained with zero advantage (too few task outcomes)

    @property
    def useful_per_hour(self) -> float:
        return 3600.0 * self.useful / self.seconds if self.seconds else 0.0

    def error_quantile(self, q: float) -> float:
        if not self.errors:
            return 0.0
        ordered = sorted(self.errors)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def oracle(rewards: dict[object, float]) -> dict[object, float]:
    """GRPO's advantages (mean-centred, the spec's default) from every episode's true reward."""
    mean = math.fsum(rewards.values()) / len(rewards)
    return {k: r - mean for k, r in rewards.items()}


def judge(run: Run, groups: list[list[Any]], advantages: list[float], agent: FailingAgent) -> None:
    from agentrl.bundle.failures import sample_failure
    from agentrl.bundle.rewards import episode_key
    from agentrl.bundle.rollout.filters import has_reward_variance

    at = 0
    for group in groups:
        values = advantages[at : at + len(group)]
        at += len(group)
        truth: dict[object, float] = {}
        failed: set[object] = set()
        for i, sample in enumerate(group):
            key = episode_key(sample, i)
            truth[key] = agent.true_reward[sample.session_id]
            if sample_failure(sample) is not None:
                failed.add(key)
        expected = oracle(truth)
        counted = {k: r for k, r in truth.items() if k not in failed}
        run.useful += has_reward_variance([s.reward for s in group if sample_failure(s) is None])
        run.failed_trained += len(failed)
        # What the advantages are when the failures count in nothing (or in too small a
        # group, nothing at all): anything else means a failure entered the statistics.
        clean = oracle(counted) if len(counted) >= 2 else dict.fromkeys(counted, 0.0)
        leaked = False
        for i, (sample, value) in enumerate(zip(group, values, strict=True)):
            key = episode_key(sample, i)
            if key in failed:
                leaked |= value != 0.0
                continue
            run.errors.append(abs(value - expected[key]))
            leaked |= abs(value - clean[key]) > 1e-9
        if leaked and failed:
            run.failed_in_advantage += len(failed)


def run(grpo: dict[str, Any], rate: float, steps: int, seed: int) -> Run:
    from tests.bundle.rollout.doubles import runtime_config

    # The reward post-process reads the spec from the file slime's args name.
    config = runtime_config(rolloutBatchSize=GROUPS, samplesPerPrompt=SAMPLES, **grpo)
    with tempfile.TemporaryDirectory(prefix="agentrl-signal-") as tmp:
        config_file = Path(tmp) / "config.json"
        config_file.write_text(config.to_json())
        return _replay(grpo, rate, steps, seed, str(config_file))


def _replay(grpo: dict[str, Any], rate: float, steps: int, seed: int, config: str) -> Run:
    from agentrl.bundle.rewards import post_process_rewards

    result = Run()
    with replay(
        grpo,
        SIGMA,
        steps,
        seed,
        wrap=lambda agent: FailingAgent(agent, rate, seed),
        agentrl_config_path=config,
    ) as replayed:
        for step in range(steps):
            out = replayed.step(step)
            flat = [s for g in out.samples for s in g]
            _, advantages = post_process_rewards(replayed.args, flat)
            judge(result, out.samples, advantages, replayed.agent)
        result.seconds = replayed.metric("agentrl_rollout_step_seconds_sum", split="train")
        result.stale_trained = replayed.metric("agentrl_stale_tokens_total", action="trained")
        result.stale_masked = replayed.metric("agentrl_stale_tokens_total", action="masked")
        result.skipped = replayed.metric("agentrl_groups_total", outcome="skipped")
    return result


def measure(steps: int, seed: int) -> dict[str, Any]:
    base = run({}, 0.0, steps, seed)  # wait-for-all, no failures
    by_rate: dict[str, dict[str, Run]] = {}
    for rate in RATES:
        by_rate[str(rate)] = {
            mode: run({**POLICY, "failedEpisodes": mode}, rate, steps, seed)
            for mode in ("exclude", "zeroReward")
        }
    ours = {rate: runs["exclude"] for rate, runs in by_rate.items()}
    old = {rate: runs["zeroReward"] for rate, runs in by_rate.items()}
    failing = [r for r in RATES if r > 0]
    return {
        "advantage_error_p99": ours[str(max(RATES))].error_quantile(0.99),
        "failed_episodes_in_advantage": sum(ours[str(r)].failed_in_advantage for r in failing),
        "stale_tokens_trained": sum(run.stale_trained for run in ours.values()),
        "useful_groups_per_time_ratio": ours["0.0"].useful_per_hour / base.useful_per_hour,
        "stale_tokens_masked": sum(run.stale_masked for run in ours.values()),
        "zero_reward": {
            "advantage_error_p99": old[str(max(RATES))].error_quantile(0.99),
            "failed_episodes_in_advantage": sum(old[str(r)].failed_in_advantage for r in failing),
        },
        "by_failure_rate": {
            rate: {
                mode: {
                    "advantage_error_p99": round(r.error_quantile(0.99), 4),
                    "advantage_error_max": round(max(r.errors, default=0.0), 4),
                    "failed_episodes_in_advantage": r.failed_in_advantage,
                    "failed_episodes_trained_groups": r.failed_trained,
                    "skipped_groups": int(r.skipped),
                    "useful_groups_per_hour": round(r.useful_per_hour, 1),
                }
                for mode, r in runs.items()
            }
            for rate, runs in by_rate.items()
        },
        "wait_for_all_useful_groups_per_hour": round(base.useful_per_hour, 1),
        "steps": steps,
        "policy": POLICY,
    }


def report(doc: dict[str, Any]) -> None:
    print(
        f"{GROUPS} groups x {SAMPLES} episodes per step, sigma {SIGMA}, {doc['steps']} steps per "
        f"run, agentrl's policy {json.dumps(POLICY)}"
    )
    print(
        f"  {'failures':>8} {'failedEpisodes':>14} {'adv err p99':>11} {'max':>6} "
        f"{'failed in adv':>13} {'skipped grp':>11} {'useful grp/h':>12}"
    )
    for rate, runs in doc["by_failure_rate"].items():
        for mode, r in runs.items():
            print(
                f"  {100 * float(rate):7.0f}% {mode:>14} {r['advantage_error_p99']:11.4f} "
                f"{r['advantage_error_max']:6.3f} {r['failed_episodes_in_advantage']:13d} "
                f"{r['skipped_groups']:11d} {r['useful_groups_per_hour']:12.1f}"
            )
    print(
        f"useful groups per unit time at 0% failures: {doc['useful_groups_per_time_ratio']:.2f}x "
        f"wait-for-all; stale tokens trained {doc['stale_tokens_trained']:.0f}, masked "
        f"{doc['stale_tokens_masked']:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 steps per run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 8)")
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    logging.disable(logging.WARNING)  # every injected failure is logged once otherwise
    steps = opts.steps or (2 if opts.quick else 8)
    started = time.process_time()
    doc = measure(steps, opts.seed)
    if opts.json:
        out = {k: round(v, 4) if isinstance(v, float) else v for k, v in doc.items()}
        out["zero_reward"] = {k: round(v, 4) for k, v in doc["zero_reward"].items()}
        print(json.dumps(out, sort_keys=True))
        return
    report(doc)
    print(f"(benchmark CPU time: {time.process_time() - started:.1f} s)")


if __name__ == "__main__":
    main()
