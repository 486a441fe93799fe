"""`agentrl render --summary`: what a newcomer wants to see of a render, on one screen.

The full render is mostly the bundle ConfigMap (agentrl's code as a base64 zip archive),
which buries the RayJob and slime's command. The summary lists each object with its name,
size and purpose, the GPU layout the spec asks for (pods, what trains, what generates),
and slime's command line; the objects themselves go to a file (`agentrl render -f X >
FILE`). Pure: rendered objects in, text out (`text`), or the same as data for
`--summary -o json` (`data`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from agentrl.api.models import RLExperiment
from agentrl.render import names

Obj = Mapping[str, Any]


def text(exp: RLExperiment, objects: Sequence[Obj], command: str) -> str:
    meta = exp.metadata
    sizes = [_yaml_bytes(o) for o in objects]
    lines = [
        f"RLExperiment {meta.namespace}/{meta.name}: {len(objects)} objects, "
        f"{_size(sum(sizes))} of YAML",
        *_table(
            ["KIND", "NAME", "SIZE", "WHAT"],
            [
                [o["kind"], o["metadata"]["name"], _size(n), _purpose(exp, o)]
                for o, n in zip(objects, sizes, strict=True)
            ],
        ),
        "",
        *gpu_layout(exp),
        "",
        "slime command (the launcher composes it in the pod; <...> is what only the pod knows):",
        *("  " + line for line in command.rstrip("\n").splitlines()),
    ]
    return "\n".join(lines) + "\n"


def data(exp: RLExperiment, objects: Sequence[Obj], argv: Sequence[str]) -> dict[str, Any]:
    """What `text` shows, as JSON-ready data; `argv` is slime's command, one word an item."""
    meta = exp.metadata
    rows = [
        {"kind": o["kind"], "name": o["metadata"]["name"], "bytes": _yaml_bytes(o),
         "what": _purpose(exp, o)}
        for o in objects
    ]  # fmt: skip
    return {
        "namespace": meta.namespace,
        "name": meta.name,
        "bytes": sum(r["bytes"] for r in rows),
        "objects": rows,
        "gpuLayout": _layout(exp),
        "command": list(argv),
    }


def _layout(exp: RLExperiment) -> dict[str, Any]:
    res, head = exp.spec.resources, exp.spec.resources.head
    par = res.parallelism
    return {
        "gpus": res.total_gpus,
        "colocate": res.colocate,
        "head": {"pods": 1, "cpu": str(head.cpu), "memory": str(head.memory)},
        "workers": {
            "pods": res.nodes,
            "gpusPerPod": res.gpus_per_node,
            "gpuResourceName": res.gpu_resource_name,
            "cpu": str(res.cpu),
            "memory": str(res.memory),
            "shmSize": str(res.shm_size),
            "extraResources": dict(sorted(res.extra_resources.items())),
        },
        "training": {
            "gpus": res.actor_gpus,
            "tensor": par.tensor,
            "pipeline": par.pipeline,
            "context": par.context,
            "dataParallel": res.actor_gpus // par.model_parallel_size,
        },
        "rollout": {
            "gpus": res.engine_gpus,
            "engines": res.engine_gpus // res.rollout_gpus_per_engine,
            "gpusPerEngine": res.rollout_gpus_per_engine,
        },
    }


def gpu_layout(exp: RLExperiment) -> list[str]:
    res, head = exp.spec.resources, exp.spec.resources.head
    par = res.parallelism
    layout = _layout(exp)
    extra = "".join(f", {k} {v}" for k, v in layout["workers"]["extraResources"].items())
    data_parallel = layout["training"]["dataParallel"]
    engines = layout["rollout"]["engines"]
    pods = "pod" if res.nodes == 1 else "pods"
    rows = [
        ["head", f"1 pod, CPU only (cpu {head.cpu}, memory {head.memory}): the gateway, "
         "metrics, Ray's head"],
        ["workers", f"{res.nodes} {pods} x {res.gpus_per_node} {res.gpu_resource_name} (cpu "
         f"{res.cpu}, memory {res.memory}, /dev/shm {res.shm_size}{extra}); slime's driver "
         "runs on one of them"],
        ["training", f"{res.actor_gpus} GPUs, Megatron: tensor {par.tensor} x pipeline "
         f"{par.pipeline} x context {par.context} -> data parallel {data_parallel}"],
        ["rollout", f"{res.engine_gpus} GPUs, {engines} SGLang engine(s) x "
         f"{res.rollout_gpus_per_engine} GPUs"],
    ]  # fmt: skip
    share = (
        "colocated: training and rollout take turns on the same GPUs"
        if res.colocate
        else "disaggregated: rollout has GPUs of its own"
    )
    return [f"GPU layout: {res.total_gpus} GPUs, {share}", *_table(None, rows)]


def _purpose(exp: RLExperiment, obj: Obj) -> str:
    kind, name = obj["kind"], obj["metadata"]["name"]
    if kind == "ConfigMap" and name == names.config_map_name(exp):
        return "runtime config for the launcher and the rollout (no secrets)"
    if kind == "ConfigMap" and name.startswith(f"{exp.metadata.name}{names.BUNDLE_SUFFIX}"):
        return "agentrl's in-pod code, a zip (immutable, named by content)"
    if kind == "Service":
        spec = obj["spec"]
        ports = ", ".join(f"{p['name']} :{p['port']}" for p in spec.get("ports", []))
        return f"{spec.get('type', 'ClusterIP')} to the head pod: {ports}"
    if kind == "RayJob":
        spec = obj["spec"]
        return (
            f"KubeRay {spec['submissionMode']}; cluster deleted "
            f"{spec.get('ttlSecondsAfterFinished', 0)} s after the run"
        )
    return ""


def _yaml_bytes(obj: Obj) -> int:
    return len(yaml.safe_dump(dict(obj), sort_keys=False).encode())


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def _table(header: list[str] | None, rows: list[list[str]]) -> list[str]:
    table = ([header] if header else []) + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
        for r in table
    ]
