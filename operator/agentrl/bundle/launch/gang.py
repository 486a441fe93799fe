"""The gang preflight's judgement (pure logic): facts from every GPU worker in, problems out.

Before slime starts, the launcher checks every GPU worker of the gang and runs one
all-reduce over every GPU (`gangrun` gathers the facts and runs the collective through Ray
and torch.distributed). Everything here works on those facts as plain values, so tests feed
it the real output formats of nvidia-smi and the real outcomes of a collective:

- `parse_gpu_health`: nvidia-smi's CSV answer to `HEALTH_QUERY`;
- `node_problems`: one worker's facts against the spec and the driver's CUDA pin;
- `bus_bandwidth`: nccl-tests' formula for an all-reduce
  (https://github.com/NVIDIA/nccl-tests/blob/a0b82b2260cf5152b9f8c061bbf7eaf0ba096432/doc/PERFORMANCE.md,
  `AllReduceGetBw` in src/all_reduce.cu): busbw = S/t * 2(n-1)/n, S the bytes each rank
  reduces, t the time of one all-reduce averaged over the ranks (nccl-tests' default,
  `-a 1`), n the ranks;
- `pair_rounds`: which node pairs measure together, so each node is in one pair at a time;
- `collective_problems`: who did not join, failed or answered wrong;
- `Report`: every problem at once, each naming pod, node and check, and the one line the
  experiment's `Preflight` condition carries.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentrl.api.models import PreflightSpec

# The checks, as they name problems and as the Preflight condition's reason.
CHECK_WORKERS: Final = "Workers"
CHECK_GPU_COUNT: Final = "GpuCount"
CHECK_GPU_HEALTH: Final = "GpuHealth"
CHECK_SHM: Final = "Shm"
CHECK_CUDA: Final = "CudaPin"
CHECK_INTERCONNECT: Final = "Interconnect"
CHECK_COLLECTIVE: Final = "AllReduce"
CHECK_BANDWIDTH: Final = "BusBandwidth"
CHECK_LAUNCH: Final = "Launch"

# What nvidia-smi is asked per GPU (`--query-gpu=... --format=csv,noheader,nounits`):
# uncorrectable ECC errors since the driver loaded; on GPUs with row remapping (A100 and
# later) a remap waiting for a GPU reset, or one that failed (the GPU should be replaced);
# and the recovery action the driver recommends after a fatal error (an Xid such as 79 or
# 154 sets it: Reset, Reboot, Drain...). The kernel log, where Xids are written, is not
# readable in an unprivileged pod; this field is nvidia-smi's account of them.
HEALTH_FIELDS: Final = (
    "index",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "gpu_recovery_action",
)
# Fields every driver that runs CUDA 12 knows; asked alone when an older nvidia-smi refuses
# the newer ones ('Field "..." is not a valid field to query').
BASE_HEALTH_FIELDS: Final = HEALTH_FIELDS[:3]


def health_query(fields: Sequence[str]) -> list[str]:
    return [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class GpuHealth:
    index: str
    bus_id: str
    values: Mapping[str, str]  # field -> nvidia-smi's text, "[N/A]" and the like included


def _reported(value: str | None) -> str | None:
    """nvidia-smi's value, or None where it reports none ([N/A], [Not Supported], [Unknown
    Error], [Insufficient Permissions]...)."""
    if value is None:
        return None
    value = value.strip()
    return None if not value or value.startswith("[") else value


def parse_gpu_health(text: str, fields: Sequence[str]) -> list[GpuHealth]:
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`."""
    gpus = []
    for row in csv.reader(io.StringIO(text)):
        cells = [c.strip() for c in row]
        if len(cells) != len(fields):
            continue  # a warning line or a blank one
        values = dict(zip(fields, cells, strict=True))
        gpus.append(GpuHealth(values["index"], values["pci.bus_id"], values))
    return gpus


def gpu_health_problems(gpus: Iterable[GpuHealth]) -> list[str]:
    """What makes a GPU unfit to start on, one line per GPU."""
    out = []
    for gpu in gpus:
        bad = []
        ecc = _reported(gpu.values.get("ecc.errors.uncorrected.volatile.total"))
        if ecc is not None and ecc.isdigit() and int(ecc) > 0:
            bad.append(f"{ecc} uncorrectable ECC errors since the driver loaded")
        if _reported(gpu.values.get("remapped_rows.pending")) == "Yes":
            bad.append("a row remap is pending (the GPU needs a reset)")
        if _reported(gpu.values.get("remapped_rows.failure")) == "Yes":
            bad.append("row remapping failed (replace the GPU)")
        action = _reported(gpu.values.get("gpu_recovery_action"))
        if action is not None and action != "None":
            bad.append(f"the driver asks for recovery action {action!r} after an Xid error")
        if bad:
            out.append(f"GPU {gpu.index} ({gpu.bus_id}): {'; '.join(bad)}")
    return out


