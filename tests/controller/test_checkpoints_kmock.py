"""A refused checkpoint clash stays refused across an operator restart (on kmock).

Once the experiment that kept the directory has finished, a restarted operator reconciles
every experiment it sees once; starting the refused one then would resume the finished run's
last checkpoint, with nobody asking. Its refusal stands for its generation.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import minimal_body

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions

from .conftest import Api, OperatorRun, wait_for
from .test_operator_kmock import NS, RAYJOBS, created, status_of


def body_for(name: str) -> dict[str, Any]:
    body = minimal_body(
        runtime={"volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpts"}}],
                 "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]},
        checkpoint={"path": "/checkpoints/qwen", "saveInterval": 5},
    )  # fmt: skip
    body["metadata"] = {"name": name, "namespace": NS}
    return body


def refused(api: Api, name: str) -> bool:
    return conditions.is_true(status_of(api, name), ConditionType.CHECKPOINT_CONFLICT)


async def test_a_refusal_outlives_the_other_run_and_a_restart(
    api: Api, operator: OperatorRun
) -> None:
    await created(api, body_for("first"))
    await api.create(body_for("copy"))
    await wait_for(lambda: refused(api, "copy"), what="copy refused")
    before = status_of(api, "copy")
    assert before["phase"] == "Failed" and "RLExperiment first" in str(before["conditions"])
    await api.patch(RAYJOBS, NS, "first", {"status": {
        "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}, sub="status")  # fmt: skip
    await wait_for(lambda: status_of(api, "first").get("phase") == "Succeeded", what="done")
    await operator.stop()
    await operator.start()
    assert operator.memo is not None
    experiments = operator.memo.controller.experiments
    await wait_for(lambda: (e := experiments.get((NS, "copy"))) and e.reconciled == 1,
                   what="copy reconciled by the new operator")  # fmt: skip
    assert api.get(RAYJOBS, NS, "copy") is None
    assert status_of(api, "copy") == before
