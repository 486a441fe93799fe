"""The handler set stays what the Controller's level-triggered reconcile assumes."""

from __future__ import annotations

import kopf
import pytest

from agentrl.api.constants import GROUP, PLURAL, VERSION
from agentrl.controller import handlers

WATCHED = [
    pytest.param(kopf.Resource(GROUP, VERSION, PLURAL), id="rlexperiments"),
    pytest.param(kopf.Resource("ray.io", "v1", "rayjobs"), id="rayjobs"),
    pytest.param(kopf.Resource("", "v1", "pods"), id="pods"),
]


@pytest.mark.parametrize("resource", WATCHED)
def test_only_event_handlers_are_registered(resource: kopf.Resource) -> None:
    # handlers.NoEssenceStorage gives kopf an empty essence of every body; that is right
    # only while no create/update/resume/delete/field handler, daemon or timer reads
    # kopf's diffs. The spec goes through handlers.experiment_event instead.
    registry = kopf.get_default_registry()
    assert handlers.NoEssenceStorage is not None
    assert registry._watching.has_handlers(resource=resource)
    assert not registry._changing.has_handlers(resource=resource)
    assert not registry._spawning.has_handlers(resource=resource)
