"""The gang preflight's I/O: Ray tasks on every GPU worker, and one all-reduce over the gang.

The launcher runs as the Ray job's driver before slime. Every GPU worker advertises the Ray
resource `DRIVER_RAY_RESOURCE` (the render's rayStartParams), which is how the driver tells
them from the head; each gets

- one task, pinned to its Ray node (`NodeAffinitySchedulingStrategy`, hard), that gathers
  the node's facts (`node_facts`: nvidia-smi, /dev/shm, the launcher's own CUDA detection,
  RDMA devices and their env); `gang` judges them;
- one `Rank` actor per GPU, pinned the same way and started with the driver's pinned CUDA
  env (what slime hands its Megatron actors), which joins a `torch.distributed` process
  group on slime's backend (NCCL; gloo where there is no GPU) and times one all-reduce over
  the whole gang, then one per node pair.

The process group meets at a TCPStore the driver hosts: each rank writes a key there before
it joins, so when the collective hangs the driver names the ranks that never arrived. Both
kinds of work take no CPU or GPU from Ray's accounting (slime has not started; its placement
groups want every GPU), and everything is killed when the budget
(`spec.runtime.preflight.timeoutSeconds`) runs out. The result goes to the job log (and so to
the launcher's log file) and to the hub's /metrics, which the operator reads into the
experiment's `Preflight` condition.
"""

from __future__ import annotations

import glob
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from agentrl.api.constants import (
    DRIVER_RAY_RESOURCE,
    ENV_NODE_NAME,
    ENV_POD_NAME,
    PREFLIGHT_REPORT_WAIT_SECONDS,
    RAY_NOSET_CUDA_VISIBLE_DEVICES,
    SHM_MOUNT_DIR,
)
from agentrl.api.quantity import parse_quantity
from agentrl.api.runtime import RuntimeConfig
from agentrl.api.security import INTERCONNECT_ENV, rdma_prefix
from agentrl.bundle.launch import cuda, gang, probe

BACKENDS: Final = ("nccl", "gloo")
# Bytes each rank all-reduces: where NCCL's bus bandwidth is most of the way to its peak
# (about 90% of it on an 8x H200 node) while one all-reduce stays in the milliseconds.
MESSAGE_BYTES: Final = 256 << 20
ITERATIONS: Final = 5  # timed all-reduces per measurement, after one to warm up
# Of the budget, what registering every GPU worker with Ray may take before the checks run.
REGISTER_SHARE: Final = 0.3
STORE_PREFIX: Final = "agentrl-preflight"
JOINED_KEY: Final = "joined/{rank}"
POLL_SECONDS: Final = 0.2
# After a rank failed, how much longer the node checks may take to answer (they usually
# explain the failure): a Ray worker process and nvidia-smi start in seconds, so a node
# that has not answered by then is reported as one that did not answer.
FACTS_GRACE_SECONDS: Final = 30.0
ERROR_CHARS: Final = 600
MESSAGE_CHARS: Final = 1000  # of the Preflight condition's message
log = logging.getLogger("agentrl.launch")


def expect_of(config: RuntimeConfig, cuda_major: int) -> gang.Expect:
    res = config.spec.resources
    rdma = {r: INTERCONNECT_ENV[p] for r in res.extra_resources if (p := rdma_prefix(r))}
    return gang.Expect(
        gpus_per_node=res.gpus_per_node,
        shm_bytes=int(parse_quantity(res.shm_size)),
        shm_size=res.shm_size,
        cuda_major=cuda_major,
        cuda_home=config.spec.runtime.cuda_home,
        interconnect=rdma,
    )


def node_facts(expect: gang.Expect, root: Path = Path("/")) -> gang.NodeFacts:
    """This GPU worker's facts (runs in a Ray task pinned to it; `root` for tests)."""
    import ray

    facts = gang.NodeFacts(
        pod=os.environ.get(ENV_POD_NAME) or socket.gethostname(),
        node=os.environ.get(ENV_NODE_NAME) or "(unknown: no AGENTRL_NODE_NAME)",
        ray_node=str(ray.get_runtime_context().get_node_id()),
    )
    facts.visible_gpus, facts.gpu_note = probe.visible_gpus()
    if facts.visible_gpus is not None:
        facts.gpu_health, note = probe.gpu_health()
        facts.gpu_note = facts.gpu_note or note
    try:
        st = os.statvfs(root / SHM_MOUNT_DIR.lstrip("/"))
        facts.shm_bytes = st.f_blocks * st.f_frsize
    except OSError as e:
        facts.shm_error = e.strerror
    try:
        env = cuda.resolve_cuda(
            root, expect.cuda_home, probe.site_dirs(), dict(os.environ), probe.ldconfig_text()
        )
        facts.cuda_major = env.major
    except cuda.CudaError as e:
        facts.cuda_error = str(e)
    facts.rdma_devices = sorted(glob.glob(str(root / "dev" / "infiniband" / "uverbs*")))
    names = {name for env_of in expect.interconnect.values() for name in env_of}
    facts.env = {name: os.environ.get(name, "") for name in sorted(names)}
    return facts


