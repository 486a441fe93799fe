"""Runs slime's own choice of the Megatron actors' LD_PRELOAD (test support).

Started by `tests/support/slime_upstream.slime_preload` with this directory on PYTHONPATH,
AGENTRL_UPSTREAM_ROOTS naming one slime row's source, and a torch_memory_saver (a stand-in
package beside preload libraries, by file name) importable. It builds the row's own
`RayTrainGroup` and runs its `_allocate_gpus_for_actor` as `train.py` does for a colocated
Megatron run (`--offload-train`): slime looks for the preload library beside
torch_memory_saver, in its own order, and sets `LD_PRELOAD` in the actors' Ray runtime env.
The first Ray call after that, `ray.remote(**options)`, is intercepted and ends the run with
the env slime built, so no actor starts. Prints one JSON object: `{"LD_PRELOAD": path}`, or
`{"error": ...}` with what slime raised.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any


class _Built(Exception):
    """Carries the actor options slime passed to its first Ray call."""


class _Ray:
    """The `ray` name of slime's actor_group module, from the preload choice on."""

    @staticmethod
    def remote(**options: Any) -> Any:
        raise _Built(options)


def main() -> None:
    from slime.ray import actor_group

    # --offload-train with the Megatron backend: the path that sets LD_PRELOAD.
    args = SimpleNamespace(
        offload_train=True,
        train_backend="megatron",
        train_env_vars={},
        use_routing_replay=False,
        rollout_data_transport="object-store",
    )
    placement = (object(), [0], [0])  # (placement group, bundle indices, GPU ids)
    actor_group.ray = _Ray()  # type: ignore[attr-defined]
    try:
        # fa3c990 allocates in __init__, 624b824 only when asked: ask in both.
        group = actor_group.RayTrainGroup(args, 1, 1, placement, actor_cls=object)
        group._allocate_gpus_for_actor(placement, 1)
    except _Built as built:
        options = built.args[0]
        print(json.dumps({"LD_PRELOAD": options["runtime_env"]["env_vars"].get("LD_PRELOAD")}))
    except FileNotFoundError as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
    else:
        raise SystemExit("slime made no Ray call: its actor_group changed shape")


if __name__ == "__main__":
    main()
