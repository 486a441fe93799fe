"""An operator with no default Ray pod image (agentrl publishes none yet) on kmock.

A spec without `spec.runtime.image` has nothing to run: the operator says so in the Valid
condition and one InvalidSpec event, with the fix, and creates nothing; naming an image fixes
it. A spec that names its own image never needs the default.
"""

from __future__ import annotations

import pytest
from tests.conftest import minimal_body

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions
from agentrl.controller.config import OperatorConfig

from .conftest import Api, OperatorRun, wait_for
from .test_operator_kmock import EXP, NS, children, status_of

IMAGE = "runtime@sha256:" + "2" * 64  # a test value, never pulled


@pytest.fixture
def op_config() -> OperatorConfig:
    return OperatorConfig(metrics_port=0, liveness_endpoint="", sweep_interval=0.1,
                          scrape_timeout=1.0, image=None)  # fmt: skip


async def test_no_image_anywhere_is_an_invalid_spec_with_the_fix(
    api: Api, operator: OperatorRun
) -> None:
    await api.create(minimal_body())
    st = await wait_for(lambda: status_of(api).get("phase") == "Failed" and status_of(api))
    valid = conditions.get(st, ConditionType.VALID)
    assert valid is not None and valid["status"] == "False"
    message = valid["message"]
    assert "spec.runtime.image: not set, and there is no default Ray pod image" in message
    for fix in ("images/slime/Dockerfile", "@sha256:<digest>", "operator.runtimeImage"):
        assert fix in message
    # The event follows the status write it describes: wait for it, then check it is one.
    events = await wait_for(lambda: api.events("demo"), what="the event")
    assert [e["reason"] for e in events] == ["InvalidSpec"]
    assert "spec.runtime.image" in events[0]["message"]
    assert children(api) == []
    # Naming the image fixes it (runtime.image is immutable only once the RayJob exists).
    await api.patch(EXP, NS, "demo", {"spec": {"runtime": {"image": IMAGE}}})
    await wait_for(lambda: status_of(api).get("rayJobName"), what="created after the fix")
    assert conditions.is_true(status_of(api), ConditionType.VALID)
    (job,) = [c for c in children(api) if c["kind"] == "RayJob"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["image"] == IMAGE


async def test_a_spec_with_its_own_image_needs_no_default(api: Api, operator: OperatorRun) -> None:
    await api.create(minimal_body(runtime={"image": IMAGE}))
    await wait_for(lambda: status_of(api).get("rayJobName"), what="status.rayJobName")
    st = status_of(api)
    assert conditions.is_true(st, ConditionType.VALID)
    assert not conditions.is_true(st, ConditionType.CONFIG_WARNING)  # pinned: nothing to say
