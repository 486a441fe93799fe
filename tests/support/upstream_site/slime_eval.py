"""Runs slime's own eval logging on an eval pass of agentrl's rollout (test support).

Started by `tests/support/slime_upstream.slime_eval` with this directory on PYTHONPATH and
AGENTRL_UPSTREAM_ROOTS naming one slime row's source. Reads one JSON case on stdin:
`{"argv": [...], "sets": [spec.data.eval entries], "rollout_id": N}`. The argv is parsed with
the row's own parser (Megatron's, slime's and SGLang's arguments, as slime's parse_args
builds it; defaults for everything not given). agentrl's `eval_batch` then runs every set
on slime's own `Sample` and `RolloutFnEvalOutput` (the stub agent and gateway of
tests/bundle/rollout/doubles.py play the episodes, as the rows' metadata says), and what it
returns goes to the row's own eval logging, as `RolloutManager.eval` hands it over
(`_log_eval_rollout_data` in slime/ray/rollout.py at fa3c990, `log_eval_rollout_data` in
slime/observability/rollout_metrics.py at 624b824), with W&B and TensorBoard off. Prints one
JSON object: `log` (the dict slime logs) or `error` (what slime raised), and `gauges`
(agentrl's own eval figures, from its metrics registry).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from slime_parser import build_parser

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository (tests.*)


def _eval_pass(case: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    from tests.bundle.rollout.doubles import FakeGateway, StubAgent, runtime_config
    from tests.support.metrics import LocalSink

    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.bundle.rollout.batch import RolloutContext
    from agentrl.bundle.rollout.driver import eval_batch
    from agentrl.bundle.rollout.runtime import RolloutRuntime
    from agentrl.bundle.rollout.types import slime_types

    types = slime_types()
    assert types.real, "slime's Sample did not import"
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(4))
    metrics = BundleMetrics()

    async def build() -> RolloutContext:
        return ctx

    async def run() -> Any:
        runtime = RolloutRuntime(build, LocalSink(metrics))
        try:
            config = runtime_config(eval_sets=case["sets"])
            return await eval_batch(runtime, config, int(case.get("rollout_id", 0)), types)
        finally:
            runtime._thread.close()

    out = asyncio.run(run())
    gauges = {
        s.labels["eval_set"]: s.value
        for family in metrics.registry.collect()
        if family.name == "agentrl_eval_reward_mean"
        for s in family.samples
    }
    return out, gauges


def _log_function() -> Any:
    try:  # where later slime releases keep it
        return importlib.import_module("slime.observability.rollout_metrics").log_eval_rollout_data
    except ModuleNotFoundError:
        return importlib.import_module("slime.ray.rollout")._log_eval_rollout_data


def main() -> None:
    case = json.loads(sys.stdin.read())
    parser = build_parser()
    for action in parser._actions:  # only the flags given matter; the rest keep defaults
        action.required = False
    args, _ = parser.parse_known_args(case["argv"])
    args.use_wandb = args.use_tensorboard = False
    out, gauges = _eval_pass(case)
    result: dict[str, Any] = {"gauges": gauges}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            log = _log_function()(int(case.get("rollout_id", 0)), args, out.data, out.metrics)
        result["log"] = {k: float(v) for k, v in log.items()}
    except Exception as err:  # what slime raises is the finding
        result["error"] = f"{type(err).__name__}: {err}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
