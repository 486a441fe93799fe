"""Leader election on a real kube-apiserver: operator replicas, one Lease, failovers.

Follows test_chaos_e2e.py: the operators are `python -m agentrl.controller` subprocesses
authenticated as the chart's ServiceAccount under the chart's RBAC (its ClusterRole and its
leader Lease Role), with the chart's default leader-election durations, and the leader is
killed with SIGKILL as a node failure would. Every wait is for a state the API server shows (a
Lease holder, a status, an event), never a sleep; the only bound on time is the lease
arithmetic itself, read from the Lease's own timestamps.

1. Replica A leads; B stands by and writes nothing. A is stopped in the middle of a reconcile
   (its ConfigMaps and Services created, its RayJob waiting for a deleted predecessor's to
   go) and killed with SIGKILL; a RayJob moves to Running while no one leads. B takes over
   within the lease arithmetic and finishes everything: no duplicate child, the status write
   A never made, no event twice.
2. B is frozen (SIGSTOP) while it leads, as a stalled node or a partition would leave it; C
   takes over; B wakes up, writes nothing (its writes are fenced) and exits with status 1.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import minimal_body
from tests.support.kube import ROOT, KubeHarness

from agentrl.controller.kube import Credentials, Kube, KubeError
from agentrl.controller.leader import JITTER, LeaderElector, LeaseLock, Record, Timing

from .operator_process import OperatorProcess, chart_lease, install_chart_rbac
from .test_operator_e2e import children, condition, experiment, patch_rayjob_status, status, wait

pytestmark = pytest.mark.e2e
NS = "failover"
VALUES = yaml.safe_load((ROOT / "charts" / "agentrl" / "values.yaml").read_text())
TIMING = Timing(VALUES["leaderElection"]["leaseDurationSeconds"],
                VALUES["leaderElection"]["renewDeadlineSeconds"],
                VALUES["leaderElection"]["retryPeriodSeconds"])  # fmt: skip
# Killed at time K, the leader renewed last at R <= K. The standby saw that renewal at most
# one jittered retry after R, and takes over at most a lease duration plus one jittered
# retry after it saw it; never earlier than a lease duration after R. Plus a second for the
# requests themselves.
EARLIEST = TIMING.lease_duration
T0 = "2026-01-01T00:00:00.000000Z"  # a Lease time for records written by hand
LATEST = TIMING.lease_duration + 2 * (1 + JITTER) * TIMING.retry_period + 1.0


@pytest.fixture
def replicas(
    kube_harness: KubeHarness, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Start operator replicas on demand (`start("a")`); stop them all at the end."""
    kube = kube_harness
    kubeconfig = install_chart_rbac(kube, watch=[NS])
    lease_ns, lease_name = chart_lease()
    kube.kubectl("delete", "lease", lease_name, "-n", lease_ns, "--ignore-not-found")
    started: dict[str, OperatorProcess] = {}

    def start(name: str) -> OperatorProcess:
        op = OperatorProcess(
            kubeconfig, tmp_path_factory.mktemp(f"replica-{name}"),
            HOSTNAME=f"op-{name}",  # the pod name: the Lease identity's prefix, the events'
            AGENTRL_NAMESPACES=NS,  # reportingInstance
            AGENTRL_LEADER_ELECTION="true",
            AGENTRL_LEASE_NAMESPACE=lease_ns, AGENTRL_LEASE_NAME=lease_name,
            AGENTRL_LEASE_DURATION_SECONDS=str(TIMING.lease_duration),
            AGENTRL_RENEW_DEADLINE_SECONDS=str(TIMING.renew_deadline),
            AGENTRL_RETRY_PERIOD_SECONDS=str(TIMING.retry_period),
        )  # fmt: skip
        op.start()
        started[name] = op
        return op

    try:
        yield {"start": start, "lease": (lease_ns, lease_name), "kubeconfig": kubeconfig}
    finally:
        for name, op in started.items():
            if op.proc is not None:
                op.signal(signal.SIGCONT)
            op.stop()
            print(f"--- replica {name}\n{op.logs()[-3000:]}")


