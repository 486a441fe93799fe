"""Rollout efficiency with long-tailed agent episodes: wait-for-all against dynamic sampling.

Drives the real `agentrl.bundle.rollout.generate_rollout` (sampling, cuts, carry-over,
metrics) with the rollout tests' doubles: the stub agent and gateway
(tests/bundle/rollout/doubles.py) and a data source that behaves as slime's default one
(a test checks it against slime's own class). The rollout's event loop runs on looptime's
simulated clock, so an agent episode "takes" minutes without costing them.

Workload (per step): 64 prompt groups x 8 episodes, `maxConcurrent` 128. Episode durations
are lognormal with a median of 180 s and sigma 1.0 (0.5 and 1.5 too): at sigma 1.0 the
p99 episode is ~10x the median, as in the issue's "median 3 minutes, p99 30". Each prompt
has a pass rate p ~ Beta(2, 2) (most prompts neither trivial nor impossible, as after the
usual pass-rate pre-filtering of a dataset; about 11% of groups still come out all-0 or
all-1), and each episode's reward is 1 with probability p.

Compared, in one run:
- wait-for-all: today's agentrl and the spec's defaults: rolloutBatchSize groups, every
  episode waited for, every group trained (no over-sampling, no filter);
- agentrl's policy: overSamplingBatchSize 72 (1.125x), dynamicSamplingFilter
  zeroRewardVariance, maxRefillRounds 3, stragglerPolicy carryOver.

Printed per sigma: mean step wall time (simulated), useful groups (non-zero reward
variance) trained per hour, the share of episode-seconds spent on work that trained no
token (as `agentrl_discarded_episode_seconds_total` counts it): aborted (cut while running,
or finished in a group the abort policy discarded), filtered (backfills included) or masked
(carried-over episodes `offPolicyTokens: mask` masked whole, their reward still in their
group), and the length bias: mean duration of trained episodes (those of the batch's
groups, masked ones too: their rewards count) over the mean of every duration drawn (each
attempt is an independent draw, so that mean is unbiased) minus 1. Episodes finished but
held for the next step when the run ends count as wasted (conservative). The bound printed
with the bias is the most negative bias any rule could cause by withholding as many
episodes from training as the policy cut (withholding exactly the longest ones); the
ceiling is that bound at the most a step may cut, (O - B) / O of its episodes.

    python benchmarks/rollout_efficiency.py            # 3 sigmas, 8 steps, plus a sweep
    python benchmarks/rollout_efficiency.py --quick    # sigma 1.0, 2 steps (run by a test)
    python benchmarks/rollout_efficiency.py --json     # one JSON object (fixed keys below)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GROUPS, SAMPLES, MAX_CONCURRENT = 64, 8, 128
MEDIAN_S = 180.0
SIGMAS = (0.5, 1.0, 1.5)
PASS_RATE_BETA = (2.0, 2.0)
POLICY = {
    "overSamplingBatchSize": 72,
    "dynamicSamplingFilter": "zeroRewardVariance",
    "maxRefillRounds": 3,
    "stragglerPolicy": "carryOver",
}
SWEEP = (68, 72, 80, 96)  # overSamplingBatchSize values for the trade-off table (sigma 1.0)
# The fixed JSON keys (sigma 1.0, agentrl's policy against wait-for-all).
KEYS = ("useful_groups_per_time_ratio", "wasted_episode_seconds_share", "length_bias")


@dataclass
class Figures:
    steps: int = 0
    seconds: float = 0.0  # simulated wall time of all steps
    useful: int = 0  # trained groups with reward variance
    trained: int = 0
    run_seconds: float = 0.0  # every agent episode, finished or cut, by its own clock
    trained_seconds: list[float] = field(default_factory=list)
    drawn: list[float] = field(default_factory=list)  # every duration drawn
    cut: int = 0  # episodes cancelled while running
    cut_seconds: float = 0.0  # how long they had run
    zero_variance_trained_seconds: float = 0.0  # of episodes that trained a token
    # Episodes in the batch of which no token trained (backfills, carried-over episodes
    # masked whole): wasted, though their groups train (the length bias keeps them).
    masked_seconds: float = 0.0

    @property
    def step_seconds(self) -> float:
        return self.seconds / self.steps

    @property
    def useful_per_hour(self) -> float:
        return 3600.0 * self.useful / self.seconds

    @property
    def wasted_share(self) -> float:
        return 1.0 - (sum(self.trained_seconds) - self.masked_seconds) / self.run_seconds

    @property
    def no_signal_share(self) -> float:
        """Wasted plus trained groups without reward variance (no gradient either)."""
        return self.wasted_share + self.zero_variance_trained_seconds / self.run_seconds

    @property
    def masked_share(self) -> float:
        return self.masked_seconds / self.run_seconds

    @property
    def cut_seconds_share(self) -> float:
        return self.cut_seconds / self.run_seconds

    @property
    def cut_share(self) -> float:
        return self.cut / len(self.drawn)

    @property
    def length_bias(self) -> float:
        trained = sum(self.trained_seconds) / len(self.trained_seconds)
        return trained / (sum(self.drawn) / len(self.drawn)) - 1.0


class TimedAgent:
    """The stub agent with drawn durations and rewards, and its own clock on every episode."""

    def __init__(self, gateway: Any, sigma: float, seed: int) -> None:
        from tests.bundle.rollout.doubles import StubAgent

        self.rng = random.Random(seed)
        self.sigma = sigma
        self.duration: dict[str, float] = {}
        self.ran: dict[str, float] = {}  # sid -> seconds it actually ran (cut ones: less)
        self.stub = StubAgent(gateway, yields=0, delay=self._delay, reward=self._reward)

    def _delay(self, request: Any, attempt: int) -> float:
        d = MEDIAN_S * math.exp(self.rng.gauss(0.0, self.sigma))
        self.duration[request.session_id] = d
        return d

    def _reward(self, request: Any, attempt: int) -> float:
        return 1.0 if self.rng.random() < float(request.payload["p"]) else 0.0

    async def run(self, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            return await self.stub.run(request)
        finally:
            self.ran[request.session_id] = loop.time() - start

    def pool_stats(self) -> Any:
        return self.stub.pool_stats()

    async def aclose(self) -> None:
        await self.stub.aclose()


def rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"prompt": f"task {i}", "metadata": {"id": i, "p": rng.betavariate(*PASS_RATE_BETA)}}
        for i in range(n)
    ]


@dataclass
class Replay:
    """The workload on the real `generate_rollout`: its agent, metrics and slime's args."""

    agent: Any  # the TimedAgent, or what `wrap` made of it
    metrics: Any  # the BundleMetrics the rollout records into
    args: SimpleNamespace  # slime's args for each call
    source: Any

    def step(self, rollout_id: int) -> Any:
        from agentrl.bundle.rollout import generate_rollout

        return generate_rollout(self.args, rollout_id, self.source)

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else float(value)


