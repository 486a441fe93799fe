"""The upstream tier's inputs: pinned once, fetched exactly, and skipped in one line when absent.

A fresh clone has no snapshot folder beside it; there `bash hack/test.sh` must pass, with the
tests that read upstream code skipped and named once (tests/support/shared.py). These tests
prove that by running the tests that read slime most (the launcher's, the spec checks' and
the images') against an empty snapshot folder, check the fetch that
hack/setup.sh does against a local repository (no network needed), and keep the pins equal to
what the images' version matrix names.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import upstream
from tests.support.shared import TIER, require

from conftest import ROOT

GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip


def test_tests_without_upstream_sources_skip_in_one_line(tmp_path: Path) -> None:
    """What a fresh clone without `shared/` and without GitHub sees: no failure, and one line
    naming the skipped tier and the command that fetches its inputs."""
    empty = tmp_path / "no-snapshots"
    empty.mkdir()
    env = {**os.environ, "AGENTRL_SHARED": str(empty)}
    done = subprocess.run(
        # --tb=line: a failure is one line, so the message below names every one of them.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=line",
         "tests/bundle/launch", "tests/api", "tests/images"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed, \d+ skipped in .*", summary), summary
    tier_lines = [line for line in out.splitlines() if TIER in line]
    assert len(tier_lines) == 1, tier_lines
    assert str(empty) in tier_lines[0] and "bash hack/setup.sh" in tier_lines[0]


def _repository(path: Path) -> str:
    """A git repository shaped like a pinned source, with more than the pinned paths, served
    over file:// as GitHub serves it (partial clone, fetch by commit id)."""
    files = {
        "LICENSE": "license\n",
        "slime/__init__.py": "",
        "slime/utils/arguments.py": "x = 1\n",
        "scripts/models/qwen3-8B.sh": "MODEL_ARGS=()\n",
        "docker/Dockerfile": "FROM scratch\n",
        "train.py": "not pinned\n",
        "scripts/run-qwen3-8B.sh": "not pinned\n",
    }
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    env = {**os.environ, **GIT_ID}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"], ["tag", "v1.0.0"],
                 ["config", "uploadpack.allowFilter", "true"],
                 ["config", "uploadpack.allowAnySHA1InWant", "true"]):  # fmt: skip
        subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_fetch_takes_exactly_the_pinned_commit_and_paths(tmp_path: Path) -> None:
    (src := tmp_path / "src").mkdir()
    commit = _repository(src)
    source = upstream.GitSource(
        name="slime", repository=src.as_uri(), ref=commit, folder="upstream/slime/abc",
        paths=("LICENSE", "slime", "scripts/models", "docker"),
    )  # fmt: skip
    dest = upstream.fetch_one(source, tmp_path / "root")
    assert dest == tmp_path / "root" / "upstream" / "slime" / "abc"
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == [
        "COMMIT", "LICENSE", "docker/Dockerfile", "scripts/models/qwen3-8B.sh",
        "slime/__init__.py", "slime/utils/arguments.py",
    ]  # fmt: skip
    assert (dest / "COMMIT").read_text() == commit + "\n"  # as the snapshot folders record it
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".fetch-")]


def _tagged(src: Path, commit: str) -> upstream.GitSource:
    """A release pinned as KubeRay's are: its tag, the commit it named, one flattened path."""
    return upstream.GitSource(
        name="KubeRay", repository=src.as_uri(), ref=commit, folder="schemas/kuberay/v1.0.0",
        paths=("docker/Dockerfile",), flatten=True, tag="v1.0.0",
    )  # fmt: skip


def test_fetch_of_a_tag_flattens_and_records_its_commit(tmp_path: Path) -> None:
    (src := tmp_path / "src").mkdir()
    commit = _repository(src)
    source = _tagged(src, commit)
    dest = upstream.fetch_one(source, tmp_path / "root")
    assert sorted(p.name for p in dest.iterdir()) == ["COMMIT", "Dockerfile"]
    assert (dest / "COMMIT").read_text() == commit + "\n"


def test_a_tag_moved_upstream_changes_nothing_fetched(tmp_path: Path) -> None:
    """A release tag re-pushed to another commit after it was pinned (it happens: a fixed
    release re-tagged) must not change what a fresh clone's tests read: the pin is the commit
    the tag named, and the fetch takes that commit, not whatever the tag names today."""
    (src := tmp_path / "src").mkdir()
    pinned = _repository(src)
    (src / "docker" / "Dockerfile").write_text("FROM moved\n")
    env = {**os.environ, **GIT_ID}
    for argv in (["commit", "-qam", "moved"], ["tag", "-f", "v1.0.0"]):
        subprocess.run(["git", *argv], cwd=src, env=env, check=True, capture_output=True)
    (source,) = [
        s for s in _pins_of(tmp_path, src.as_uri(), {"v1.0.0": pinned}) if s.tag == "v1.0.0"
    ]
    dest = upstream.fetch_one(source, tmp_path / "root")
    assert (dest / "Dockerfile").read_text() == "FROM scratch\n"
    assert (dest / "COMMIT").read_text() == pinned + "\n"


