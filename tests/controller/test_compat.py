"""The installed-KubeRay check, as tables over KubeRay's own released RayJob CRDs.

The CRDs are KubeRay's, per release, read as data from the shared schema snapshots (the
tests skip with that reason when the folder is absent; CI has it). The pruning itself is
`agentrl.render.kuberay`; what is tested here is the operator's decision on top of it.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import stamina
import yaml
from tests.conftest import minimal_body
from tests.support.shared import KUBERAY_SCHEMAS, require

from agentrl.api.constants import DEFAULT_STARTUP_DEADLINE_SECONDS
from agentrl.api.validation import parse_experiment
from agentrl.controller import compat
from agentrl.controller.kube import KubeError
from agentrl.render import OperatorDefaults, kuberay, render_all

SCHEMAS = require(KUBERAY_SCHEMAS, "KubeRay's RayJob CRD per release")


@functools.cache
def _crd(release: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # a CRD is ~1 MB of YAML
    text = (SCHEMAS / release / "ray.io_rayjobs.yaml").read_text(encoding="utf-8")
    loaded: dict[str, Any] = yaml.load(text, Loader=loader)
    return loaded


def crd(release: str) -> dict[str, Any]:
    return copy.deepcopy(_crd(release))


def rayjob(**spec: Any) -> dict[str, Any]:
    exp, problems = parse_experiment(minimal_body(**spec))
    assert exp is not None, problems
    return render_all(exp, OperatorDefaults(image="img@sha256:" + "1" * 64), {}).rayjob


def defaulted(**spec: Any) -> frozenset[str]:
    exp, problems = parse_experiment(minimal_body(**spec))
    assert exp is not None, problems
    return kuberay.defaulted(exp.spec)


@pytest.mark.parametrize(
    ("release", "spec", "lost"),
    [
        # backoffLimit 0 is rendered always and KubeRay reads its absence as 0, but v1.1 has
        # no submitterConfig, which agentrl renders on every RayJob: below the minimum.
        pytest.param("v1.1.1", {}, ["submitterConfig"], id="1.1-defaults"),
        pytest.param("v1.1.1", {"backoffLimit": 2}, ["spec.backoffLimit", "submitterConfig"],
                     id="1.1-retries"),
        pytest.param("v1.1.1", {"startupDeadlineSeconds": 600},
                     ["submitterConfig", "spec.startupDeadlineSeconds"], id="1.1-startup-deadline"),
        pytest.param("v1.5.2", {}, [], id="1.5-defaults"),
        pytest.param("v1.2.2", {"backoffLimit": 2}, [], id="1.2-retries"),
        pytest.param("v1.5.2", {"startupDeadlineSeconds": 600}, ["spec.startupDeadlineSeconds"],
                     id="1.5-startup-deadline"),
        pytest.param("v1.6.2", {"startupDeadlineSeconds": 600, "backoffLimit": 2}, [],
                     id="1.6-everything"),
        pytest.param("v1.7.0", {"startupDeadlineSeconds": 600, "backoffLimit": 2,
                                "suspend": True, "ttlSecondsAfterFinished": 60}, [],
                     id="1.7-everything"),
    ],
)  # fmt: skip
def test_losses_by_release(release: str, spec: dict[str, Any], lost: list[str]) -> None:
    found = compat.losses(rayjob(**spec), crd(release), defaulted(**spec))
    assert len(found) == len(lost), found
    for field in lost:  # one message per lost field, each naming it
        assert [m for m in found if field in m and "KubeRay" in m], (field, found)


def test_the_default_startup_deadline_is_no_loss_but_a_spec_value_is() -> None:
    """Every RayJob carries preRunningDeadlineSeconds (the default when the spec leaves it
    unset); KubeRay 1.5 drops it. Only a value the spec asked for is a loss."""
    job = rayjob()
    assert job["spec"]["preRunningDeadlineSeconds"] == DEFAULT_STARTUP_DEADLINE_SECONDS
    assert "spec.preRunningDeadlineSeconds" in defaulted()
    assert compat.losses(job, crd("v1.5.2"), defaulted()) == []
    (lost,) = compat.losses(job, crd("v1.5.2"))  # the same field, not marked defaulted
    assert "spec.startupDeadlineSeconds" in lost
    explicit = {"startupDeadlineSeconds": DEFAULT_STARTUP_DEADLINE_SECONDS}
    assert "spec.preRunningDeadlineSeconds" not in defaulted(**explicit)
    assert len(compat.losses(rayjob(**explicit), crd("v1.5.2"), defaulted(**explicit))) == 1


def test_kuberay_not_installed() -> None:
    (message,) = compat.losses(rayjob(), None)
    assert "not installed" in message and "rayjobs.ray.io" in message


def test_a_crd_without_ray_io_v1() -> None:
    old = crd("v1.7.0")
    old["spec"]["versions"] = [v for v in old["spec"]["versions"] if v["name"] != "v1"]
    (message,) = compat.losses(rayjob(), old)
    assert "v1" in message


@pytest.mark.parametrize(
    ("path", "value", "harmless"),
    [
        pytest.param("spec.backoffLimit", 0, True, id="backoff-0"),
        pytest.param("spec.backoffLimit", 3, False, id="backoff-3"),
        pytest.param("spec.suspend", False, True, id="not-suspended"),
        pytest.param("spec.suspend", True, False, id="suspended"),
        pytest.param("spec.ttlSecondsAfterFinished", 0, True, id="ttl-0"),
        pytest.param("spec.ttlSecondsAfterFinished", False, False, id="false-is-not-0"),
        pytest.param("spec.preRunningDeadlineSeconds", 0, False, id="not-a-zero-value-field"),
    ],
)
def test_harmless_only_at_the_value_absence_means(path: str, value: Any, harmless: bool) -> None:
    obj: dict[str, Any] = {"spec": {path.split(".")[1]: value}}
    assert compat._harmless(obj, path) is harmless


def test_a_lifecycle_patch_is_checked_without_its_removals() -> None:
    patch = {"metadata": {"annotations": {}},
             "spec": {"preRunningDeadlineSeconds": 600, "activeDeadlineSeconds": None}}  # fmt: skip
    shaped = compat.patched(patch)
    assert shaped["spec"] == {"preRunningDeadlineSeconds": 600}
    assert len(compat.losses(shaped, crd("v1.5.2"))) == 1
    assert compat.losses(shaped, crd("v1.6.2")) == []


class CrdApi:
    """Answers the operator's one CRD GET from a list of outcomes (an object, None, errors)."""

    def __init__(self, *answers: Any) -> None:
        self.answers, self.gets = list(answers), 0

    async def get(self, api: str, kind: str, namespace: str | None, name: str) -> Any:
        assert (api, kind, namespace, name) == (compat.CRD_API, "CustomResourceDefinition",
                                                 None, "rayjobs.ray.io")  # fmt: skip
        self.gets += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def error(status: int) -> KubeError:
    return KubeError(status, "GET", "/apis/.../rayjobs.ray.io", '{"message": "no"}')