@contextmanager
def replay(
    grpo: dict[str, Any],
    sigma: float,
    steps: int,
    seed: int,
    wrap: Callable[[TimedAgent], Any] = lambda agent: agent,
    **slime_args: Any,
) -> Iterator[Replay]:
    """The rollout runtime for one run of the workload under `grpo` (wire names), on the
    simulated clock; `wrap` may put something around the agent (benchmarks/signal.py
    injects failures), `slime_args` go into slime's args."""
    from tests.bundle.rollout.doubles import (
        FakeGateway,
        SlimeDataSource,
        runtime_config,
        simulated_clock,
    )
    from tests.support.metrics import LocalSink

    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.bundle.rollout import install_runtime
    from agentrl.bundle.rollout.batch import RolloutContext
    from agentrl.bundle.rollout.runtime import RolloutRuntime
    from agentrl.bundle.rollout.types import slime_types

    config = runtime_config(
        max_concurrent=MAX_CONCURRENT,
        timeout=10**7,  # the policy, not the deadline, decides here
        rolloutBatchSize=GROUPS,
        samplesPerPrompt=SAMPLES,
        **grpo,
    )
    agent = wrap(TimedAgent(gateway := FakeGateway(), sigma, seed))

    async def build() -> RolloutContext:
        return RolloutContext(gateway, agent, asyncio.Semaphore(MAX_CONCURRENT))

    metrics = BundleMetrics()
    runtime = RolloutRuntime(build, LocalSink(metrics), loop_factory=simulated_clock)
    install_runtime(runtime, config, slime_types(prefer_plain=True))
    args = SimpleNamespace(
        rollout_batch_size=GROUPS,
        rollout_max_response_len=64,
        rollout_temperature=1.0,
        reward_key=None,
        **slime_args,
    )
    source = SlimeDataSource(rows(GROUPS * (steps + 2) * 4, seed), SAMPLES)
    try:
        yield Replay(agent, metrics, args, source)
    finally:
        install_runtime(None)
        runtime.close()