def _pins_of(tmp_path: Path, repository: str, tags: dict[str, str]) -> list[upstream.GitSource]:
    """The sources a pins file with one tag-pinned entry (as KubeRay's) expands to."""
    pins = tmp_path / "upstream.toml"
    lines = ["[[git]]", 'name = "KubeRay"', f'repository = "{repository}"',
             'folder = "schemas/kuberay/{tag}"', 'paths = ["docker/Dockerfile"]', "flatten = true",
             "[git.tags]", *(f'"{tag}" = "{commit}"' for tag, commit in tags.items())]  # fmt: skip
    pins.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(upstream, "PINS", pins)
        return upstream.git_sources()


def test_every_source_is_pinned_by_commit() -> None:
    """Each tag in images/upstream.toml carries its commit (a tag alone could move), and a
    pin that names no commit is refused when the file is read, not fetched as it floats."""
    sources = upstream.git_sources()
    assert sources and all(upstream.is_commit(s.ref) for s in sources)
    assert upstream.kuberay_releases()[-1].startswith("v1.")
    assert all(s.tag for s in sources if s.name == "KubeRay")
    with pytest.raises(ValueError, match="full commit id"):
        upstream.GitSource(name="KubeRay", repository="x", ref="v1.7.0", folder="f", paths=())


def test_a_fetch_from_before_the_pin_moved_is_fetched_again(tmp_path: Path) -> None:
    """The cache keeps what an earlier checkout fetched; a folder whose COMMIT is not the pin
    (the pin moved to another commit under the same folder name) is missing, not reused."""
    (src := tmp_path / "src").mkdir()
    commit = _repository(src)
    source = _tagged(src, commit)
    upstream.fetch_one(source, tmp_path / "root")
    assert upstream.present(source, tmp_path / "root")
    (tmp_path / "root" / source.folder / "COMMIT").write_text("f" * 40 + "\n")
    assert not upstream.present(source, tmp_path / "root")


def test_a_commit_the_repository_lacks_is_refused(tmp_path: Path) -> None:
    (src := tmp_path / "src").mkdir()
    _repository(src)
    source = upstream.GitSource(
        name="slime", repository=src.as_uri(), ref="0" * 40, folder="upstream/slime/x",
        paths=("LICENSE",),
    )  # fmt: skip
    with pytest.raises(upstream.Unreachable):
        upstream.fetch_one(source, tmp_path / "root")
    assert not (tmp_path / "root" / "upstream" / "slime" / "x").exists()


def test_without_a_network_setup_says_so_once_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = (tmp_path / "nowhere").as_uri()
    sources = [
        upstream.GitSource(name="slime", repository=gone, ref="a" * 40, folder="upstream/slime/a",
                           paths=("LICENSE",)),
        upstream.GitSource(name="Megatron-LM", repository=gone, ref="b" * 40,
                           folder="upstream/megatron-lm/b", paths=("LICENSE",)),
    ]  # fmt: skip
    assert upstream.fetch_git(sources, tmp_path / "root") is False
    lines = [line for line in capsys.readouterr().err.splitlines() if "cannot fetch" in line]
    assert len(lines) == 1
    assert "slime a, Megatron-LM b" in lines[0] and "hack/setup.sh" in lines[0]


# ---- one home for the pins -------------------------------------------------------------


def test_the_version_matrix_names_the_pinned_commits() -> None:
    """images/README.md's matrix (derived from slime's docker/ files) and images/upstream.toml
    name the same slime commits, in the same order, and the Megatron-LM both build with."""
    readme = (ROOT / "images" / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- slime-matrix:begin -->")[1].split("<!-- slime-matrix:end -->")[0]
    linked = re.findall(r"github\.com/THUDM/slime/tree/([0-9a-f]{40})/docker", table)
    pinned = [s.ref for s in upstream.git_sources() if s.name == "slime"]
    assert list(dict.fromkeys(linked)) == pinned
    (megatron,) = [s.ref for s in upstream.git_sources() if s.name == "Megatron-LM"]
    for row in table.strip().splitlines()[2:]:
        cells = [c.strip(" `") for c in row.split("|")]
        assert megatron.startswith(cells[5]), row  # the Megatron-LM column


def test_docs_name_only_pinned_slime_commits() -> None:
    """Every slime commit the docs cite (a 7-40 hex id after `slime` or in a slime URL) is one
    of the pins: a row added or dropped in images/upstream.toml shows up in the docs."""
    pinned = [s.ref for s in upstream.git_sources() if s.name == "slime"]
    cited = re.compile(r"(?:THUDM/slime/(?:tree|blob)/|slime (?:at |row )?`?)([0-9a-f]{7,40})\b")
    for doc in [ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "images" / "README.md"]:
        for commit in cited.findall(doc.read_text(encoding="utf-8")):
            assert any(p.startswith(commit) for p in pinned), (doc.name, commit)


def test_the_recorded_engine_metrics_are_what_the_pinned_sglang_releases_declare() -> None:
    """tests/support/recorded/sglang-engine.prom (what the stub engines serve to the dashboard
    tests) is re-derived from each pinned SGLang's metrics_collector.py: a release that renames
    or relabels a family the dashboard reads fails here, not on a user's Grafana."""
    for version in upstream.sglang_pin()["versions"]:  # type: ignore[attr-defined]
        source = upstream.sglang_dir(str(version)) / "sglang/srt/observability"
        require(source / "metrics_collector.py", f"SGLang {version}'s metrics collector")
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "record-sglang-metrics.py"), "--check"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
