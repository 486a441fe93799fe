"""The upstream sources the tests read as data: what is pinned, where it is found, how to fetch it.

`images/upstream.toml` pins slime at each image row's commit, Megatron-LM, SGLang's releases and
KubeRay's CRD per release. The tests find them in one snapshot root, laid out as that file's
`folder`s say:

- `$AGENTRL_SHARED` when set (CI, or any copy of the snapshot folder), else `shared/` beside
  the clone when it exists: a snapshot folder, used as it is;
- otherwise `~/.cache/agentrl/upstream/snapshots`, where `fetch` (run by hack/setup.sh) puts a
  shallow fetch of exactly each pinned commit, keeping only the pinned paths. A release tag is
  pinned with its commit too: a tag moved upstream cannot change what the tests read.

SGLang's argument modules always come from PyPI into `~/.cache/agentrl/upstream/sglang-<v>`.

Standard library only: hack/setup.sh runs this as `python -m tests.support.upstream fetch`
before anything else is installed for the tests.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "images" / "upstream.toml"
CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl")) / "upstream"
FETCHED = CACHE / "snapshots"
# The command that gets the sources, for every message that says they are missing.
FETCH_HINT = (
    "`bash hack/setup.sh` fetches them when github.com is reachable; "
    "or set AGENTRL_SHARED to a snapshot folder"
)
# One fetch of one pinned ref, blobs of the kept paths only; a stuck network must not hang setup.
FETCH_TIMEOUT = 600


@dataclass(frozen=True)
class GitSource:
    """One pinned ref of one repository and the paths of it the tests read."""

    name: str
    repository: str
    ref: str  # a full commit id
    folder: str  # where it lies under the snapshot root
    paths: tuple[str, ...]
    flatten: bool = False
    tag: str = ""  # the release tag `ref` is, for a source pinned by tag

    def __post_init__(self) -> None:
        if not is_commit(self.ref):
            raise ValueError(
                f"{self.name} {self.tag or self.ref}: pin a full commit id, not {self.ref!r} "
                "(a tag or branch can move upstream)"
            )

    def __str__(self) -> str:
        return f"{self.name} {Path(self.folder).name}"  # fa3c990, v1.6.2: as the folders say


def is_commit(ref: str) -> bool:
    return len(ref) == 40 and all(c in "0123456789abcdef" for c in ref)


def _pins() -> dict[str, object]:
    with PINS.open("rb") as f:
        return tomllib.load(f)


def git_sources() -> list[GitSource]:
    """Every pinned git source, tags expanded (each `tag = commit`), in the file's order."""
    out: list[GitSource] = []
    for entry in _pins()["git"]:  # type: ignore[attr-defined]
        refs = [("", entry["commit"])] if "commit" in entry else list(entry["tags"].items())
        for tag, commit in refs:
            out.append(
                GitSource(
                    name=entry["name"],
                    repository=entry["repository"],
                    ref=commit,
                    folder=entry["folder"].format(tag=tag),
                    paths=tuple(entry["paths"]),
                    flatten=bool(entry.get("flatten", False)),
                    tag=tag,
                )
            )
    return out


def folders(name: str) -> tuple[str, ...]:
    """The snapshot folders of the sources called `name`, in the file's order."""
    return tuple(s.folder for s in git_sources() if s.name == name)


def slime_rows() -> tuple[str, ...]:
    """The slime rows by their snapshot folder name ("fa3c990", ...), oldest first."""
    return tuple(Path(f).name for f in folders("slime"))


def kuberay_releases() -> tuple[str, ...]:
    """The KubeRay releases whose RayJob CRD the tests check against, oldest first."""
    return tuple(s.tag for s in git_sources() if s.name == "KubeRay")


def sglang_pin() -> dict[str, object]:
    pins = _pins()["pypi"]
    sglang: dict[str, object] = pins["sglang"]  # type: ignore[index]
    return sglang


def sglang_dir(version: str) -> Path:
    """Where SGLang `version`'s argument modules are unpacked (a `.complete` file marks done)."""
    return CACHE / str(sglang_pin()["folder"]).format(version=version)


def snapshot_folder() -> Path | None:
    """The snapshot folder given by the environment or lying beside the clone, if any."""
    given = os.environ.get("AGENTRL_SHARED")
    if given:
        return Path(given)
    beside = ROOT.parent / "shared"
    return beside if beside.is_dir() else None


def snapshot_root() -> Path:
    """Where the tests read the pinned sources: the snapshot folder, else what was fetched."""
    return snapshot_folder() or FETCHED


# --- fetching (hack/setup.sh) ---------------------------------------------------------------


