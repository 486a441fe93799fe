"""`agentrl validate|render --policy`: users meet the cluster's policy before applying.

Without `--policy` and without `AGENTRL_POLICY` the CLI judges by the operator's own default,
Kubernetes' baseline level, so what it calls OK is what a default install accepts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentrl.cli.main import main
from conftest import EXAMPLES_DIR, example_policy, minimal_body

EXAMPLE = EXAMPLES_DIR / "qwen3-32b-swe-4node-tp-pp.yaml"
POLICY = EXAMPLES_DIR / "platform" / "policy.yaml"


@pytest.fixture(autouse=True)
def no_policy_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRL_POLICY", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_default_is_baseline_and_names_each_violation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "validate", "-f", str(EXAMPLE))
    assert code == 1
    lines = out.splitlines()
    assert lines[-1].endswith("2 error(s); nothing would be created")
    sa = next(line for line in lines if "spec.runtime.serviceAccountName:" in line)
    assert "policy.serviceAccounts" in sa and "agentrl chart value policy.serviceAccounts" in sa
    efa = next(line for line in lines if "spec.resources.extraResources:" in line)
    assert "CAP_IPC_LOCK" in efa and "policy.capabilities" in efa


def test_policy_file_admits_what_it_allows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "-f", str(EXAMPLE), "--policy", str(POLICY))
    assert code == 0
    assert out.strip().endswith(f"policy: {POLICY})")


def test_chart_values_file_and_plain_policy_both_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"image": {"tag": "1"}, "policy": example_policy()}))
    plain = tmp_path / "policy.json"
    plain.write_text(json.dumps(example_policy()))
    for path in (values, plain):
        code, _, _ = run(capsys, "validate", "-f", str(EXAMPLE), "--policy", str(path))
        assert code == 0, path


def test_policy_from_env_as_the_operator_reads_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTRL_POLICY", json.dumps(example_policy()))
    code, out, _ = run(capsys, "validate", "-f", str(EXAMPLE))
    assert code == 0 and "policy: AGENTRL_POLICY)" in out


def test_render_refuses_what_the_policy_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "sock.yaml"
    spec.write_text(yaml.safe_dump(minimal_body(runtime={
        "volumes": [{"name": "s", "hostPath": {"path": "/var/run/docker.sock"}}],
        "volumeMounts": [{"name": "s", "mountPath": "/var/run/docker.sock"}],
    })))  # fmt: skip
    code, out, err = run(capsys, "render", "-f", str(spec))
    assert code == 1 and out == ""
    assert "spec.runtime.volumes[0].hostPath.path: host path /var/run/docker.sock" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("policy:\n  capabilities: [CAP_IPC_LOCK]\n", "policy.capabilities: 'CAP_IPC_LOCK'"),
        ("hostPaths: [{pathPrefix: relative}]\n", "policy.hostPaths[0].pathPrefix"),
        ("serviceAcounts: [x]\n", "did you mean serviceAccounts?"),
        ("- a list\n", "a policy is a mapping"),
        ("policy: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_policy_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "validate", "-f", str(EXAMPLE), "--policy", str(path))
    assert code == 1 and out == ""
    assert err.startswith(f"error: {path}") and message in err and "Traceback" not in err


def test_missing_policy_file_and_bad_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "validate", "-f", str(EXAMPLE), "--policy", "nope.yaml")
    assert code == 1 and err.strip() == "error: nope.yaml: no such file"
    monkeypatch.setenv("AGENTRL_POLICY", "{not json")
    code, _, err = run(capsys, "validate", "-f", str(EXAMPLE))
    assert code == 1 and err.startswith("error: AGENTRL_POLICY is not JSON")
