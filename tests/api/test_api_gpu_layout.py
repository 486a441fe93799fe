"""Engines and tensor groups on nodes (agentrl.api.gpu_layout), against slime's own layout.

slime's `sort_key` (placement_group.py) runs here as upstream wrote it, on the bundles a
cluster of N nodes x G GPUs reports in any order; the rule's model (bundle i is GPU i % G of
node i // G) must be what it produces. The engine slicing the rule assumes is read from
slime's rollout.py at each supported row.
"""

from __future__ import annotations

import ast
import random
import re
import socket
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support import slime_upstream

from agentrl.api.validation import parse_experiment


def _sort_key(row: str) -> Any:
    source = (slime_upstream.slime_dir(row) / "slime/ray/placement_group.py").read_text()
    (func,) = [n for n in ast.parse(source).body if getattr(n, "name", "") == "sort_key"]
    namespace: dict[str, Any] = {"socket": socket}
    exec(compile(ast.Module([func], []), "placement_group.py", "exec"), namespace)
    return namespace["sort_key"]


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_slime_orders_bundles_node_by_node(row: str) -> None:
    sort_key = _sort_key(row)
    nodes, per_node = 3, 6
    bundles = [(f"10.0.{n}.{7 - n}", str(g)) for n in range(nodes) for g in range(per_node)]
    random.Random(0).shuffle(bundles)  # Ray reports bundles in any order
    ordered = sorted(((i, ip, gpu) for i, (ip, gpu) in enumerate(bundles)), key=sort_key)
    ips = sorted({ip for ip, _ in bundles}, key=lambda ip: [int(p) for p in ip.split(".")])
    for index, (_, ip, gpu) in enumerate(ordered):
        assert (ips.index(ip), int(gpu)) == (index // per_node, index % per_node)


@pytest.mark.parametrize("row", slime_upstream.ROWS)
def test_slime_starts_each_engine_at_its_first_bundle(row: str) -> None:
    source = (slime_upstream.slime_dir(row) / "slime/ray/rollout.py").read_text()
    assert re.search(
        r"gpu_index = self\.gpu_offset \+ i \* num_gpus?_per_engine(_on_node)?", source
    )
    assert "placement_group_bundle_index=reordered_bundle_indices[gpu_index]" in source
    assert re.search(r"base_gpu_id = int\(reordered_gpu_ids\[gpu_index\]\)", source)


# 48 attention heads: tensor 3 and 8 divide them (the minimal spec's Qwen2.5-0.5B has 14).
GLM4_32B = {"path": "THUDM/GLM-4-32B-0414", "type": "glm4-32B", "refLoad": "/models/glm4-32b"}


def _found(model: dict[str, Any] | None = None, **resources: Any) -> list[str]:
    grpo = {"numRollouts": 10, "rolloutBatchSize": 24}
    body = minimal_body(resources=resources, grpo=grpo)
    if model is not None:
        body["spec"]["model"] = model
    return [str(p) for p in parse_experiment(body)[1]]


@pytest.mark.parametrize(
    ("resources", "words"),
    [
        ({"nodes": 2, "gpusPerNode": 6, "rolloutGpusPerEngine": 4},
         "spec.resources.rolloutGpusPerEngine: SGLang engine 1 would take GPUs 4-5 of node 0 "
         "and 0-1 of node 1"),
        ({"nodes": 2, "gpusPerNode": 6, "parallelism": {"tensor": 4}},
         "warning: spec.resources.parallelism.tensor: tensor-parallel group 1 (ranks 4-7) "
         "spans nodes 0 and 1"),
        ({"nodes": 3, "gpusPerNode": 8, "rolloutGpusPerEngine": 12},
         "spec.resources.rolloutGpusPerEngine: an engine of 12 GPUs spans nodes of 8"),
        ({"nodes": 3, "gpusPerNode": 8, "colocate": False, "rolloutGpus": 20,
          "rolloutGpusPerEngine": 5}, "spec.resources.rolloutGpusPerEngine: SGLang engine 0"),
    ],
)  # fmt: skip
def test_groups_across_nodes_are_named(resources: dict[str, Any], words: str) -> None:
    found = _found(**resources)
    assert any(p.startswith(words) for p in found), found


@pytest.mark.parametrize(
    "resources",
    [
        {"nodes": 2, "gpusPerNode": 8, "rolloutGpusPerEngine": 16},  # whole nodes per engine
        # (not 3: GLM-4-32B's 8 key/value heads take no tensor size of 3, in Megatron or SGLang)
        {"nodes": 2, "gpusPerNode": 6, "rolloutGpusPerEngine": 2, "parallelism": {"tensor": 2}},
        {"nodes": 4, "gpusPerNode": 8, "colocate": False, "rolloutGpus": 16,
         "rolloutGpusPerEngine": 8, "parallelism": {"tensor": 8}},
    ],
)  # fmt: skip
def test_layouts_that_fit_the_nodes_pass(resources: dict[str, Any]) -> None:
    assert not [p for p in _found(GLM4_32B, **resources) if "spec.resources" in p]
