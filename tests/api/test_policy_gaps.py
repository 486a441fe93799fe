"""The policy's gaps (issue 22): which Secrets an experiment may reference, `system-` classes by
pattern, policy files without a policy, host paths listed twice, stdin read twice."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.api.policy import BASELINE, Policy, PolicyError, load_policy, policy_warnings
from agentrl.api.validation import errors, parse_experiment
from agentrl.cli.main import main
from conftest import minimal_body

SECRET_REF = {"secretKeyRef": {"name": "team-hf", "key": "token"}}


def _refs_body() -> dict[str, Any]:
    return minimal_body(
        agent={"http": {"url": "http://a.rl.svc:8080",
                        "headers": [{"name": "Authorization", **SECRET_REF}]}},
        tracking={"wandb": {"project": "p", "apiKeySecret": {"name": "wandb", "key": "k"}}},
        runtime={
            "env": [{"name": "HF_TOKEN", "valueFrom": SECRET_REF}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "ssh-keys"}},
                {"name": "b", "projected": {"sources": [{"secret": {"name": "aws-creds"}}]}},
                {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
            ],
        },
    )  # fmt: skip


def test_by_default_any_secret_may_be_referenced() -> None:
    assert errors(parse_experiment(_refs_body(), BASELINE)[1]) == []


def test_secrets_names_bound_every_reference() -> None:
    policy = Policy(secrets={"names": ["team-*", "wandb"]})
    found = {p.path: str(p) for p in errors(parse_experiment(_refs_body(), policy)[1])}
    assert set(found) == {
        "spec.runtime.volumes[0].secret.secretName",
        "spec.runtime.volumes[1].projected.sources[0].secret.name",
        "spec.runtime.volumes[2].csi.nodePublishSecretRef.name",
    }
    assert (
        "policy.secrets (allowed: team-*, wandb)"
        in found["spec.runtime.volumes[0].secret.secretName"]
    )


def test_a_system_class_pattern_is_refused_when_the_policy_is_read() -> None:
    with pytest.raises(PolicyError, match="only by their exact names"):
        load_policy({"priorityClasses": ["system-*"]}, "values.yaml")
    assert load_policy({"priorityClasses": ["*", "system-node-critical"]}, "v").priority_classes


def test_a_file_without_a_policy_says_so() -> None:
    with pytest.raises(PolicyError, match="holds no policy: neither a `policy:` key"):
        load_policy({"image": {"tag": "1"}, "rbac": {"create": True}}, "values.yaml")
    assert load_policy({}, "empty.yaml") == BASELINE


def test_a_host_path_listed_read_only_and_writable_warns() -> None:
    policy = Policy(
        hostPaths=[{"pathPrefix": "/data"}, {"pathPrefix": "/data/", "readOnly": False}]
    )
    (warning,) = policy_warnings(policy)
    assert warning.startswith("policy.hostPaths[1]: /data is listed read-only and writable")
    assert policy_warnings(Policy(hostPaths=[{"pathPrefix": "/a"}, {"pathPrefix": "/b"}])) == []


def test_stdin_for_both_the_spec_and_the_policy_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump(minimal_body())))
    assert main(["validate", "-f", "-", "--policy", "-"]) == 1
    assert "both read stdin" in capsys.readouterr().err


def test_the_cli_prints_policy_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, policy = tmp_path / "x.yaml", tmp_path / "policy.yaml"
    spec.write_text(yaml.safe_dump(minimal_body()))
    policy.write_text("hostPaths: [{pathPrefix: /d}, {pathPrefix: /d, readOnly: false}]\n")
    main(["validate", "-f", str(spec), "--policy", str(policy), "--image", "r@sha256:" + "1" * 64])
    assert f"{policy}: warning: policy.hostPaths[1]" in capsys.readouterr().err
