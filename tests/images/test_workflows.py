"""The GitHub workflows: actionlint (with shellcheck on every `run:`), and the release rules.

Actions are pinned by full commit SHA with the release in a comment (a tag can be moved to
other code); the registry is a setting, never a host written here; signing jobs, and only
they, can mint an OIDC token.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
BIN = Path(sys.executable).parent
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", re.MULTILINE)
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40}$")
# Container registry hosts that must never be written into the project (the registry is the
# REGISTRY setting); `image: name:tag` forms without a host are Docker Hub's library names.
REGISTRY_HOST = re.compile(
    r"\b(ghcr\.io|docker\.io|quay\.io|gcr\.io|[\w-]+\.azurecr\.io|[\w.-]+\.amazonaws\.com"
    r"|registry\.gitlab\.com|nvcr\.io|registry\.k8s\.io|public\.ecr\.aws)\b"
)


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{BIN}:/usr/bin:/bin"}  # the venv's shellcheck, found by actionlint
    return subprocess.run([str(BIN / "actionlint"), "-no-color", "-oneline", *map(str, paths)],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip


def load(name: str) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    return data


def test_the_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"release.yaml", "ci.yaml"}


def test_actionlint_finds_nothing() -> None:
    proc = actionlint(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_and_shellcheck_do_run(tmp_path: Path) -> None:
    """The lint above can fail: an unquoted variable and an injected PR title are reported."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo $FOO\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    proc = actionlint(bad)
    assert proc.returncode == 1
    assert "SC2086" in proc.stdout and "potentially untrusted" in proc.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_by_commit_with_the_release_in_a_comment(path: Path) -> None:
    uses = USES.findall(path.read_text())
    assert uses
    for ref, rest in uses:
        assert PINNED.match(ref), f"{path.name}: {ref} is not pinned by commit SHA"
        assert re.match(r"\s+# v\d+\.\d+\.\d+$", rest), f"{path.name}: {ref} lacks # vX.Y.Z"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_registry_host_is_written_down(path: Path) -> None:
    assert not REGISTRY_HOST.search(path.read_text())


def test_release_runs_on_version_tags_and_takes_the_registry_from_settings() -> None:
    wf = load("release.yaml")
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert on["push"]["tags"] == ["v[0-9]+.[0-9]+.[0-9]+"]
    assert "registry" in on["workflow_dispatch"]["inputs"]
    text = (ROOT / ".github/workflows/release.yaml").read_text()
    assert "${{ inputs.registry || vars.REGISTRY }}" in text


def test_release_steps_build_sign_attest_publish_and_pin() -> None:
    wf = load("release.yaml")
    assert wf["permissions"] == {}  # every job asks for exactly what it needs
    jobs = wf["jobs"]
    for name, dockerfile in (("runtime", "images/slime/Dockerfile"), ("operator", "Dockerfile")):
        steps = jobs[name]["steps"]
        (build,) = [s for s in steps if "build-push-action" in s.get("uses", "")]
        assert build["with"]["file"] == dockerfile and build["with"]["push"] is True
        assert build["with"]["sbom"] is True and build["with"]["provenance"] == "mode=max"
        runs = "\n".join(s.get("run", "") for s in steps)
        assert 'cosign sign --yes "$REPOSITORY@$DIGEST"' in runs  # by digest, never by tag
        assert "cosign verify" in runs
    chart = "\n".join(s.get("run", "") for s in jobs["chart"]["steps"])
    assert (
        "helm package charts/agentrl" in chart and 'helm push "dist/agentrl-$VERSION.tgz"' in chart
    )
    assert 'cosign sign --yes "$REGISTRY/charts/agentrl@$DIGEST"' in chart
    assert "hack/pin-images.py --runtime-image" in chart and "gh pr create" in chart
    operator = "\n".join(s.get("run", "") for s in jobs["operator"]["steps"])
    assert "hack/pin-images.py --runtime-image" in operator  # the default baked into the image
    signing = {n for n, j in jobs.items() if "cosign" in yaml.safe_dump(j["steps"])}
    minting = {n for n, j in jobs.items() if j.get("permissions", {}).get("id-token") == "write"}
    assert signing == minting == {"runtime", "operator", "chart"}


def test_ci_runs_the_projects_own_check() -> None:
    steps = load("ci.yaml")["jobs"]["test"]["steps"]
    assert steps[-1]["run"] == "bash .ci/run"


def test_the_weekly_run_checks_a_fresh_resolve_and_commits_nothing() -> None:
    """The lock keeps CI on tested versions; this run is how a breaking release is still seen."""
    flow = load("lock.yaml")
    assert flow[True]["schedule"]  # PyYAML reads the key `on` as True
    assert flow["permissions"] == {"contents": "read"}
    steps = flow["jobs"]["fresh-resolve"]["steps"]
    assert "bash hack/lock.sh" in steps[-2]["run"]
    assert steps[-1]["run"] == "bash .ci/run"
