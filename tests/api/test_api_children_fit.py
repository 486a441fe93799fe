"""`children_fit` agrees with what the renderer produces: a spec validation accepts renders a
runtime-config ConfigMap within 1 MiB and a RayJob within 1.5 MiB, and a spec whose children
would not fit is refused (at the field that makes them big)."""

from __future__ import annotations

import json

import pytest

from agentrl.api.bounds import MAX_OBJECT_BYTES
from agentrl.api.constants import CONFIGMAP_MAX_BYTES
from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, render_all
from conftest import minimal_body

DEFAULTS = OperatorDefaults(image="img@sha256:" + "1" * 64)
BUNDLE = {"agentrl/__init__.py": "x = 1\n"}
CHUNK = "x" * 30_000


def sizes(body: dict[str, object]) -> tuple[int, int] | None:
    exp, _ = parse_experiment(body)
    if exp is None:
        return None
    objects = render_all(exp, DEFAULTS, BUNDLE)
    config = next(o for o in objects if o["metadata"]["name"].endswith("-config"))
    job = next(o for o in objects if o["kind"] == "RayJob")
    return len(json.dumps(config["data"]).encode()), len(json.dumps(job).encode())


@pytest.mark.parametrize("count", [10, 25, 30, 33, 34, 36, 40, 45])
def test_extra_args_near_the_configmap_limit(count: int) -> None:
    body = minimal_body(runtime={"extraArgs": [CHUNK] * count})
    found = sizes(body)
    if found is None:
        assert [p.path for p in parse_experiment(body)[1]] == ["spec.runtime.extraArgs"]
    else:
        assert found[0] <= CONFIGMAP_MAX_BYTES
    if count * len(CHUNK) > CONFIGMAP_MAX_BYTES:
        assert found is None


@pytest.mark.parametrize("count", [5, 15, 20, 23, 24, 26, 30])
def test_env_near_the_rayjob_limit(count: int) -> None:
    env = [{"name": f"E{i}", "value": CHUNK} for i in range(count)]
    body = minimal_body(runtime={"env": env})
    found = sizes(body)
    if found is None:
        assert [p.path for p in parse_experiment(body)[1]] == ["spec.runtime.env"]
    else:
        assert found[1] <= MAX_OBJECT_BYTES
    if 2 * count * len(CHUNK) > MAX_OBJECT_BYTES:
        assert found is None