def run_policy(grpo: dict[str, Any], sigma: float, steps: int, seed: int) -> Figures:
    from agentrl.bundle.rollout.filters import has_reward_variance

    figures = Figures()
    step_sum = 0.0
    with replay(grpo, sigma, steps, seed) as run:
        agent = run.agent
        for step in range(steps):
            out = run.step(step)
            seconds = run.metric("agentrl_rollout_step_seconds_sum", split="train")
            figures.seconds += seconds - step_sum
            step_sum = seconds
            figures.steps += 1
            for group in out.samples:
                figures.trained += 1
                useful = has_reward_variance([s.reward for s in group])
                figures.useful += useful
                durations = [agent.duration[s.session_id] for s in group]
                figures.trained_seconds += durations
                # One sample per episode here. One with no trained token (masked whole, or a
                # failed one's stand-in: the replay injects no failures) trains nothing, as the
                # rollout's discarded time counts it.
                masked = sum(
                    d for d, s in zip(durations, group, strict=True) if not any(s.loss_mask)
                )
                figures.masked_seconds += masked
                if not useful:
                    figures.zero_variance_trained_seconds += sum(durations) - masked
    figures.run_seconds = sum(agent.ran.values())
    figures.drawn = list(agent.duration.values())
    figures.cut = len(agent.stub.cancelled)
    figures.cut_seconds = sum(agent.ran[sid] for sid in agent.stub.cancelled)
    return figures


def bias_bound(sigma: float, cut_share: float) -> float:
    """The most negative length bias any rule can cause by withholding `cut_share` of the
    episodes from training: withholding exactly the longest ones. For lognormal durations
    E[D; D < the (1 - q) quantile] / ((1 - q) E[D]) = Phi(z_(1-q) - sigma) / (1 - q)."""
    if cut_share <= 0:
        return 0.0
    normal = NormalDist()
    return normal.cdf(normal.inv_cdf(1 - cut_share) - sigma) / (1 - cut_share) - 1.0


def compare(
    sigma: float, steps: int, seed: int, grpo: dict[str, Any], base: Figures | None = None
) -> dict[str, Any]:
    base = base or run_policy({}, sigma, steps, seed)
    ours = run_policy(grpo, sigma, steps, seed)
    over = int(grpo.get("overSamplingBatchSize", GROUPS))
    return {
        "sigma": sigma,
        "wait_for_all": base,
        "policy": ours,
        "useful_groups_per_time_ratio": ours.useful_per_hour / base.useful_per_hour,
        "wasted_episode_seconds_share": ours.wasted_share,
        "length_bias": ours.length_bias,
        "cut_episode_share": ours.cut_share,
        "masked_episode_seconds_share": ours.masked_share,
        # Given the share of episodes that was cut, and given the most the policy may cut
        # (at most O - B of the O candidate groups are unfinished at a cut).
        "length_bias_bound": bias_bound(sigma, ours.cut_share),
        "length_bias_ceiling": bias_bound(sigma, (over - GROUPS) / over),
    }


