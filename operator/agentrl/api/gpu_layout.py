"""Where slime puts each SGLang engine and each tensor-parallel group, node by node.

slime reserves one Ray placement group of one-GPU bundles for the whole run and sorts them by
node (IP address) and GPU id, so bundle `i` is GPU `i % gpusPerNode` of node
`i // gpusPerNode` (`slime/ray/placement_group.py`, `_create_placement_group`). Megatron's
ranks take the first bundles in order, and tensor parallelism groups consecutive ranks; the
SGLang engines take the rollout bundles (all of them when colocated, else the ones after
training's) in slices of `rolloutGpusPerEngine`, and each engine starts on the node of its
first bundle with the GPUs that follow it there (`slime/ray/rollout.py`, `start_engines`).
So a layout whose slices cross a node boundary is admitted by the arithmetic and fails late:

- an engine slice across two nodes asks its first node for GPUs it does not have, and the
  engine fails to start (an error here);
- a tensor-parallel group across two nodes runs its per-layer all-reduce over the network:
  it works, slowly (a warning naming the group).

Read at https://github.com/THUDM/slime/tree/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/ray
(the layout is the same at fa3c990).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentrl.api.findings import Finding, Rule, err, warn
from agentrl.api.models import RLExperiment
from agentrl.api.rules import layout_ok

R = "spec.resources"


def _nodes(first: int, last: int, per_node: int) -> tuple[int, int]:
    return first // per_node, last // per_node


def engines_on_one_node(exp: RLExperiment) -> Iterator[Finding]:
    """Each SGLang engine's GPUs lie on one node, or (an engine larger than a node) on whole
    nodes of its own: slime starts an engine on the node of its first GPU."""
    res = exp.spec.resources
    per_node, per_engine = res.gpus_per_node, res.rollout_gpus_per_engine
    if not layout_ok(exp) or res.engine_gpus % per_engine:
        return  # the split itself is wrong: rollout_placement and engines_fit say so
    offset = 0 if res.colocate else res.actor_gpus
    path = f"{R}.rolloutGpusPerEngine"
    if per_engine > per_node:
        if per_engine % per_node or offset % per_node:
            yield err(
                path,
                f"an engine of {per_engine} GPUs spans nodes of {per_node}: it must take whole "
                "nodes" + (", starting on a node of its own" if offset % per_node else ""),
                f"use a multiple of gpusPerNode ({per_node}), or at most {per_node}",
            )
        return
    for engine in range(res.engine_gpus // per_engine):
        first = offset + engine * per_engine
        start, end = _nodes(first, first + per_engine - 1, per_node)
        if start != end:
            local = first % per_node
            yield err(
                path,
                f"SGLang engine {engine} would take GPUs {local}-{per_node - 1} of node {start} "
                f"and 0-{(first + per_engine - 1) % per_node} of node {end}; slime starts it "
                f"on node {start}, which has no GPU {per_node}",
                f"make rolloutGpusPerEngine divide gpusPerNode ({_divisors(per_node)})",
            )
            return  # one is enough: the rest repeat it


def tensor_groups_on_one_node(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: a tensor-parallel group of the trainer spans two nodes (its per-layer
    all-reduce then crosses the network)."""
    res = exp.spec.resources
    tensor, per_node = res.parallelism.tensor, res.gpus_per_node
    if not layout_ok(exp) or tensor == 1 or res.actor_gpus % tensor:
        return
    for group in range(res.actor_gpus // tensor):
        first = group * tensor
        start, end = _nodes(first, first + tensor - 1, per_node)
        if start != end:
            yield warn(
                f"{R}.parallelism.tensor",
                f"tensor-parallel group {group} (ranks {first}-{first + tensor - 1}) spans "
                f"nodes {start} and {end}"
                + (f" (of {per_node} GPUs)" if tensor < per_node else "")
                + ": every layer's all-reduce crosses the network",
                f"use a tensor size that divides gpusPerNode ({_divisors(per_node)})",
            )
            return


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


RULES: tuple[Rule, ...] = (engines_on_one_node, tensor_groups_on_one_node)