@dataclass(frozen=True)
class RankJob:
    """One rank's part in the collective."""

    rank: int
    world: int
    local_rank: int
    node_index: int
    node_ranks: list[list[int]]  # node index -> its ranks
    backend: str
    store_host: str
    store_port: int
    timeout: float
    nbytes: int
    iterations: int


class Rank:
    """One GPU's rank (the body of a Ray actor pinned to its worker)."""

    def run(self, job: RankJob) -> gang.RankResult:
        import torch
        import torch.distributed as dist

        try:
            return self._run(job, torch, dist)
        except Exception as e:
            text = f"{type(e).__name__}: {e}".strip()
            return gang.RankResult(job.rank, error=text[:ERROR_CHARS])
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    def _run(self, job: RankJob, torch: Any, dist: Any) -> gang.RankResult:
        limit = timedelta(seconds=job.timeout)
        store = dist.TCPStore(job.store_host, job.store_port, is_master=False, timeout=limit)
        store.set(JOINED_KEY.format(rank=job.rank), "1")
        if job.backend == "nccl":
            torch.cuda.set_device(job.local_rank)
            device = torch.device("cuda", job.local_rank)
            sync: Callable[[], None] = torch.cuda.synchronize
        else:
            device, sync = torch.device("cpu"), _nothing
        dist.init_process_group(
            job.backend,
            store=dist.PrefixStore(STORE_PREFIX, store),
            rank=job.rank,
            world_size=job.world,
            timeout=limit,
        )
        data = torch.ones(job.nbytes // 4, dtype=torch.float32, device=device)
        dist.all_reduce(data)  # the first one also sets up the communicators
        sync()
        if not bool((data == job.world).all()):
            wrong = data[data != job.world][:3].tolist()
            return gang.RankResult(
                job.rank,
                wrong_result=f"the all-reduce of ones over {job.world} ranks returned {wrong}",
            )
        gang_seconds = _timed(dist, data, None, job.iterations, sync)
        pairs: dict[str, float] = {}
        nodes = len(job.node_ranks)
        if nodes == 1:
            pairs[gang.pair_key(0, 0)] = gang_seconds
        for round_ in gang.pair_rounds(nodes):
            for a, b in round_:
                if job.node_index not in (a, b):
                    continue
                group = dist.new_group(
                    [*job.node_ranks[a], *job.node_ranks[b]], use_local_synchronization=True
                )
                dist.all_reduce(data, group=group)  # warm up this pair's communicator
                pairs[gang.pair_key(a, b)] = _timed(dist, data, group, job.iterations, sync)
                dist.destroy_process_group(group)
        return gang.RankResult(job.rank, gang_seconds=gang_seconds, pair_seconds=pairs)


def _nothing() -> None:
    return None


def _timed(dist: Any, data: Any, group: Any, iterations: int, sync: Callable[[], None]) -> float:
    """This rank's mean seconds per all-reduce, started together (nccl-tests times the same
    way: a synchronised start, then the mean of the iterations)."""
    dist.barrier(group=group)
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(data, group=group)
    sync()
    return (time.perf_counter() - start) / iterations


@dataclass
class _Worker:
    index: int
    node_id: str
    info: Mapping[str, Any]  # Ray's view of the node (ray.nodes())
    facts: gang.NodeFacts | None = None

    @property
    def where(self) -> str:
        if self.facts is not None:
            return gang.where(self.facts.pod, self.facts.node)
        host = self.info.get("NodeManagerHostname") or "?"
        name = self.info.get("NodeName") or self.info.get("NodeManagerAddress") or self.node_id
        return f"pod {host} (Ray node {name}; its checks did not answer)"


def gpu_workers(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live Ray nodes that are GPU workers, in a stable order."""
    found = [
        n for n in nodes if n.get("Alive") and DRIVER_RAY_RESOURCE in (n.get("Resources") or {})
    ]
    return sorted(
        found,
        key=lambda n: (str(n.get("NodeName")), str(n.get("NodeManagerHostname")), n["NodeID"]),
    )


def _register(ray: Any, want: int, deadline: float) -> list[dict[str, Any]]:
    while True:
        found = gpu_workers(ray.nodes())
        if len(found) >= want or time.monotonic() >= deadline:
            return found
        time.sleep(1.0)


def rank_env(pinned: Mapping[str, str]) -> dict[str, str]:
    """The env of the rank actors: the driver's CUDA pin (as slime's actors get it through
    --train-env-vars), and every GPU visible although Ray gave the actor none."""
    return {**pinned, RAY_NOSET_CUDA_VISIBLE_DEVICES: "1"}


def run(
    config: RuntimeConfig,
    cuda_env: cuda.CudaEnv,
    backend: str = "nccl",
    nbytes: int = MESSAGE_BYTES,
    iterations: int = ITERATIONS,
) -> gang.Report:
    """The gang preflight, from the job's driver; connects to the job's Ray cluster."""
    import ray

    spec = config.spec
    budget = float(spec.runtime.preflight.timeout_seconds)
    start = time.monotonic()
    deadline = start + budget
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False,
             logging_level=logging.WARNING, configure_logging=False)  # fmt: skip
    try:
        report = _run(ray, config, cuda_env, backend=backend, nbytes=nbytes,
                      iterations=iterations, start=start, deadline=deadline)  # fmt: skip
    finally:
        ray.shutdown()
    report.seconds = time.monotonic() - start
    return report


def _run(
    ray: Any,
    config: RuntimeConfig,
    cuda_env: cuda.CudaEnv,
    *,
    backend: str,
    nbytes: int,
    iterations: int,
    start: float,
    deadline: float,
) -> gang.Report:
    import torch.distributed
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    dist: Any = torch.distributed

    spec = config.spec
    want, per_node = spec.resources.nodes, spec.resources.gpus_per_node
    budget = deadline - start
    infos = _register(ray, want, start + budget * REGISTER_SHARE)
    workers = [_Worker(i, n["NodeID"], n) for i, n in enumerate(infos)]
    report = gang.Report(len(workers), len(workers) * per_node, backend, nbytes)
    if len(workers) != want:
        names = ", ".join(w.where for w in workers) or "none"
        report.problems.append(
            gang.Problem(
                gang.CHECK_WORKERS,
                "the gang",
                f"{len(workers)} of spec.resources.nodes={want} GPU workers joined the Ray "
                f"cluster within {budget * REGISTER_SHARE:.0f} s (present: {names}); check "
                "the missing worker pods' events",
            )
        )
    if not workers:
        return report
    expect = expect_of(config, cuda_env.major)

    def pinned(w: _Worker) -> Any:
        return NodeAffinitySchedulingStrategy(w.node_id, soft=False)

    facts_task = ray.remote(num_cpus=0, max_retries=0)(node_facts)
    asked = time.monotonic()
    facts_refs = {
        facts_task.options(scheduling_strategy=pinned(w)).remote(expect): w for w in workers
    }
    host = ray.util.get_node_ip_address()
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=budget))  # fmt: skip
    node_ranks = [[w.index * per_node + g for g in range(per_node)] for w in workers]
    spots = [
        gang.RankSpot(rank, w.index, g, "")
        for w in workers
        for g, rank in enumerate(node_ranks[w.index])
    ]
    rank_cls = ray.remote(num_cpus=0, num_gpus=0, max_restarts=0)(Rank)
    env = {"env_vars": rank_env(cuda_env.env())}
    actors, rank_refs = [], {}
    for spot in spots:
        w = workers[spot.node_index]
        actor = rank_cls.options(scheduling_strategy=pinned(w), runtime_env=env).remote()
        job = RankJob(spot.rank, len(spots), spot.local_rank, spot.node_index, node_ranks,
                      backend, host, store.port, max(deadline - time.monotonic(), 1.0),
                      nbytes, iterations)  # fmt: skip
        actors.append(actor)
        rank_refs[actor.run.remote(job)] = spot.rank
    results: dict[int, gang.RankResult] = {}
    stopped = _wait(ray, facts_refs, rank_refs, results, deadline)
    joined = {s.rank for s in spots if store.check([JOINED_KEY.format(rank=s.rank)])}
    for actor in actors:
        ray.kill(actor, no_restart=True)
    for ref, w in facts_refs.items():
        if w.facts is None:
            try:
                ray.cancel(ref, force=True)
            except Exception as e:  # the task may already be gone with its node
                log.debug("cancel: %s", e)
    spots = [gang.RankSpot(s.rank, s.node_index, s.local_rank, workers[s.node_index].where)
             for s in spots]  # fmt: skip
    waited = time.monotonic() - asked
    for w in workers:
        if w.facts is None:
            report.problems.append(
                gang.Problem(
                    gang.CHECK_WORKERS,
                    w.where,
                    f"its node checks did not answer within {waited:.0f} s: the node is hung, "
                    "or Ray could not start a process there",
                )
            )
            continue
        problems, warnings = gang.node_problems(w.facts, expect)
        report.problems += problems
        report.warnings += warnings
    report.problems += gang.collective_problems(spots, joined, results, budget, stopped)
    report.pairs = gang.pair_bandwidths(spots, results, nbytes)
    report.gang_busbw_gbps = gang.gang_bandwidth(spots, results, nbytes)
    low, low_warnings = gang.bandwidth_findings(report.pairs, spec.runtime.preflight)
    report.problems += low
    report.warnings += low_warnings
    return report


def _wait(
    ray: Any,
    facts_refs: dict[Any, _Worker],
    rank_refs: dict[Any, int],
    results: dict[int, gang.RankResult],
    deadline: float,
) -> str | None:
    """Collect facts and rank results until all are in or the deadline. Once a rank fails
    the others would wait for it until the deadline, so the ranks are given up on, and the
    node checks still pending get `FACTS_GRACE_SECONDS` more: a healthy node that answers a
    little late must not be reported as hung. Why it stopped early, or None."""
    pending = [*facts_refs, *rank_refs]
    stopped = None
    while pending and time.monotonic() < deadline:
        wait = min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0))
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=wait)
        for ref in ready:
            if ref in facts_refs:
                facts_refs[ref].facts = _get(ray, ref)
                continue
            rank = rank_refs[ref]
            try:
                results[rank] = ray.get(ref)
            except Exception as e:  # the actor died (its node went away, or was killed)
                results[rank] = gang.RankResult(
                    rank, error=f"{type(e).__name__}: {e}"[:ERROR_CHARS]
                )
        failed = [r for r in results.values() if r.error is not None]
        if stopped is None and failed and any(ref in rank_refs for ref in pending):
            stopped = f"rank {failed[0].rank} failed"
            pending = [ref for ref in pending if ref in facts_refs]
            deadline = min(deadline, time.monotonic() + FACTS_GRACE_SECONDS)
    return stopped


def _get(ray: Any, ref: Any) -> gang.NodeFacts | None:
    try:
        facts: gang.NodeFacts = ray.get(ref)
    except Exception as e:
        log.warning("node checks failed: %s", e)
        return None
    return facts


def publish(config: RuntimeConfig, passed: bool, reason: str, message: str) -> None:
    """Hand the result to the experiment's hub, whose /metrics the operator reads into the
    `Preflight` condition. A failure is held until /metrics has been read once (or
    PREFLIGHT_REPORT_WAIT_SECONDS), since the job's end takes the hub with it. Never raises:
    the job log has the result whatever happens here."""
    import ray

    from agentrl.bundle.hub import ensure_hub

    try:
        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=False)  # fmt: skip
        hub = ensure_hub(config)
        ray.get(hub.publish_preflight.remote(passed, reason, message[:MESSAGE_CHARS]))
        until = time.monotonic() + PREFLIGHT_REPORT_WAIT_SECONDS
        while not passed and not ray.get(hub.preflight_read.remote()):
            if time.monotonic() >= until:
                print(
                    "agentrl-launch: warning: the experiment's /metrics was not read within "
                    f"{PREFLIGHT_REPORT_WAIT_SECONDS} s: the Preflight condition may not show "
                    "this result",
                    file=sys.stderr,
                    flush=True,
                )
                break
            time.sleep(1.0)
    except Exception as e:
        print(f"agentrl-launch: warning: preflight result not published to the hub: {e}",
              file=sys.stderr, flush=True)  # fmt: skip
    finally:
        if ray.is_initialized():
            ray.shutdown()
