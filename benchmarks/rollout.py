"""Rollout overhead: 1,000 concurrent stub episodes, CPU ms per episode and peak RSS.

Two phases run in fresh subprocesses (so each peak RSS is its own), in the same run:
- baseline: the unavoidable work of an episode done by a bare `asyncio.gather` (open a
  gateway session, the agent records its turns, read them back, merge, close);
- rollout: the same episodes through agentrl's batch machinery (`run_groups`: the shared
  semaphore, timeouts, payloads, failure handling, metric recording, sample building,
  conversion to slime's Sample type).
The ratio is agentrl's overhead on top of the work itself. The agent and gateway are
in-process doubles (no network), so the figures are the rollout's own CPU cost.

    python benchmarks/rollout.py            # 1,000 episodes
    python benchmarks/rollout.py --quick    # 100 episodes (run by the test suite)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import secrets
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

TURNS = 4  # model calls per episode
PROMPT = 512  # tokens in the first prompt
COMPLETION = 64  # tokens per completion
BRIDGE = 32  # tool-result tokens between turns


class Gateway:
    """An in-process GatewaySessions double."""

    def __init__(self) -> None:
        self.turns: dict[str, list[Any]] = {}

    async def create_session(self, session_id: str, sampling_params: Mapping[str, Any]) -> Any:
        from agentrl.bundle.session import SessionHandle

        self.turns[session_id] = []
        return SessionHandle(session_id, f"http://gw/sessions/{session_id}/v1", "t")

    async def get_turns(self, session_id: str) -> Sequence[Any]:
        return self.turns[session_id]

    async def close_session(self, session_id: str) -> None:
        self.turns.pop(session_id, None)


def record_turns(gateway: Gateway, sid: str) -> None:
    from agentrl.bundle.traces import Turn

    prompt = list(range(PROMPT))
    for i in range(TURNS):
        completion = [10_000 + i] * COMPLETION
        gateway.turns[sid].append(Turn(prompt, completion, [-0.1] * COMPLETION, "stop"))
        prompt = prompt + completion + [20_000] * BRIDGE


class Agent:
    """An AgentBackend double: yields to the loop (a remote agent would), records turns."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def run(self, request: Any) -> Any:
        from agentrl.bundle.agents.base import AgentResult

        await asyncio.sleep(0)
        record_turns(self.gateway, request.session_id)
        await asyncio.sleep(0)
        return AgentResult(reward=1.0, document={})

    def pool_stats(self) -> Any:
        from agentrl.bundle.agents.base import PoolStats

        return PoolStats(size=10, in_use=0)

    async def aclose(self) -> None:
        pass


async def baseline(n: int) -> int:
    from agentrl.bundle.traces import merge_turns

    gateway = Gateway()

    async def episode() -> int:
        sid = secrets.token_urlsafe(32)
        await gateway.create_session(sid, {})
        await asyncio.sleep(0)
        record_turns(gateway, sid)
        await asyncio.sleep(0)
        segments = merge_turns(await gateway.get_turns(sid), 4096)
        await gateway.close_session(sid)
        return len(segments)

    return sum(await asyncio.gather(*(episode() for _ in range(n))))


async def rollout(n: int) -> int:
    from agentrl.bundle.rollout.batch import RolloutContext, group_samples, run_groups
    from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec
    from agentrl.bundle.rollout.types import slime_types, to_sample

    gateway = Gateway()
    ctx = RolloutContext(gateway, Agent(gateway), asyncio.Semaphore(n))
    spec = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 4096}, 4096, 900.0, "m")
    groups = [
        [EpisodeInput("p", {"task": g}, None, group_index=g, index=g * 8 + i) for i in range(8)]
        for g in range(n // 8)
    ]
    outcomes = await run_groups(ctx, groups, spec, "train")
    types = slime_types()
    samples = [[to_sample(s, types) for s in g] for g in group_samples(outcomes)]
    ctx.recorder.take()
    return sum(len(g) for g in samples)


def run_phase(phase: str, n: int) -> dict[str, float]:
    fn = baseline if phase == "baseline" else rollout
    # Import first: module loading is a one-off cost, not a per-episode one.
    import importlib

    from agentrl.bundle.rollout.types import slime_types

    for module in ("agentrl.bundle.rollout.batch", "agentrl.bundle.traces"):
        importlib.import_module(module)
    slime_types()
    start = time.process_time()
    sequences = asyncio.run(fn(n))
    cpu = time.process_time() - start
    if sequences != n - n % 8 and not (phase == "baseline" and sequences == n):
        raise SystemExit(f"{phase}: expected one sequence per episode, got {sequences}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"cpu_ms_per_episode": 1000 * cpu / sequences, "peak_rss_mb": peak_mb, "n": sequences}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 episodes instead of 1,000")
    parser.add_argument("--phase", choices=["baseline", "rollout"], help=argparse.SUPPRESS)
    parser.add_argument("--episodes", type=int, default=None)
    opts = parser.parse_args()
    n = opts.episodes or (104 if opts.quick else 1000)
    if opts.phase:
        print(json.dumps(run_phase(opts.phase, n)))
        return
    results = {}
    for phase in ("baseline", "rollout"):
        out = subprocess.run(
            [sys.executable, __file__, "--phase", phase, "--episodes", str(n)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        results[phase] = json.loads(out.stdout.strip().splitlines()[-1])
    base, ours = results["baseline"], results["rollout"]
    print(f"{n} concurrent stub episodes ({TURNS} turns, {PROMPT}-token prompts)")
    print(f"{'':10} {'CPU ms/episode':>15} {'peak RSS MB':>12}")
    for name, r in (("baseline", base), ("rollout", ours)):
        print(f"{name:10} {r['cpu_ms_per_episode']:15.3f} {r['peak_rss_mb']:12.1f}")
    ratio = ours["cpu_ms_per_episode"] / base["cpu_ms_per_episode"]
    print(
        f"rollout/baseline CPU: {ratio:.2f}x  RSS: {ours['peak_rss_mb'] / base['peak_rss_mb']:.2f}x"
    )


if __name__ == "__main__":
    main()
