"""Every name an accepted experiment name derives is legal where Kubernetes uses it."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentrl.api.validation import parse_experiment
from agentrl.render import names
from conftest import minimal_body

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
EXPERIMENT_NAMES = st.from_regex(r"\A[a-z]([-a-z0-9]{0,45}[a-z0-9])?\Z")


@given(EXPERIMENT_NAMES, st.text("0123456789abcdef", min_size=64, max_size=64))
def test_derived_names_fit(name: str, digest: str) -> None:
    body = minimal_body()
    body["metadata"]["name"] = name
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    rayjob = names.rayjob_name(exp)
    assert DNS1035.match(rayjob) and len(rayjob) <= 47  # KubeRay's cap
    service = names.service_name(exp)
    assert DNS1035.match(service) and len(service) <= 63  # Services are DNS-1035 labels
    for cm in (names.config_map_name(exp), names.bundle_config_map_name(exp, digest)):
        assert DNS1123_SUBDOMAIN.match(cm) and len(cm) <= 253
    assert names.bundle_config_map_name(exp, digest) == names.bundle_config_map_name(exp, digest)
    assert DNS1035.match(names.extra_code_volume_name(15))