def row(name: str, f: Figures) -> str:
    return (
        f"  {name:13} {f.step_seconds / 60:9.1f} {f.useful_per_hour:13.1f} "
        f"{100 * f.wasted_share:9.1f}% {100 * f.cut_seconds_share:8.1f}% "
        f"{100 * f.no_signal_share:10.1f}% {100 * f.length_bias:+9.1f}%"
    )


def report(results: list[dict[str, Any]], sweep: list[dict[str, Any]], steps: int) -> None:
    print(
        f"{GROUPS} groups x {SAMPLES} episodes per step, maxConcurrent {MAX_CONCURRENT}, "
        f"lognormal durations (median {MEDIAN_S:g} s), pass rates Beta{PASS_RATE_BETA}, "
        f"{steps} steps on a simulated clock"
    )
    print(f"agentrl's policy: {json.dumps(POLICY)}")
    header = (
        f"  {'':13} {'step (min)':>9} {'useful grp/h':>13} {'wasted':>10} {'(cut)':>9} "
        f"{'no signal':>11} {'len bias':>10}"
    )
    for r in results:
        print(f"sigma {r['sigma']}")
        print(header)
        print(row("wait-for-all", r["wait_for_all"]))
        print(row("agentrl", r["policy"]))
        print(
            f"  useful groups per unit time: {r['useful_groups_per_time_ratio']:.2f}x; "
            f"length bias {100 * r['length_bias']:+.1f}%, bound "
            f"{100 * r['length_bias_bound']:+.1f}% for the {100 * r['cut_episode_share']:.1f}% "
            f"of episodes cut (ceiling {100 * r['length_bias_ceiling']:+.1f}%)"
        )
    if sweep:
        print("trade-off at sigma 1.0 (carryOver, zeroRewardVariance):")
        print(
            f"  {'overSamplingBatchSize':>21} {'ratio':>6} {'wasted':>7} {'len bias':>9} "
            f"{'cut':>6} {'bound':>7}"
        )
        for r in sweep:
            over = r["over"]
            print(
                f"  {over:>12} ({over / GROUPS:.3f}x) {r['useful_groups_per_time_ratio']:5.2f}x "
                f"{100 * r['wasted_episode_seconds_share']:6.1f}% "
                f"{100 * r['length_bias']:+8.1f}% {100 * r['cut_episode_share']:5.1f}% "
                f"{100 * r['length_bias_bound']:+6.1f}%"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sigma 1.0, 2 steps, no sweep")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 8)")
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    logging.disable(logging.WARNING)  # the per-step log lines are not the point here
    steps = opts.steps or (2 if opts.quick else 8)
    sigmas = (1.0,) if opts.quick else SIGMAS
    started = time.process_time()
    results = [compare(s, steps, opts.seed, POLICY) for s in sigmas]
    main_result = next(r for r in results if r["sigma"] == 1.0)
    sweep = []
    if not opts.quick:
        for over in SWEEP:
            grpo = {**POLICY, "overSamplingBatchSize": over}
            r = compare(1.0, steps, opts.seed, grpo, base=main_result["wait_for_all"])
            sweep.append({"over": over, **r})
    if opts.json:
        doc: dict[str, Any] = {k: round(main_result[k], 4) for k in KEYS}
        for key in (
            "length_bias_bound",
            "length_bias_ceiling",
            "cut_episode_share",
            "masked_episode_seconds_share",
        ):
            doc[key] = round(main_result[key], 4)
        doc["policy"] = POLICY
        doc["steps"] = steps
        doc["by_sigma"] = {
            str(r["sigma"]): {
                "useful_groups_per_time_ratio": round(r["useful_groups_per_time_ratio"], 4),
                "wasted_episode_seconds_share": round(r["wasted_episode_seconds_share"], 4),
                "length_bias": round(r["length_bias"], 4),
                "step_seconds": {
                    "wait_for_all": round(r["wait_for_all"].step_seconds, 1),
                    "policy": round(r["policy"].step_seconds, 1),
                },
            }
            for r in results
        }
        print(json.dumps(doc, sort_keys=True))
        return
    report(results, sweep, steps)
    print(f"(benchmark CPU time: {time.process_time() - started:.1f} s)")


if __name__ == "__main__":
    main()
