"""A copied experiment naming a running one's checkpoint directory, on a real kube-apiserver.

A researcher copies an experiment's YAML, renames it and applies it while the first runs;
both name one `checkpoint.path` on one PersistentVolumeClaim. The operator (under the chart's
RBAC) must refuse the copy before any RayJob exists, the way it refuses an invalid spec:
Failed, a `CheckpointConflict` condition naming the other experiment, the field and the fix,
one event, no retry. It stays refused when the first finishes (starting then would resume the
first run's last checkpoint with nobody asking), and a spec change that gives it a directory
of its own creates its RayJob.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tests.conftest import minimal_body
from tests.support.kube import KubeHarness

from .test_operator_e2e import (
    children,
    condition,
    events,
    experiment,
    metrics_url,
    operator,
    patch_rayjob_status,
    reasons_become,
    status,
    wait,
)

__all__ = ["metrics_url", "operator"]
pytestmark = pytest.mark.e2e
NS = "e2e-checkpoints"
QUIET = 4.0  # seconds of sweeps (AGENTRL_SWEEP_INTERVAL=1) after which nothing may have moved


def body_for(name: str, path: str, sub: str | None = None) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": "ckpt", "mountPath": "/checkpoints"}
    if sub is not None:
        mount["subPath"] = sub
    body = minimal_body(
        runtime={"volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpts"}}],
                 "volumeMounts": [mount]},
        checkpoint={"path": path, "saveInterval": 5},
    )  # fmt: skip
    body["metadata"] = {"name": name, "namespace": NS}
    return body


def rayjobs(kube: KubeHarness, name: str) -> list[dict[str, Any]]:
    return [k for k in children(kube, NS, name) if k["kind"] == "RayJob"]


def test_a_copy_writing_a_running_experiments_checkpoint_is_refused(
    kube_harness: KubeHarness, operator: object
) -> None:
    kube = kube_harness
    kube.ensure_namespace(NS)
    kube.apply(body_for("first", "/checkpoints/qwen"))
    wait(lambda: status(kube, NS, "first").get("rayJobName"), what="first created")
    # The copy: a new name, the same directory reached through a subPath of the same claim.
    kube.apply(body_for("copy", "/checkpoints", sub="qwen"))
    st = wait(lambda: (s := status(kube, NS, "copy")).get("phase") == "Failed" and s,
              what="copy refused")  # fmt: skip
    cond = condition(st, "CheckpointConflict")
    assert cond["status"] == "True" and cond["reason"] == "CheckpointConflict"
    message = cond["message"]
    assert message.startswith("spec.checkpoint.path /checkpoints (/qwen on "
                              "PersistentVolumeClaim ckpts) is the same directory as the "
                              "checkpoint directory of RLExperiment first")  # fmt: skip
    assert "a distinct spec.checkpoint.path, or a distinct subPath" in message
    assert condition(st, "Failed")["reason"] == "CheckpointConflict"
    assert condition(st, "Failed")["message"] == message
    assert rayjobs(kube, "copy") == []  # no RayJob: no GPU
    (event,) = reasons_become(kube, NS, "copy", lambda r: r == ["CheckpointConflict"],
                              what="one CheckpointConflict event")  # fmt: skip
    assert events(kube, NS, "copy")[0]["type"] == "Warning"
    assert event == "CheckpointConflict"

    # The first run finishes. The copy stays refused: on its own it would now resume the
    # first run's last checkpoint.
    patch_rayjob_status(kube, NS, "first", {"jobDeploymentStatus": "Complete",
                                            "jobStatus": "SUCCEEDED", "succeeded": 1})  # fmt: skip
    wait(lambda: status(kube, NS, "first").get("phase") == "Succeeded", what="first done")
    version = experiment(kube, NS, "copy")["metadata"]["resourceVersion"]
    time.sleep(QUIET)
    assert experiment(kube, NS, "copy")["metadata"]["resourceVersion"] == version
    assert rayjobs(kube, "copy") == []

    # A sub-path of its own (a new generation) is checked again and goes through.
    own = {"name": "ckpt", "mountPath": "/checkpoints", "subPath": "copy"}
    kube.kubectl("patch", "rlx", "copy", "-n", NS, "--type=merge", "-p",
                 json.dumps({"spec": {"runtime": {"volumeMounts": [own]}}}))  # fmt: skip
    st = wait(lambda: status(kube, NS, "copy").get("rayJobName") and status(kube, NS, "copy"),
              what="copy created")  # fmt: skip
    assert st["phase"] == "Pending" and st["observedGeneration"] == 2
    assert condition(st, "CheckpointConflict")["status"] == "False"
    assert len(rayjobs(kube, "copy")) == 1
