"""hack/pin-images.py: a release writes its pushed digests where agentrl reads its defaults.

The release workflow runs the script on its checkout; here it runs on a copy of the repository,
and the pinned copy is then used for real: the CLI of that copy renders without `--image`, helm
installs its chart without any `--set`, and ruff still passes on what was written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.chart.chart_helpers import HELMS, helm_env

from conftest import ROOT

SCRIPT = ROOT / "hack" / "pin-images.py"
EXAMPLE = "examples/qwen2.5-3b-gsm8k-agentcore.yaml"
# Test values in the shape a registry answers with (never pulled).
RUNTIME = "registry.test/team/agentrl-runtime:0.1.0@sha256:" + "a" * 64
OPERATOR = "registry.test:5000/team/agentrl-operator:0.1.0@sha256:" + "b" * 64
BASE = "slimerl/slime:nightly-dev-20260629a@sha256:" + "c" * 64


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The parts of the repository the script edits and the checks below use."""
    root = tmp_path / "repo"
    for part in ("operator", "charts", "images", "examples"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, root / part)
    return root


def pin(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args],
                          capture_output=True, text=True, check=False)  # fmt: skip


def agentrl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "operator")}
    env.pop("AGENTRL_IMAGE", None)
    return subprocess.run([sys.executable, "-m", "agentrl.cli.main", *args], cwd=root, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_pinned_defaults_are_what_the_cli_and_operator_use(repo: Path) -> None:
    proc = pin(repo, "--runtime-image", RUNTIME, "--operator-image", OPERATOR,
               "--slime-base", BASE)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    validate = agentrl(repo, "validate", "-f", EXAMPLE)
    assert validate.returncode == 0 and "warning" not in validate.stdout, validate.stdout
    render = agentrl(repo, "render", "-f", EXAMPLE)
    assert render.returncode == 0, render.stderr
    (job,) = [d for d in yaml.safe_load_all(render.stdout) if d["kind"] == "RayJob"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["image"] == RUNTIME
    assert f"ARG SLIME_BASE={BASE}\n" in (repo / "images/slime/Dockerfile").read_text()
    # What the release branch commits still passes the project's lint and format checks.
    ruff = Path(sys.executable).parent / "ruff"
    for check in (["check"], ["format", "--check"]):
        lint = subprocess.run([str(ruff), *check, "--config", str(ROOT / "pyproject.toml"),
                               str(repo / "operator/agentrl/render/defaults.py")],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert lint.returncode == 0, lint.stdout + lint.stderr


def test_pinned_chart_installs_with_no_values(repo: Path) -> None:
    assert pin(repo, "--runtime-image", RUNTIME, "--operator-image", OPERATOR).returncode == 0
    chart = repo / "charts" / "agentrl"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert values["image"] == {
        **values["image"],
        "repository": "registry.test:5000/team/agentrl-operator",
        "tag": "0.1.0",
        "digest": "sha256:" + "b" * 64,
    }
    assert values["operator"]["runtimeImage"] == RUNTIME
    kubeconfig = repo / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    out = subprocess.run(
        [str(HELMS["helm4"]), "install", "agentrl", str(chart), "-n", "agentrl",
         "--dry-run=client", "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, env=helm_env(), check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    manifest, notes = out.stdout.split("\nNOTES:\n", 1)
    (deploy,) = [d for d in yaml.safe_load_all(manifest.split("MANIFEST:", 1)[1])
                 if d and d["kind"] == "Deployment"]  # fmt: skip
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.test:5000/team/agentrl-operator@sha256:" + "b" * 64
    assert {"name": "AGENTRL_IMAGE", "value": RUNTIME} in container["env"]
    assert "No default Ray pod image" not in notes and "pulled by tag" not in notes


def test_pinning_again_replaces_the_previous_pins(repo: Path) -> None:
    assert pin(repo, "--runtime-image", RUNTIME).returncode == 0
    # A long reference: written the way `ruff format` wants it, and still found next time.
    longer = "registry.test/" + "deep/" * 8 + "agentrl-runtime:0.2.0@sha256:" + "d" * 64
    assert pin(repo, "--runtime-image", longer).returncode == 0
    assert pin(repo, "--runtime-image", RUNTIME).returncode == 0
    defaults = (repo / "operator/agentrl/render/defaults.py").read_text()
    assert defaults.count("DEFAULT_IMAGE: str | None = ") == 1
    assert f'DEFAULT_IMAGE: str | None = (\n    "{RUNTIME}"\n)\n' in defaults
    assert longer not in defaults


@pytest.mark.parametrize(
    "ref",
    [
        "registry.test/agentrl-runtime:0.1.0",  # a tag can move
        "registry.test/agentrl-runtime@sha256:" + "a" * 63,  # not a digest
        "registry.test/agentrl-runtime@sha256:" + "A" * 64,
    ],
)
def test_unpinned_references_are_refused_and_nothing_is_written(repo: Path, ref: str) -> None:
    before = {p: (repo / p).read_text() for p in ("operator/agentrl/render/defaults.py",
                                                  "charts/agentrl/values.yaml")}  # fmt: skip
    for args in (["--runtime-image", ref], ["--runtime-image", RUNTIME, "--operator-image", ref]):
        proc = pin(repo, *args)
        assert proc.returncode == 1 and "is not pinned" in proc.stderr
    assert before == {p: (repo / p).read_text() for p in before}


def test_release_version_must_be_the_charts_and_the_packages(repo: Path) -> None:
    version = yaml.safe_load((repo / "charts/agentrl/Chart.yaml").read_text())["version"]
    assert pin(repo, "--check-version", f"v{version}").returncode == 0
    proc = pin(repo, "--check-version", "9.9.9")
    assert proc.returncode == 1
    assert "Chart.yaml version is" in proc.stderr and "pyproject.toml version is" in proc.stderr
