"""The chart's `policy` value reaches the operator unchanged, its default is the operator's
default (Kubernetes' baseline level), and its schema refuses what the operator would refuse
at start-up, so a bad policy fails `helm install` instead of crash-looping the operator."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, HELMS, ROOT, one, render, run_helm

from agentrl.api.kube_rules import VOLUME_SOURCES
from agentrl.api.policy import BASELINE, HostPath, Policy, load_policy
from agentrl.api.validation import errors, parse_experiment
from agentrl.controller.config import load
from conftest import minimal_body


def operator_env(objs: list[dict[str, Any]]) -> dict[str, str]:
    container = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_default_policy_is_the_operators_baseline() -> None:
    env = operator_env(render())
    assert load(env).policy == BASELINE
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["policy"] == BASELINE.dump()


def test_a_platform_policy_reaches_the_operator() -> None:
    env = operator_env(render(values=CHART / "ci" / "policy-values.yaml"))
    policy = load(env).policy
    assert policy.host_paths == (HostPath(pathPrefix="/mnt/nvme/datasets", readOnly=True),)
    assert policy.capabilities == ("IPC_LOCK",)
    assert policy.service_accounts == ("agentrl-runner", "ml-*/trainer")
    assert "secret" not in policy.volume_types
    # What it allows passes; the same spec under the default is refused.
    body = minimal_body(
        runtime={"serviceAccountName": "agentrl-runner",
                 "image": "images.corp.example/ml/slime@sha256:" + "1" * 64},
        resources={"priorityClassName": "training-high",
                   "extraResources": {"vpc.amazonaws.com/efa": 4}},
    )  # fmt: skip
    assert errors(parse_experiment(body, policy)[1]) == []
    refused = {p.path for p in errors(parse_experiment(body, BASELINE)[1])}
    assert refused == {"spec.runtime.serviceAccountName", "spec.resources.extraResources"}


def test_schema_and_policy_model_agree() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["policy"]
    fields = {f.alias for f in Policy.model_fields.values()}
    assert set(schema["properties"]) == fields
    assert schema["properties"]["volumeTypes"]["items"]["enum"] == sorted(
        VOLUME_SOURCES - {"hostPath"}
    )
    host = schema["properties"]["hostPaths"]["items"]["properties"]
    assert set(host) == {f.alias for f in HostPath.model_fields.values()}


@pytest.mark.parametrize("helm", sorted(HELMS))
@pytest.mark.parametrize(
    "bad",
    [
        "policy.volumeTypes={hostPath}",
        "policy.volumeTypes={nfs,hostpath}",
        "policy.capabilities={CAP_IPC_LOCK}",
        "policy.capabilities={ALL}",
        "policy.hostPaths[0].pathPrefix=mnt/nvme",
        "policy.hostPaths[0].pathPrefix=/mnt/../etc",
        "policy.hostPaths[0].readonly=true",
        "policy.serviceAccount={runner}",
        "policy.serviceAccounts={Not_A_Name}",
        "policy.imageRegistries={reg.example/x@sha256:1}",
    ],
)
def test_schema_refuses_a_bad_policy(helm: str, bad: str) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), "--set", bad, check=False)
    assert proc.returncode != 0, bad
    key = bad.split("=", maxsplit=1)[0].split(".")[1].split("[", maxsplit=1)[0]
    assert key in proc.stdout + proc.stderr, (bad, proc.stdout)


def test_the_examples_policy_file_is_chart_values() -> None:
    """examples/platform/policy.yaml works as `helm install -f` (its comment says so)."""
    path = ROOT / "examples" / "platform" / "policy.yaml"
    env = operator_env(render(values=path))
    assert load(env).policy == load_policy(yaml.safe_load(path.read_text()), str(path))
    assert load(env).policy.service_accounts == ("agentrl-runner",)
