"""Trace-merging throughput: prompt tokens/s of `merge_turns` against two baselines.

Workload: episodes whose contexts grow to 16k tokens over 32 turns (one chain), and the
same prompt-token volume spread over 8 and 64 concurrent chains per episode (sub-agents
sharing a long system prompt, their turns interleaved round-robin). Token ids come out of
a JSON round trip, as the rollout receives them from the gateway (fresh int objects, so
no identity shortcut in comparisons).

Measured in the same run, on one core (CPU time of this process):
- ours:     `agentrl.bundle.traces.merge_turns` on each episode;
- naive:    a chain-tip scan (each new prompt compared with every open chain's tip prompt +
            completion, the longest match wins), the obvious implementation;
- list_cmp: the floor of any exact merge on these inputs: every prompt token compared once
            with `==` on Python lists (against a second decode of the same ids);
- numpy:    raw array-compare bandwidth: the same compares with `np.array_equal` on int32
            arrays converted beforehand (conversion not counted): the memcmp ceiling.
Goal: ours >= 100M prompt tokens/s, and per-token cost at 64 chains <= 1.5x that of 1.
`io_cost_vs_1` is the same cost per prompt + output token: with 64 sub-agents every
segment repeats the shared system prompt, so the lists handed to slime grow tenfold.

Retries: one episode of n identical retries of a turn (an agent retrying a call, or n
samples of one state), each its own segment. The cost per turn is compared with the same
turn merged alone (n one-turn episodes): linear merging keeps the ratio near 1 at any n
(the quadratic index this replaced took 28 s for 100k retries, ~1,000x the per-turn cost).
Aborted retries (empty completions) mark the same node; sampled ones share one leaf.

    python benchmarks/merge.py            # 512 episodes per shape, 100k retries
    python benchmarks/merge.py --quick    # a few seconds (run by the test suite)
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agentrl.bundle.traces import Turn, merge_turns, merge_turns_with_stats

TURNS_ONE_CHAIN = 32
CONTEXT = 16_384
SYSTEM_ONE_CHAIN = 512
DISTINCT = 4  # distinct episodes per shape, merged in turn (memory stays small)
ROUNDS = 8


@dataclass
class Shape:
    chains: int
    turns_per_chain: int
    system: int  # shared system prompt tokens
    step: int  # tokens a chain grows by per turn (bridge + completion)


def shapes(scale: float) -> list[Shape]:
    """1, 8 and 64 chains with (about) the same prompt-token volume per episode."""
    step = int((CONTEXT - SYSTEM_ONE_CHAIN) / TURNS_ONE_CHAIN * scale)
    one = Shape(1, TURNS_ONE_CHAIN, int(SYSTEM_ONE_CHAIN * scale), step)
    volume = _volume(one)
    out = [one]
    for chains, turns in ((8, 4), (64, 2)):
        growth = chains * step * turns * (turns + 1) // 2
        out.append(Shape(chains, turns, (volume - growth) // (chains * turns), step))
    return out


def _volume(s: Shape) -> int:
    return s.chains * (
        s.turns_per_chain * s.system + s.step * s.turns_per_chain * (s.turns_per_chain + 1) // 2
    )


def episode(shape: Shape, rng: random.Random) -> list[Turn]:
    """Interleaved chains; ids decoded from JSON like the gateway's admin API returns them."""
    system = [rng.randrange(150_000) for _ in range(shape.system)]
    fulls = [list(system) for _ in range(shape.chains)]
    raw: list[tuple[list[int], list[int]]] = []
    completion_len = max(1, shape.step // 4)
    for _ in range(shape.turns_per_chain):
        for c in range(shape.chains):
            bridge = [rng.randrange(150_000) for _ in range(shape.step - completion_len)]
            prompt = fulls[c] + bridge
            completion = [rng.randrange(150_000) for _ in range(completion_len)]
            raw.append((prompt, completion))
            fulls[c] = prompt + completion
    decoded = json.loads(json.dumps([[p, c] for p, c in raw]))
    return [Turn(p, c, [-0.25] * len(c), "stop") for p, c in decoded]


def naive_merge(turns: Sequence[Turn]) -> int:
    """Chain-tip scan: compare every open chain's full sequence with each new prompt."""
    chains: list[list[int]] = []
    for t in turns:
        prompt = list(t.prompt_ids)
        best = -1
        for i, full in enumerate(chains):
            n = len(full)
            if n <= len(prompt) and prompt[:n] == full and (best < 0 or n > len(chains[best])):
                best = i
        full_now = prompt + list(t.completion_ids)
        if best < 0:
            chains.append(full_now)
        else:
            chains[best] = full_now
    return len(chains)


def list_compare(pairs: Sequence[tuple[list[int], list[int]]]) -> int:
    """The exact-compare floor on Python lists: every prompt token compared once."""
    return sum(a == b for a, b in pairs)


def numpy_compare(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> int:
    """The memcmp ceiling: every prompt token compared once, ids already int32 arrays."""
    return sum(bool(np.array_equal(a, b)) for a, b in pairs)


def compare_inputs(turns: Sequence[Turn]) -> list[tuple[list[int], list[int]]]:
    """Each prompt paired with an equal copy from a second decode (fresh int objects)."""
    copies = json.loads(json.dumps([t.prompt_ids for t in turns]))
    return [(list(t.prompt_ids), c) for t, c in zip(turns, copies, strict=True)]


def rate(fn: Callable[[int], object], episodes: int, tokens_per_episode: int) -> float:
    """Prompt tokens per CPU second: `episodes` calls split into rounds, the best round
    counted (as timeit does: other processes on the machine only ever slow a round down)."""
    rounds = min(ROUNDS, episodes)
    per_round = episodes // rounds
    best = 0.0
    for r in range(rounds):
        gc.collect()  # every round starts from the same heap
        gc.freeze()  # the fixtures are not the merge's garbage to scan
        start = time.process_time()
        for i in range(r * per_round, (r + 1) * per_round):
            fn(i)
        elapsed = max(time.process_time() - start, 1e-9)
        best = max(best, per_round * tokens_per_episode / elapsed)
    return best


def measure(shape: Shape, rng: random.Random, episodes: int, naive_episodes: int) -> list[float]:
    """[prompt tokens, output tokens per episode, ours, naive, list floor, numpy]."""
    eps = [episode(shape, rng) for _ in range(DISTINCT)]
    tokens = sum(len(t.prompt_ids) for t in eps[0])
    segments = merge_turns(eps[0])
    if len(segments) != shape.chains:
        raise AssertionError("the workload must merge back into one segment per chain")
    pairs = [compare_inputs(e) for e in eps]
    arrays = [[(np.asarray(a, np.int32), np.asarray(b, np.int32)) for a, b in p] for p in pairs]
    return [
        tokens,
        sum(len(s.tokens) for s in segments),
        rate(lambda i: merge_turns(eps[i % DISTINCT]), episodes, tokens),
        rate(lambda i: naive_merge(eps[i % DISTINCT]), naive_episodes, tokens),
        rate(lambda i: list_compare(pairs[i % DISTINCT]), episodes, tokens),
        rate(lambda i: numpy_compare(arrays[i % DISTINCT]), episodes, tokens),
    ]


def run(episodes: int, naive_episodes: int, scale: float) -> None:
    rng = random.Random(7)
    print("prompt tokens/s in millions (CPU time, one core); out = segment tokens handed to slime")
    print(f"{'chains':>6} {'prompt_tok/ep':>13} {'out/prompt':>10} {'ours':>8} {'naive':>8} "
          f"{'list_cmp':>8} {'numpy':>8} {'ours/naive':>10} {'ours/numpy':>10} "
          f"{'cost_vs_1':>9} {'io_cost_vs_1':>12}")  # fmt: skip
    rows = [measure(shape, rng, episodes, naive_episodes) for shape in shapes(scale)]
    base, base_io = rows[0][2], rows[0][2] * (1 + rows[0][1] / rows[0][0])
    for shape, (tokens, out, ours, naive, floor, ceiling) in zip(shapes(scale), rows, strict=True):
        io = ours * (1 + out / tokens)  # prompt + output tokens per second
        print(f"{shape.chains:>6} {tokens:>13.0f} {out / tokens:>10.2f} {ours / 1e6:>8.1f} "
              f"{naive / 1e6:>8.1f} {floor / 1e6:>8.1f} {ceiling / 1e6:>8.1f} "
              f"{ours / naive:>9.2f}x {ours / ceiling:>9.3f}x {base / ours:>8.2f}x "
              f"{base_io / io:>11.2f}x")  # fmt: skip
    worst = max(base / r[2] for r in rows)
    print(f"ours, 1 chain: {base / 1e6:.1f}M prompt tok/s (goal >= 100M)")
    print(f"per-token cost, worst vs 1 chain: {worst:.2f}x (goal <= 1.5x)")


RETRY_PROMPT = 64  # tokens of the retried turn's prompt
RETRY_COMPLETION = 4


def retry_episode(n: int, aborted: bool) -> list[Turn]:
    prompt = list(range(1000, 1000 + RETRY_PROMPT))
    completion = [] if aborted else list(range(5000, 5000 + RETRY_COMPLETION))
    lps = [-0.25] * len(completion)
    raw = json.loads(json.dumps([[prompt, completion]] * n))  # fresh ints, as from JSON
    return [Turn(p, c, lps, "abort" if aborted else "stop") for p, c in raw]


def per_turn_seconds(fn: Callable[[], object], turns: int, rounds: int = 3) -> float:
    """CPU seconds per turn of `fn` (best of `rounds`, fixtures frozen out of the GC)."""
    best = math.inf
    for _ in range(rounds):
        gc.collect()
        gc.freeze()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
        gc.unfreeze()
    return best / turns


def run_retries(n: int) -> None:
    """n identical retries in one episode against the same turns merged one per episode."""
    print(f"\nidentical retries of one turn ({RETRY_PROMPT}-token prompt), CPU us per turn")
    print(f"{'retries':>8} {'kind':>8} {'episode_s':>9} {'us/turn':>8} {'alone':>8} {'ratio':>7}")
    worst = 0.0
    for aborted in (False, True):
        kind = "aborted" if aborted else "sampled"
        turns = retry_episode(n, aborted)
        alone = [[t] for t in turns]

        expected = 0 if aborted else n

        def together(turns: list[Turn] = turns, expected: int = expected) -> None:
            if len(merge_turns_with_stats(turns)[0]) != expected:
                raise AssertionError("every sampled retry must be its own segment")

        def separately(alone: list[list[Turn]] = alone) -> None:
            for episode_turns in alone:
                merge_turns(episode_turns)

        ours = per_turn_seconds(together, n, rounds=1 if n > 10_000 else 3)
        base = per_turn_seconds(separately, n)
        worst = max(worst, ours / base)
        print(f"{n:>8} {kind:>8} {ours * n:>9.2f} {ours * 1e6:>8.2f} {base * 1e6:>8.2f} "
              f"{ours / base:>6.2f}x")  # fmt: skip
    print(
        f"retries: {n} in one episode cost {worst:.2f}x per turn of one-turn episodes "
        "(linear: about 1x at any n)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small run for the test suite")
    parser.add_argument("--episodes", type=int, default=512, help="episodes per shape")
    parser.add_argument("--retries", type=int, default=100_000, help="identical retries")
    opts = parser.parse_args(argv)
    if opts.quick:
        run(episodes=8, naive_episodes=4, scale=0.125)
        run_retries(2_000)
    else:
        run(episodes=opts.episodes, naive_episodes=max(8, opts.episodes // 16), scale=1.0)
        run_retries(opts.retries)


if __name__ == "__main__":
    main()