class Unreachable(RuntimeError):
    """The repository could not be reached: the network (or GitHub) is not there."""


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=FETCH_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise subprocess.CalledProcessError(
            done.returncode, ["git", *args], done.stdout, done.stderr
        )
    return done.stdout


def fetch_one(source: GitSource, dest_root: Path) -> Path:
    """Fetch `source` at exactly its ref (depth 1, only the blobs of its paths) into
    `dest_root/source.folder`, with a COMMIT file as the snapshot folder has. The folder
    appears whole or not at all."""
    dest = dest_root / source.folder
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    try:
        repo = work / "repo"
        repo.mkdir()
        _git("init", "-q", cwd=repo)
        try:
            _git("fetch", "-q", "--depth", "1", "--filter=blob:none", source.repository,
                 source.ref, cwd=repo)  # fmt: skip
        except subprocess.CalledProcessError as e:
            reason = (e.stderr.strip().splitlines() or ["git fetch failed"])[-1]
            raise Unreachable(f"{source.repository}: {reason}") from e
        commit = _git("rev-parse", "FETCH_HEAD^{commit}", cwd=repo).strip()
        if commit != source.ref:
            raise RuntimeError(f"{source}: fetched {commit}, not the pinned commit")
        _git("-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD", "--",
             *source.paths, cwd=repo)  # fmt: skip
        out = work / "out"
        out.mkdir()
        for path in source.paths:
            src = repo / path
            target = out / (src.name if source.flatten else path)
            target.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, target)
            else:
                shutil.copy2(src, target)
        (out / "COMMIT").write_text(commit + "\n", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        out.rename(dest)
        return dest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def present(source: GitSource, root: Path) -> bool:
    """Whether `root` holds every pinned path of `source` (a fetched folder appears whole), at
    the pinned commit where the folder records one (a fetch before the pin moved is stale)."""
    folder = root / source.folder
    recorded = folder / "COMMIT"
    if recorded.is_file() and recorded.read_text(encoding="utf-8").strip() != source.ref:
        return False
    return all((folder / (Path(p).name if source.flatten else p)).exists() for p in source.paths)


def missing_sources(root: Path) -> list[GitSource]:
    return [s for s in git_sources() if not present(s, root)]


def fetch_git(sources: list[GitSource], dest_root: Path) -> bool:
    """Fetch `sources` into `dest_root`. Never fails for want of a network: at the first
    repository that cannot be reached it says in one line what the tests will skip, and
    returns False."""
    for n, source in enumerate(sources):
        print(f"upstream sources: fetching {source} from {source.repository}", file=sys.stderr)
        try:
            fetch_one(source, dest_root)
        except (Unreachable, subprocess.TimeoutExpired) as e:
            left = ", ".join(str(s) for s in sources[n:])
            print(
                f"upstream sources: cannot fetch ({e}); the tests that need {left} will skip. "
                "Rerun `bash hack/setup.sh` where github.com is reachable, or set AGENTRL_SHARED "
                "to a snapshot folder.",
                file=sys.stderr,
            )
            return False
    return True


def fetch_sglang(version: str) -> Path:
    """SGLang `version`'s argument modules from its PyPI wheel (no dependencies installed)."""
    dest = sglang_dir(version)
    keep = tuple(str(k) for k in sglang_pin()["keep"])  # type: ignore[attr-defined]
    marker = dest / ".complete"  # holds the kept prefixes: a longer list unpacks again
    if marker.is_file() and marker.read_text(encoding="utf-8").split() == list(keep):
        return dest
    print(f"upstream sources: fetching SGLang {version}'s argument modules", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}",
             "-d", tmp],
            check=True, timeout=FETCH_TIMEOUT,
        )  # fmt: skip
        wheel = next(Path(tmp).glob("sglang-*.whl"))
        shutil.rmtree(dest, ignore_errors=True)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith(keep) and n.endswith(".py")]
            z.extractall(dest, names)
    marker.write_text("\n".join(keep) + "\n", encoding="utf-8")
    return dest


def fetch() -> int:
    """What hack/setup.sh runs: SGLang's modules from PyPI, and the git sources that no
    snapshot folder provides (see `fetch_git`)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel set-ups share the cache
        for version in sglang_pin()["versions"]:  # type: ignore[attr-defined]
            fetch_sglang(str(version))
        given = snapshot_folder()
        if given is None:
            fetch_git(missing_sources(FETCHED), FETCHED)
        else:
            missing = missing_sources(given)
            if missing:
                print(
                    f"upstream sources: the snapshot folder {given} lacks "
                    f"{', '.join(map(str, missing))}; the tests that need them will skip",
                    file=sys.stderr,
                )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.upstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch SGLang's modules and what no snapshot folder provides")
    parser.parse_args(argv)
    return fetch()


if __name__ == "__main__":
    sys.exit(main())