def lease(kube: KubeHarness, where: tuple[str, str]) -> dict[str, Any]:
    got = kube.kubectl("get", "lease", where[1], "-n", where[0], "-o", "json", check=False)
    return dict(json.loads(got.stdout).get("spec") or {}) if got.returncode == 0 else {}


def holder(kube: KubeHarness, where: tuple[str, str]) -> str:
    return str(lease(kube, where).get("holderIdentity") or "")


def micro(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")


def metric(op: OperatorProcess, name: str) -> float | None:
    """One sample of the replica's /metrics (None: not exported, or no answer yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def health(op: OperatorProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{op.health_port}/healthz", timeout=5) as r:
        said: dict[str, Any] = json.loads(r.read())
        return said


def events(kube: KubeHarness) -> list[dict[str, Any]]:
    got = kube.kubectl_json("get", "events", "-n", NS,
                            "--field-selector", "involvedObject.kind=RLExperiment")  # fmt: skip
    return sorted(got["items"], key=lambda e: int(e["metadata"]["resourceVersion"]))


def posted(kube: KubeHarness) -> Counter[tuple[str, str, str]]:
    """(experiment, reason, replica) of every event, counted."""
    return Counter((e["involvedObject"]["name"], e["reason"], e.get("reportingInstance", ""))
                   for e in events(kube))  # fmt: skip


def body(name: str, **spec: Any) -> dict[str, Any]:
    b = minimal_body(**spec)
    b["metadata"] = {"name": name, "namespace": NS}
    return b


def predecessor_rayjob(name: str) -> dict[str, Any]:
    """A RayJob left by a deleted experiment of the same name, not yet collected."""
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "namespace": NS, "ownerReferences": [{
            "apiVersion": "agentrl.io/v1alpha1", "kind": "RLExperiment", "name": name,
            "uid": "00000000-0000-0000-0000-00000000dead", "controller": True}]},
        "spec": {"entrypoint": "python -c pass"},
    }  # fmt: skip


def took_over(kube: KubeHarness, where: tuple[str, str], replica: str,
              last: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """Wait for `replica` to hold the Lease; check the takeover against the lease arithmetic
    (from `last`, the Lease as its previous holder last renewed it)."""
    wait(lambda: holder(kube, where).startswith(f"op-{replica}_"),
         what=f"op-{replica} takes the Lease", limit=LATEST + 60)  # fmt: skip
    now = lease(kube, where)
    gap = (micro(now["acquireTime"]) - micro(last["renewTime"])).total_seconds()
    assert EARLIEST <= gap <= LATEST, (gap, last, now)
    assert now["leaseTransitions"] == last.get("leaseTransitions", 0) + 1
    assert now["leaseDurationSeconds"] == TIMING.lease_duration
    return now


def test_failover_after_kill_and_freeze(
    kube_harness: KubeHarness, replicas: dict[str, Any]
) -> None:
    kube, start, where = kube_harness, replicas["start"], replicas["lease"]

    # ---- 1. A leads, B stands by ---------------------------------------------------------
    a = start("a")
    wait(lambda: holder(kube, where).startswith("op-a_"), what="op-a leads")
    b = start("b")
    wait(lambda: metric(b, "agentrl_operator_leader") == 0.0, what="op-b stands by")
    assert metric(a, "agentrl_operator_leader") == 1.0
    # The standby is healthy and ready, and knows who leads once it has read the Lease (its
    # gauge says standby from the start, before that first read).
    wait(lambda: health(b)["leader"] != "", what="op-b read the Lease")
    said = health(b)
    assert not said["leading"] and said["leader"] == holder(kube, where) != said["identity"]

    bad = body("bad", grpo={"numRollouts": 10, "rolloutBatchSize": 3, "samplesPerPrompt": 8,
                            "globalBatchSize": 5})  # fmt: skip
    kube.apply(bad)
    kube.apply(body("steady"))
    wait(lambda: status(kube, NS, "steady").get("rayJobName"), what="steady created")
    patch_rayjob_status(kube, NS, "steady", {"jobDeploymentStatus": "Initializing"})
    wait(lambda: posted(kube)[("steady", "Initializing", "op-a")] == 1
         and posted(kube)[("bad", "InvalidSpec", "op-a")] == 1, what="op-a's events")  # fmt: skip

    # Mid-reconcile: `held`'s RayJob name is still taken by a deleted predecessor's, so A
    # creates the ConfigMaps and Services, then waits (retrying): no RayJob, no reconcile status.
    kube.apply(predecessor_rayjob("held"))
    kube.apply(body("held"))
    wait(lambda: sorted(k["kind"] for k in children(kube, NS, "held"))
         == ["ConfigMap"] * 2 + ["Service"] * 2
         and (metric(a, 'agentrl_reconcile_total{result="retry"}') or 0) >= 1,
         what="op-a mid-reconcile of held")  # fmt: skip
    held_uid = experiment(kube, NS, "held")["metadata"]["uid"]
    # (The sweep may have written phase Pending; the reconcile has written nothing yet.)
    assert not {"rayJobName", "observedGeneration"} & set(status(kube, NS, "held"))
    # The standby did nothing: no reconcile, no event.
    assert metric(b, 'agentrl_reconcile_total{result="ok"}') == 0.0
    assert {replica for _, _, replica in posted(kube)} == {"op-a"}

    # ---- 2. kill -9 the leader -------------------------------------------------------------
    a.kill()
    last = lease(kube, where)
    assert last["holderIdentity"].startswith("op-a_")  # nobody may take it for 15 s
    patch_rayjob_status(kube, NS, "steady", {"jobDeploymentStatus": "Running"})  # unreported
    kube.kubectl("delete", "rayjobs.ray.io", "held", "-n", NS)  # the garbage collector's job
    took_over(kube, where, "b", last)
    wait(lambda: metric(b, "agentrl_operator_leader") == 1.0, what="op-b's metric says it leads")

    wait(lambda: status(kube, NS, "steady").get("phase") == "Running", what="steady Running")
    st = wait(lambda: (s := status(kube, NS, "held")).get("rayJobName") and s, what="held done")
    assert st["phase"] == "Pending" and condition(st, "RayJobCreated")["status"] == "True"
    kids = children(kube, NS, "held")  # A's four, adopted, and B's RayJob: nothing twice
    assert sorted(k["kind"] for k in kids) == ["ConfigMap"] * 2 + ["RayJob"] + ["Service"] * 2
    assert all(k["metadata"]["ownerReferences"][0]["uid"] == held_uid for k in kids)
    for name in ("bad", "steady", "held"):  # every status caught up with its spec
        exp = experiment(kube, NS, name)
        assert exp["status"]["observedGeneration"] == exp["metadata"]["generation"]
    wait(lambda: posted(kube)[("steady", "Running", "op-b")] == 1, what="op-b's Running event")
    # One event per transition, across both leaders: B re-reconciled `bad` and `steady` and
    # posted nothing A had posted.
    assert posted(kube) == Counter({("bad", "InvalidSpec", "op-a"): 1,
                                    ("steady", "Initializing", "op-a"): 1,
                                    ("steady", "Running", "op-b"): 1})  # fmt: skip
    assert all(e.get("count", 1) == 1 for e in events(kube))

    # ---- 3. freeze the new leader; the next standby takes over; the frozen one wakes up ----
    c = start("c")
    wait(lambda: metric(c, "agentrl_operator_leader") == 0.0, what="op-c stands by")
    b.signal(signal.SIGSTOP)
    last = lease(kube, where)
    assert last["holderIdentity"].startswith("op-b_")
    patch_rayjob_status(kube, NS, "steady",
                        {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})  # fmt: skip
    took_over(kube, where, "c", last)
    wait(lambda: posted(kube)[("steady", "Succeeded", "op-c")] == 1, what="op-c reports")
    b.signal(signal.SIGCONT)  # B's watches deliver the change it missed: it must not act
    assert b.exited(timeout=120) == 1  # it saw it lost the Lease, stopped, and exited
    assert holder(kube, where).startswith("op-c_")
    assert status(kube, NS, "steady")["phase"] == "Succeeded"
    assert posted(kube) == Counter({("bad", "InvalidSpec", "op-a"): 1,
                                    ("steady", "Initializing", "op-a"): 1,
                                    ("steady", "Running", "op-b"): 1,
                                    ("steady", "Succeeded", "op-c"): 1})  # fmt: skip


def _credentials(kubeconfig: Path) -> Credentials:
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    return Credentials(server=cluster["server"], token=user["token"], insecure=True)


async def test_the_lease_protocol_on_the_api_server_under_the_charts_role(
    kube_harness: KubeHarness, replicas: dict[str, Any]
) -> None:
    """The Lease protocol against the real API server, as the chart's ServiceAccount: a create
    race and a write over a stale read are refused (409), a lapsed lease is taken over, and
    a released one is free."""
    kube, where = kube_harness, replicas["lease"]
    clients = [Kube(), Kube()]
    for client in clients:
        await client.configure(_credentials(replicas["kubeconfig"]))
    try:
        p, q = (LeaseLock(client, *where, name) for client, name in zip(clients, "pq", strict=True))
        assert await p.get() is None
        assert await p.create(Record("p", 15, T0, T0, 0))
        assert not await q.create(Record("q", 15, T0, T0, 0))  # p created it first
        assert (await q.get()) == (await p.get())
        await p.update(Record("p", 15, T0, "2026-01-01T00:00:02.000000Z", 0))
        with pytest.raises(KubeError) as stale:  # q's read predates p's renewal
            await q.update(Record("q", 15, T0, T0, 1))
        assert stale.value.status == 409
        kube.kubectl("delete", "lease", where[1], "-n", where[0])

        timing = Timing(1, 0.5, 0.2)  # short: the test waits out one lease
        x, y = (LeaderElector(LeaseLock(client, *where, name), timing)
                for client, name in zip(clients, "xy", strict=True))  # fmt: skip
        assert await x.try_acquire_or_renew() and x.leading()
        assert not await y.try_acquire_or_renew()  # held; y starts its clock on it
        await asyncio.sleep(timing.lease_duration + 0.2)  # x does not renew
        assert await y.try_acquire_or_renew() and y.leading()
        assert not await x.try_acquire_or_renew()  # x sees y's record: it does not lead
        assert not x.leading() and x.leader == "y"
        spec = lease(kube, where)
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("y", 1)
        assert await y.release()
        spec = lease(kube, where)
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    finally:
        for client in clients:
            await client.close()
    # The chart's ServiceAccount may write that Lease and no other, in the release namespace
    # only, and may neither list nor delete leases.
    sa, (ns, name) = replicas["kubeconfig"], where
    for verb, target, space, allowed in (
        ("get", f"leases.coordination.k8s.io/{name}", ns, "yes"),
        ("update", f"leases.coordination.k8s.io/{name}", ns, "yes"),
        ("update", "leases.coordination.k8s.io/another", ns, "no"),
        ("delete", f"leases.coordination.k8s.io/{name}", ns, "no"),
        ("list", "leases.coordination.k8s.io", ns, "no"),
        ("create", "leases.coordination.k8s.io", ns, "yes"),
        ("create", "leases.coordination.k8s.io", NS, "no"),
    ):
        got = kube.kubectl("auth", "can-i", verb, target, "-n", space, kubeconfig=sa, check=False)
        assert got.stdout.strip() == allowed, (verb, target, space, got.stdout, got.stderr)