@dataclass
class NodeFacts:
    """What one GPU worker reports about itself (gathered by `gangrun.node_facts`)."""

    pod: str
    node: str
    ray_node: str
    visible_gpus: int | None = None  # nvidia-smi --list-gpus; None: no nvidia-smi
    gpu_note: str | None = None  # why the GPUs were not counted or their health not read
    gpu_health: list[str] = field(default_factory=list)  # gpu_health_problems
    shm_bytes: int | None = None
    shm_error: str | None = None
    cuda_major: int | None = None
    cuda_error: str | None = None
    rdma_devices: list[str] = field(default_factory=list)  # /dev/infiniband/uverbs*
    env: dict[str, str] = field(default_factory=dict)  # the interconnect env names asked for

    def dump(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def load(cls, doc: Mapping[str, Any]) -> NodeFacts:
        return cls(**doc)


@dataclass(frozen=True)
class Expect:
    """What every GPU worker must show (the spec, the render and the driver's CUDA pin)."""

    gpus_per_node: int
    shm_bytes: int
    shm_size: str  # spec.resources.shmSize as written
    cuda_major: int
    cuda_home: str
    interconnect: Mapping[str, Mapping[str, str]]  # RDMA resource -> the env NCCL needs


@dataclass(frozen=True)
class Problem:
    check: str
    where: str  # "pod P on node N" (or what is known of a worker that did not answer)
    message: str

    def line(self) -> str:
        return f"{self.where}: {self.check}: {self.message}"


def where(pod: str, node: str) -> str:
    return f"pod {pod} on node {node}"


def node_problems(facts: NodeFacts, expect: Expect) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of one GPU worker."""
    at = where(facts.pod, facts.node)
    problems: list[Problem] = []
    warnings: list[Problem] = []
    if facts.visible_gpus is None:
        note = facts.gpu_note or "nvidia-smi not found"
        warnings.append(Problem(CHECK_GPU_COUNT, at, f"GPUs not counted ({note})"))
    elif facts.visible_gpus != expect.gpus_per_node:
        problems.append(
            Problem(
                CHECK_GPU_COUNT,
                at,
                f"sees {facts.visible_gpus} GPUs, spec.resources.gpusPerNode is "
                f"{expect.gpus_per_node}: a GPU is missing or the node type differs "
                "(cordon the node, or match gpusPerNode to it)",
            )
        )
    elif facts.gpu_note:
        warnings.append(Problem(CHECK_GPU_HEALTH, at, facts.gpu_note))
    problems += [
        Problem(CHECK_GPU_HEALTH, at, f"{line}; cordon the node and let the operator drain it")
        for line in facts.gpu_health
    ]
    if facts.shm_bytes is None:
        problems.append(Problem(CHECK_SHM, at, f"cannot read /dev/shm ({facts.shm_error})"))
    elif facts.shm_bytes < expect.shm_bytes:
        problems.append(
            Problem(
                CHECK_SHM,
                at,
                f"/dev/shm holds {_size(facts.shm_bytes)}, spec.resources.shmSize asks for "
                f"{expect.shm_size} ({_size(expect.shm_bytes)}): NCCL and the SGLang engines "
                "fail or crawl without it; the pod is not the rendered one (its /dev/shm "
                "volume is missing or smaller)",
            )
        )
    if facts.cuda_error is not None:
        problems.append(Problem(CHECK_CUDA, at, facts.cuda_error))
    elif facts.cuda_major != expect.cuda_major:
        problems.append(
            Problem(
                CHECK_CUDA,
                at,
                f"{expect.cuda_home} here is CUDA {facts.cuda_major}, the driver's pod pinned "
                f"CUDA {expect.cuda_major}: the pods run different images (a moving tag "
                "pulled at different times?); pin spec.runtime.image by digest",
            )
        )
    for resource, env in sorted(expect.interconnect.items()):
        if not facts.rdma_devices:
            problems.append(
                Problem(
                    CHECK_INTERCONNECT,
                    at,
                    f"spec.resources.extraResources asks for {resource}, but no RDMA device "
                    "(/dev/infiniband/uverbs*) is visible: is the device plugin running on "
                    "this node?",
                )
            )
        missing = sorted(name for name in env if not facts.env.get(name))
        if missing:
            problems.append(
                Problem(
                    CHECK_INTERCONNECT,
                    at,
                    f"{', '.join(missing)} not set, which NCCL needs for {resource}; the pod "
                    "is not the rendered one",
                )
            )
    return problems, warnings


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth in GB/s (1e9 bytes): S/t * 2(n-1)/n."""
    if seconds <= 0 or ranks < 1:
        raise ValueError("an all-reduce takes time and at least one rank")
    return nbytes / 1e9 / seconds * (2 * (ranks - 1) / ranks)


def pair_rounds(nodes: int) -> list[list[tuple[int, int]]]:
    """Every pair of `nodes` nodes, in rounds where no node is in two pairs (the circle
    method: n-1 rounds for an even n, n for an odd one, each node idle once)."""
    ring: list[int | None] = list(range(nodes)) + ([None] if nodes % 2 else [])
    size = len(ring)
    rounds = []
    for _ in range(size - 1):
        pairs = []
        for i in range(size // 2):
            a, b = ring[i], ring[size - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        if pairs:
            rounds.append(sorted(pairs))
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


@dataclass(frozen=True)
class RankSpot:
    rank: int
    node_index: int
    local_rank: int
    where: str


@dataclass(frozen=True)
class RankResult:
    """What one rank's run of the collective returned (`gangrun.Rank.run`)."""

    rank: int
    error: str | None = None
    wrong_result: str | None = None
    gang_seconds: float | None = None  # one all-reduce over the gang, this rank's mean
    pair_seconds: Mapping[str, float] = field(default_factory=dict)  # "a-b" -> mean seconds

    @classmethod
    def load(cls, doc: Mapping[str, Any]) -> RankResult:
        return cls(**doc)


def pair_key(a: int, b: int) -> str:
    return f"{a}-{b}"


def collective_problems(
    spots: Sequence[RankSpot],
    joined: set[int],
    results: Mapping[int, RankResult],
    timeout: float,
    stopped: str | None,
) -> list[Problem]:
    """Ranks that never joined the rendezvous, failed, or reduced to a wrong value.

    `joined` holds the ranks that reached the rendezvous, `results` those that returned;
    `stopped` says why the driver stopped waiting early (None: it waited to the end)."""
    problems = []
    # Stopped early (a rank failed), a slower rank may simply not have joined yet.
    missing = [s for s in spots if s.rank not in joined] if stopped is None else []
    for spot in missing:
        problems.append(
            Problem(
                CHECK_COLLECTIVE,
                spot.where,
                f"rank {spot.rank} (GPU {spot.local_rank}) did not join the all-reduce within "
                f"{timeout:g} s: its node is hung, cannot reach the driver's pod, or Ray could "
                "not start a process there",
            )
        )
    for spot in spots:
        result = results.get(spot.rank)
        if result is not None and result.error is not None:
            problems.append(
                Problem(CHECK_COLLECTIVE, spot.where, f"rank {spot.rank}: {result.error}")
            )
        elif result is not None and result.wrong_result is not None:
            problems.append(
                Problem(CHECK_COLLECTIVE, spot.where, f"rank {spot.rank}: {result.wrong_result}")
            )
    unfinished = [s for s in spots if s.rank in joined and s.rank not in results]
    if unfinished and not problems and stopped is None:
        ranks = ", ".join(str(s.rank) for s in unfinished)
        problems.append(
            Problem(
                CHECK_COLLECTIVE,
                "the gang",
                f"every rank joined, but ranks {ranks} did not finish within {timeout:g} s: "
                "a collective hung (an interconnect that drops or stalls traffic)",
            )
        )
    return problems


@dataclass(frozen=True)
class PairBandwidth:
    a: int
    b: int
    where_a: str
    where_b: str
    ranks: int
    busbw_gbps: float


def pair_bandwidths(
    spots: Sequence[RankSpot], results: Mapping[int, RankResult], nbytes: int
) -> list[PairBandwidth]:
    """Bus bandwidth of each node pair's all-reduce (of the one node, in a one-node gang),
    from the ranks' mean times averaged over the pair's ranks, as nccl-tests reports."""
    by_node: dict[int, list[RankSpot]] = {}
    for spot in spots:
        by_node.setdefault(spot.node_index, []).append(spot)
    out = []
    keys: set[str] = set()
    for result in results.values():
        keys.update(result.pair_seconds)
    for key in sorted(keys, key=lambda k: tuple(int(x) for x in k.split("-"))):
        a, b = (int(x) for x in key.split("-"))
        members = [*by_node.get(a, []), *(by_node.get(b, []) if b != a else [])]
        times = [
            results[s.rank].pair_seconds[key]
            for s in members
            if s.rank in results and key in results[s.rank].pair_seconds
        ]
        if len(times) != len(members) or not members:
            continue
        seconds = sum(times) / len(times)
        out.append(
            PairBandwidth(
                a,
                b,
                by_node[a][0].where,
                by_node[b][0].where,
                len(members),
                bus_bandwidth(nbytes, seconds, len(members)),
            )
        )
    return out


def gang_bandwidth(
    spots: Sequence[RankSpot], results: Mapping[int, RankResult], nbytes: int
) -> float | None:
    times = [r.gang_seconds for r in results.values() if r.gang_seconds is not None]
    if len(times) != len(spots) or not spots:
        return None
    return bus_bandwidth(nbytes, sum(times) / len(times), len(spots))


def bandwidth_findings(
    pairs: Sequence[PairBandwidth], spec: PreflightSpec
) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings): node pairs below minBusBandwidthGBps, as onLowBandwidth says."""
    floor = spec.min_bus_bandwidth_gbps
    if floor is None:
        return [], []
    low = [
        Problem(
            CHECK_BANDWIDTH,
            p.where_a if p.a == p.b else f"{p.where_a} and {p.where_b}",
            f"all-reduce bus bandwidth {p.busbw_gbps:.1f} GB/s over {p.ranks} GPUs, below "
            f"spec.runtime.preflight.minBusBandwidthGBps {floor:g}: check the interconnect "
            "(NCCL_DEBUG=INFO shows the transport NCCL chose)",
        )
        for p in pairs
        if p.busbw_gbps < floor
    ]
    return (low, []) if spec.on_low_bandwidth == "fail" else ([], low)


@dataclass
class Report:
    """The gang preflight's outcome: every problem at once, then what was measured."""

    nodes: int
    gpus: int
    backend: str
    nbytes: int
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    pairs: list[PairBandwidth] = field(default_factory=list)
    gang_busbw_gbps: float | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: what passed and what was measured, or the first problem."""
        if not self.passed:
            more = len(self.problems) - 1
            tail = f" (and {more} more problem{'s' if more != 1 else ''})" if more else ""
            return self.problems[0].line() + tail
        text = f"{self.nodes} GPU workers, {self.gpus} GPUs checked in {self.seconds:.1f} s"
        if self.gang_busbw_gbps is not None:
            text += f"; {self.backend} all-reduce busbw {self.gang_busbw_gbps:.2f} GB/s"
        if self.pairs:
            low = min(self.pairs, key=lambda p: p.busbw_gbps)
            text += f", lowest node pair {low.busbw_gbps:.2f} GB/s ({_pair_name(low)})"
        if self.warnings:
            text += f"; {len(self.warnings)} warning{'s' if len(self.warnings) > 1 else ''}"
        return text

    def reason(self) -> str:
        return self.problems[0].check if self.problems else "Passed"

    def lines(self) -> list[str]:
        """The job log's account, bandwidth table included (each line printed once)."""
        out = [
            f"gang preflight: {self.nodes} GPU workers, {self.gpus} GPUs, {self.backend} "
            f"all-reduce of {_size(self.nbytes)} per rank"
        ]
        for p in self.pairs:
            out.append(
                f"  busbw {p.busbw_gbps:10.2f} GB/s  {p.ranks:3d} GPUs  {_pair_name(p)}: "
                f"{p.where_a}" + ("" if p.a == p.b else f" + {p.where_b}")
            )
        if self.gang_busbw_gbps is not None:
            out.append(
                f"  busbw {self.gang_busbw_gbps:10.2f} GB/s  {self.gpus:3d} GPUs  whole gang"
            )
        return out


def _pair_name(p: PairBandwidth) -> str:
    return f"node {p.a}" if p.a == p.b else f"nodes {p.a}-{p.b}"