@pytest.fixture(autouse=True)
def fast_retries() -> Any:
    stamina.set_testing(True, attempts=4)  # no real waits; the attempts still happen
    yield
    stamina.set_testing(False)


async def test_read_once_then_again_only_before_a_refusal() -> None:
    api = CrdApi(crd("v1.7.0"))
    installed = compat.InstalledKubeRay(api)  # type: ignore[arg-type]
    await installed.read()
    assert await installed.losses(rayjob(startupDeadlineSeconds=60)) == []
    assert api.gets == 1  # nothing refused: no second read


async def test_an_upgraded_kuberay_is_seen_before_refusing() -> None:
    api = CrdApi(crd("v1.5.2"), crd("v1.6.2"))
    installed = compat.InstalledKubeRay(api)  # type: ignore[arg-type]
    await installed.read()
    assert await installed.losses(rayjob(startupDeadlineSeconds=60)) == []
    assert api.gets == 2


async def test_still_too_old_after_the_second_read() -> None:
    api = CrdApi(crd("v1.5.2"))
    installed = compat.InstalledKubeRay(api)  # type: ignore[arg-type]
    await installed.read()
    (message,) = await installed.losses(rayjob(startupDeadlineSeconds=60))
    assert "startupDeadlineSeconds" in message


async def test_transient_errors_are_retried() -> None:
    api = CrdApi(error(503), error(429), crd("v1.1.1"))
    installed = compat.InstalledKubeRay(api)  # type: ignore[arg-type]
    await installed.read()
    assert installed.known and api.gets == 3


async def test_forbidden_turns_the_check_off_without_blocking() -> None:
    api = CrdApi(error(403))
    installed = compat.InstalledKubeRay(api)  # type: ignore[arg-type]
    await installed.read()
    assert await installed.losses(rayjob(startupDeadlineSeconds=60)) == []
    assert api.gets == 1  # not asked again on every reconcile


async def test_unreadable_for_now_blocks_nothing_and_is_read_again_later() -> None:
    now = [0.0]
    api = CrdApi(error(500), error(500), error(500), error(500), crd("v1.5.2"))
    installed = compat.InstalledKubeRay(api, clock=lambda: now[0])  # type: ignore[arg-type]
    await installed.read()
    assert not installed.known and api.gets == 4  # stamina's attempts
    assert await installed.losses(rayjob(startupDeadlineSeconds=60)) == []
    assert api.gets == 4  # not before REREAD_AFTER
    now[0] = compat.REREAD_AFTER
    assert len(await installed.losses(rayjob(startupDeadlineSeconds=60))) == 1
