"""The gang preflight's wall time, against how long slime takes to start on the same spec.

Measured: the launcher's `--gang-preflight` (gloo standing in for NCCL, CPU tensors) on a
local Ray gang of the rendered RayJob, a head and `--workers` GPU workers (tests/support/
ray_gang), from the process start to its exit: Python and Ray start-up, the node checks on
every worker, the rendezvous, one all-reduce over the gang and one per node pair.

Estimated, not measured (no GPU here): the time slime needs on the four-node example
(examples/qwen3-32b-swe-4node-tp-pp.yaml) before its first collective over the whole gang
can fail, from the flags the launcher composes (docs/launcher.md, "What the preflight
saves", gives the model and its assumed rates):

    actors  = ACTOR_START_S                      Ray actors on every node import torch,
                                                 Megatron and SGLang, join process groups
    load    = 2 * W / READ_GBPS                  Megatron reads --ref-load, the engines
                                                 read --hf-checkpoint (W: bf16 weights,
                                                 2 bytes a parameter, from MODEL_ARGS)
    graphs  = CUDA_GRAPH_S                       SGLang captures CUDA graphs, unless
                                                 --sglang-disable-cuda-graph
    sync    = W / SYNC_GBPS                      the first weight update to the engines

    python benchmarks/preflight.py             # 4 workers, 1 MiB a rank
    python benchmarks/preflight.py --quick     # 2 workers (run by the test suite)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import ray_gang, slime_upstream  # noqa: E402

from agentrl.api.models import RLExperiment  # noqa: E402
from agentrl.bundle.launch import probe  # noqa: E402
from agentrl.slimecmd import PodFacts, Start, compose  # noqa: E402

ACTOR_START_S = 120.0  # assumed
READ_GBPS = 1.0  # assumed: one reader of a shared checkpoint volume
CUDA_GRAPH_S = 60.0  # assumed
SYNC_GBPS = 10.0  # assumed: a disaggregated run's weight update over the network
SLIME_ROW = "fa3c990"


def flag(argv: list[str], name: str) -> str | None:
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def parameters(args: list[str]) -> int:
    """Parameters of a dense transformer described by Megatron's MODEL_ARGS."""
    hidden = int(flag(args, "--hidden-size") or 0)
    layers = int(flag(args, "--num-layers") or 0)
    ffn = int(flag(args, "--ffn-hidden-size") or 4 * hidden)
    vocab = int(flag(args, "--vocab-size") or 0)
    heads = int(flag(args, "--num-attention-heads") or 1)
    groups = int(flag(args, "--num-query-groups") or heads)
    channels = int(flag(args, "--kv-channels") or hidden // heads)
    attention = hidden * heads * channels * 2 + hidden * groups * channels * 2
    mlp = hidden * ffn * (3 if "--swiglu" in args else 2)
    embeddings = vocab * hidden * (1 if "--untie-embeddings-and-output-weights" not in args else 2)
    return layers * (attention + mlp) + embeddings


def slime_startup(exp: RLExperiment) -> dict[str, Any]:
    """The estimate's terms for the flags the launcher composes for `exp`."""
    model_args = probe.model_args(str(slime_upstream.slime_dir(SLIME_ROW)), exp.spec.model.type)
    cmd = compose(
        exp.spec,
        PodFacts(model_args=model_args, train_env={}, wandb_key=False, start=Start.FIRST_RUN,
                 hf_mode_flag=True),
    )  # fmt: skip
    argv = cmd.argv()
    weights = 2 * parameters(model_args)
    terms = {
        "actors": ACTOR_START_S,
        "load": 2 * weights / 1e9 / READ_GBPS,
        "graphs": 0.0 if "--sglang-disable-cuda-graph" in argv else CUDA_GRAPH_S,
        "sync": weights / 1e9 / SYNC_GBPS,
    }
    return {"weights_gb": weights / 1e9, "terms": terms, "total": sum(terms.values())}


def run_preflight(workers: int, mib: int) -> tuple[float, str]:
    with tempfile.TemporaryDirectory(prefix="agentrl-preflight-") as tmp:
        gang = ray_gang.Gang(Path(tmp), workers, "256Mi", 120)
        try:
            start = time.perf_counter()
            launcher = gang.launch(mib)
            _, stderr = launcher.communicate(timeout=600)
            wall = time.perf_counter() - start
        finally:
            gang.cluster.shutdown()
        if launcher.returncode != 0:
            raise SystemExit(f"the preflight failed:\n{stderr}")
        summary = next(x for x in stderr.splitlines() if "gang preflight passed" in x)
        return wall, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--mib", type=int, default=1, help="MiB each rank all-reduces")
    parser.add_argument("--quick", action="store_true", help="2 workers")
    ns = parser.parse_args()
    workers = 2 if ns.quick else ns.workers
    slime_upstream.require_upstream()
    (doc,) = [d for d in ray_gang.yaml.safe_load_all(ray_gang.FOUR_NODES.read_text()) if d]
    estimate = slime_startup(RLExperiment.model_validate(doc))
    wall, summary = run_preflight(workers, ns.mib)
    terms = ", ".join(f"{k} {v:.0f} s" for k, v in estimate["terms"].items())
    print(f"gang preflight, {workers} workers (gloo, {ns.mib} MiB a rank): {wall:.1f} s wall")
    print(f"  {summary.split(': ', 1)[1]}")
    print(
        f"slime's startup, estimated for {ray_gang.FOUR_NODES.name} "
        f"({estimate['weights_gb']:.1f} GB of bf16 weights): {estimate['total']:.0f} s ({terms})"
    )
    print(f"ratio preflight / slime startup: {wall / estimate['total']:.3f}")


if __name__ == "__main__":
    main()
