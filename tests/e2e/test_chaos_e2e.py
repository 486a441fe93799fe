"""Chaos: SIGKILL and restart the operator at random points of create/update/delete cycles.

Seeded (AGENTRL_CHAOS_SEED) and bounded (a few cycles). Invariants once things settle:
every live experiment has exactly one RayJob, one runtime ConfigMap, one bundle ConfigMap and
two Services (gateway, metrics), all owned by its *current* uid; the RayJob carries the latest
lifecycle fields; status has caught up with the spec generation; nothing the operator made lacks
an owner.
The harness has no kube-controller-manager, so `collect_garbage` does what its garbage
collector would do for the experiments this test deletes.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support.kube import KubeHarness

from agentrl.api.constants import LABEL_MANAGED_BY, MANAGED_BY

from .operator_process import OperatorProcess, install_chart_rbac
from .test_operator_e2e import status, wait

pytestmark = pytest.mark.e2e
NS = "chaos"
NAMES = ("alpha", "beta", "gamma")
CYCLES = 3
KINDS = "configmaps,services,rayjobs.ray.io"


@pytest.fixture
def chaos_operator(
    kube_harness: KubeHarness, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    # Its own namespace only: a cluster-wide operator here would also reconcile what other
    # test modules left in the session's API server (their experiments, under this
    # operator's default policy) and post events those modules' tests then count.
    proc = OperatorProcess(
        install_chart_rbac(kube_harness, watch=[NS]),
        tmp_path_factory.mktemp("chaos"),
        AGENTRL_NAMESPACES=NS,
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(proc.logs()[-3000:])


def owned_objects(kube: KubeHarness) -> list[dict[str, Any]]:
    got = kube.kubectl_json("get", KINDS, "-n", NS, "-l", f"{LABEL_MANAGED_BY}={MANAGED_BY}")
    return list(got["items"])


def live_uids(kube: KubeHarness) -> dict[str, str]:
    items = kube.kubectl_json("get", "rlx", "-n", NS)["items"]
    return {i["metadata"]["uid"]: i["metadata"]["name"] for i in items}


def collect_garbage(kube: KubeHarness) -> int:
    """Delete objects whose owners are all gone (what the controller-manager's GC does)."""
    uids, doomed = live_uids(kube), []
    for obj in owned_objects(kube):
        refs = obj["metadata"].get("ownerReferences") or []
        if refs and not any(r["uid"] in uids for r in refs):
            doomed.append(
                f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}/{obj['metadata']['name']}"
                if "/" in obj["apiVersion"]
                else f"{obj['kind'].lower()}/{obj['metadata']['name']}"
            )
    if doomed:
        kube.kubectl("delete", "-n", NS, "--ignore-not-found", "--wait=false", *doomed)
    return len(doomed)


def body(name: str, cycle: int) -> dict[str, Any]:
    b = minimal_body(activeDeadlineSeconds=3600 + cycle)
    b["metadata"] = {"name": name, "namespace": NS}
    return b


def maybe_crash(rng: random.Random, op: OperatorProcess) -> None:
    """Sometimes: wait a random moment, SIGKILL the operator, start it again."""
    if rng.random() < 0.6:
        time.sleep(rng.uniform(0.0, 1.2))
        op.kill()
        op.start()


def converged(kube: KubeHarness, expected: dict[str, int]) -> bool:
    uids = live_uids(kube)
    if sorted(uids.values()) != sorted(expected):
        return False
    objs = owned_objects(kube)
    kinds = Counter(
        (o["metadata"]["ownerReferences"][0]["uid"], o["kind"])
        for o in objs
        if o["metadata"].get("ownerReferences")
    )
    for uid, name in uids.items():
        if [kinds[(uid, k)] for k in ("ConfigMap", "RayJob", "Service")] != [2, 1, 2]:
            return False
        st, exp = status(kube, NS, name), kube.kubectl_json("get", "rlx", name, "-n", NS)
        if st.get("observedGeneration") != exp["metadata"]["generation"]:
            return False
        job = kube.kubectl_json("get", "rayjobs.ray.io", name, "-n", NS)
        if job["spec"].get("activeDeadlineSeconds") != expected[name]:
            return False
    return len(objs) == 5 * len(uids)


def test_kill_and_restart_during_cycles(
    kube_harness: KubeHarness, chaos_operator: OperatorProcess
) -> None:
    kube, op = kube_harness, chaos_operator
    seed = int(os.environ.get("AGENTRL_CHAOS_SEED", "20261122"))
    rng = random.Random(seed)
    kube.ensure_namespace(NS)
    expected: dict[str, int] = {}
    for cycle in range(CYCLES):
        for name in NAMES:  # create (or re-create) everything
            kube.apply(body(name, cycle))
            expected[name] = 3600 + cycle
        maybe_crash(rng, op)
        for name in rng.sample(NAMES, 2):  # a lifecycle update
            deadline = 7200 + cycle
            kube.kubectl(
                "patch",
                "rlx",
                name,
                "-n",
                NS,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"activeDeadlineSeconds": deadline}}),
            )
            expected[name] = deadline
        maybe_crash(rng, op)
        if cycle < CYCLES - 1:  # delete one; it comes back next cycle under a new uid
            victim = rng.choice(NAMES)
            kube.kubectl("delete", "rlx", victim, "-n", NS, "--wait=true", "--timeout=60s")
            del expected[victim]
            maybe_crash(rng, op)
            wait(
                lambda v=victim: (
                    collect_garbage(kube) == 0
                    and not any(
                        o["metadata"].get("ownerReferences", [{}])[0].get("name") == v
                        for o in owned_objects(kube)
                    )
                ),
                what=f"{victim} collected (seed {seed})",
            )
    wait(
        lambda: collect_garbage(kube) == 0 and converged(kube, expected),
        what=f"convergence (seed {seed})",
        limit=120,
    )
    for name in expected:
        assert status(kube, NS, name)["phase"] == "Pending"
    assert all(o["metadata"].get("ownerReferences") for o in owned_objects(kube))
    assert op.starts > 1, f"seed {seed} never crashed the operator; pick another seed"
