"""How the gang preflight's driver waits for its Ray tasks (`gangrun._wait`), on a local Ray.

Once a rank fails, the other ranks would wait for it until the deadline, so the driver
stops waiting for ranks. The node checks still pending get a short grace instead: under
load a healthy node's checks answered a few seconds after a rank on a CPU-only machine
failed, and the node was reported as hung ("its node checks did not answer within 120 s"),
after some 5 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from agentrl.bundle.launch import gang, gangrun


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(
        address="local",  # a cluster of this module's own, never one already running here
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


@ray.remote(num_cpus=0, max_retries=0)
def node_checks(seconds: float) -> str:
    time.sleep(seconds)
    return "facts"


@ray.remote(num_cpus=0, max_retries=0)
def failing_rank() -> gang.RankResult:
    raise RuntimeError("ProcessGroupNCCL is only supported with GPUs, no GPUs found!")


@ray.remote(num_cpus=0, max_retries=0)
def waiting_rank() -> gang.RankResult:
    time.sleep(600)  # for the failed rank, in the all-reduce (killed with the cluster)
    raise AssertionError("unreachable")


def wait(facts_seconds: float, deadline_s: float) -> tuple[str | None, Any, dict[int, Any]]:
    worker = gangrun._Worker(0, "node-0", {})
    results: dict[int, gang.RankResult] = {}
    stopped = gangrun._wait(
        ray,
        {node_checks.remote(facts_seconds): worker},
        {failing_rank.remote(): 3, waiting_rank.remote(): 4},
        results,
        time.monotonic() + deadline_s,
    )
    return stopped, worker.facts, results


def test_node_checks_that_answer_after_a_rank_failed_are_kept(local_ray: None) -> None:
    stopped, facts, results = wait(facts_seconds=3, deadline_s=120)
    assert stopped == "rank 3 failed"
    assert "no GPUs found" in (results[3].error or "")
    assert facts == "facts"  # before: None, and the node was reported as hung


def test_node_checks_that_never_answer_get_the_grace_not_the_budget(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gangrun, "FACTS_GRACE_SECONDS", 1.0)
    began = time.monotonic()
    stopped, facts, _ = wait(facts_seconds=600, deadline_s=300)
    assert stopped == "rank 3 failed" and facts is None
    # Not a speed check: 1 s of grace against a 300 s deadline, which a wait that ignored
    # the grace would run to.
    assert time.monotonic() - began < 150
