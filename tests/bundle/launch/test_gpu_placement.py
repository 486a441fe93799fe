"""spec.resources' GPU split against slime's own placement arithmetic, at each supported row.

The launcher's argv for the Qwen2.5-7B example (launch_pod) has its cluster flags replaced by
`flags.cluster_args` of each layout here; slime's own `parse_args` then fills in what it
derives (`rollout_num_gpus` under `--colocate`), and its `_get_placement_group_layout`
(slime/ray/placement_group.py) says how many GPUs its one placement group reserves and where
the rollout engines' GPUs start. agentrl's `total_gpus`, `actor_gpus` and `engine_gpus`,
which size the RayJob's worker group and the rules, must be slime's numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from launch_pod import Pod, slime_upstream
from tests.conftest import minimal_body

from agentrl.api.validation import parse_experiment
from agentrl.slimecmd import flags

ROWS = slime_upstream.ROWS
pytestmark = pytest.mark.slow  # launches the launcher and runs slime's parser

LAYOUTS: list[dict[str, Any]] = [
    {"nodes": 1, "gpusPerNode": 8},
    {"nodes": 2, "gpusPerNode": 4, "rolloutGpusPerEngine": 4},
    {"nodes": 2, "gpusPerNode": 8, "rolloutGpusPerEngine": 16},
    {"nodes": 4, "gpusPerNode": 8, "colocate": False, "rolloutGpus": 16, "rolloutGpusPerEngine": 4},
    {"nodes": 1, "gpusPerNode": 8, "colocate": False, "rolloutGpus": 6},
    {"nodes": 3, "gpusPerNode": 8, "colocate": False, "rolloutGpus": 8, "rolloutGpusPerEngine": 8},
    {"nodes": 3, "gpusPerNode": 8, "colocate": False, "rolloutGpus": 20, "rolloutGpusPerEngine": 4},
]
CLUSTER = ("--actor-num-nodes", "--sequence-parallel")  # first and last of cluster_args


def _spec(resources: dict[str, Any]) -> Any:
    body = minimal_body(
        model={"path": "Qwen/Q", "refLoad": "/models/q", "type": "qwen3-4B"},
        resources={"parallelism": {"tensor": 2}, **resources},
        grpo={"numRollouts": 10, "rolloutBatchSize": 32, "samplesPerPrompt": 8,
              "globalBatchSize": 64},
    )  # fmt: skip
    exp, problems = parse_experiment(body)
    assert exp is not None, [str(p) for p in problems]
    return exp.spec


@pytest.mark.parametrize("row", ROWS)
def test_the_split_is_slime_s(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    first, last = argv.index(CLUSTER[0]), argv.index(CLUSTER[1])
    specs = [_spec(layout) for layout in LAYOUTS]
    cases = [
        {"argv": [*argv[:first], *flags.cluster_args(s), *argv[last + 1 :]], "env": env,
         "placement": True}
        for s in specs
    ]  # fmt: skip
    results = slime_upstream.run_slime(row, cases)
    for layout, spec, result in zip(LAYOUTS, specs, results, strict=True):
        assert result.get("parse_error") is None, (layout, result.get("trace"))
        res = spec.resources
        assert result["placement"] == {
            "gpus": res.total_gpus,
            "rollout_offset": 0 if res.colocate else res.actor_gpus,
            "actor_gpus": res.actor_gpus,
            "rollout_num_gpus": res.engine_gpus,
            "rollout_num_gpus_per_engine": res.rollout_gpus_per_engine,
            "num_gpus_per_node": res.gpus_per_node,
            "colocate": res.colocate,
        }, layout
