"""The operator on kmock with KubeRay v1.1.1's RayJob CRD installed (its own release file).

v1.1.1 declares neither `backoffLimit` nor `preRunningDeadlineSeconds`. An experiment that
relies on them gets `KubeRayIncompatible`, one event and nothing created; one that leaves them
at what their absence means runs; an upgraded KubeRay is seen on the next generation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.conftest import minimal_body
from tests.support.kmock_api import (
    KUBERAY_CRD,
    OperatorEmulator,
    install_kuberay_crd,
    running_emulator,
)
from tests.support.shared import KUBERAY_SCHEMAS, require

from agentrl.api.constants import ConditionType
from agentrl.controller import conditions

from .conftest import Api, OperatorRun, wait_for
from .test_operator_kmock import EXP, NS, RAYJOBS, children, created, status_of

# v1.5 has everything agentrl renders by default (submitterConfig, backoffLimit) but not
# preRunningDeadlineSeconds (spec.startupDeadlineSeconds), which arrived in v1.6.
OLD = require(KUBERAY_SCHEMAS / "v1.5.2" / "ray.io_rayjobs.yaml", "KubeRay v1.5.2's RayJob CRD")


@pytest.fixture
async def emulator() -> AsyncIterator[tuple[OperatorEmulator, str]]:
    async with running_emulator() as (api, url):
        install_kuberay_crd(api, OLD)  # before the operator starts and reads it
        yield api, url


def _sweeps(operator: OperatorRun) -> int:
    assert operator.memo is not None
    return int(operator.memo.controller.sweeps)


async def test_a_field_kuberay_would_drop_creates_nothing(api: Api, operator: OperatorRun) -> None:
    await api.create(minimal_body(startupDeadlineSeconds=600))
    st = await wait_for(lambda: status_of(api).get("phase") == "Failed" and status_of(api))
    cond = conditions.get(st, ConditionType.KUBERAY_INCOMPATIBLE)
    assert cond is not None and cond["status"] == "True"
    assert "spec.startupDeadlineSeconds" in cond["message"] and "KubeRay >=" in cond["message"]
    assert conditions.get(st, ConditionType.FAILED)["reason"] == "KubeRayIncompatible"  # type: ignore[index]
    assert children(api) == []  # not even the ConfigMaps
    await wait_for(lambda: api.events("demo"), what="the event")
    mark, swept = len(api.emu.log), _sweeps(operator)
    await wait_for(lambda: _sweeps(operator) >= swept + 3, what="sweeps")
    assert api.reasons("demo") == ["KubeRayIncompatible"]
    assert [r for r in api.emu.log[mark:] if r.is_write] == []
    # KubeRay is upgraded; the next generation reads the CRD again and goes through.
    install_kuberay_crd(api.emu, KUBERAY_CRD)
    await api.patch(EXP, NS, "demo", {"spec": {"activeDeadlineSeconds": 7200}})
    st = await wait_for(lambda: status_of(api).get("rayJobName") and status_of(api))
    assert st["phase"] == "Pending"
    assert conditions.get(st, ConditionType.KUBERAY_INCOMPATIBLE)["status"] == "False"  # type: ignore[index]
    job = api.get(RAYJOBS, NS, "demo")
    assert job is not None and job["spec"]["preRunningDeadlineSeconds"] == 600


async def test_defaults_lose_nothing_on_an_old_kuberay(api: Api, operator: OperatorRun) -> None:
    await created(api)  # no startup deadline set, so nothing v1.5 lacks is rendered
    st = status_of(api)
    assert st["phase"] == "Pending"
    assert conditions.get(st, ConditionType.KUBERAY_INCOMPATIBLE) is None


async def test_a_lifecycle_change_kuberay_would_drop_is_not_applied(
    api: Api, operator: OperatorRun
) -> None:
    await created(api)
    before = api.get(RAYJOBS, NS, "demo")
    await api.patch(EXP, NS, "demo", {"spec": {"startupDeadlineSeconds": 600}})
    st = await wait_for(
        lambda: conditions.is_true(s := status_of(api), ConditionType.KUBERAY_INCOMPATIBLE) and s
    )
    assert (
        "spec.startupDeadlineSeconds"
        in conditions.get(st, ConditionType.KUBERAY_INCOMPATIBLE)["message"]
    )  # type: ignore[index]
    assert st["phase"] == "Pending"  # the RayJob exists and runs on as it was
    assert api.get(RAYJOBS, NS, "demo")["spec"] == before["spec"]  # type: ignore[index]
    await wait_for(lambda: api.reasons("demo") == ["KubeRayIncompatible"])
