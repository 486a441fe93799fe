"""The dev extras are installed at the versions `hack/constraints.txt` locks, so CI's outcome
depends on the commit alone, not on what PyPI released since.

A requirement added to pyproject.toml without refreshing the lock, a lock that contradicts a
range, or a venv that drifted from the lock each fail here with the command that mends it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import ROOT

LOCK = ROOT / "hack" / "constraints.txt"
REFRESH = "run `bash hack/lock.sh`, then `bash hack/test.sh`"


def _pins(lock: Path) -> dict[str, str]:
    """A lock file's `name==version` lines, by canonical name, versions as written."""
    where = lock.relative_to(ROOT)
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line)
        assert match, f"{where}: {line!r} is not `name==version`; {REFRESH}"
        name = canonicalize_name(match[1])
        assert name not in pins, f"{where} pins {name} twice; {REFRESH}"
        pins[name] = match[2]
    return pins


def _locked() -> dict[str, Version]:
    return {name: Version(version) for name, version in _pins(LOCK).items()}


def _dev_requirements() -> list[Requirement]:
    """The dev extra with the project's own extras it names expanded, and the core."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted, seen = ["dev"], set()
    reqs = [Requirement(r) for r in project["dependencies"]]
    while wanted:
        extra = wanted.pop()
        seen.add(extra)
        for raw in extras[extra]:
            req = Requirement(raw)
            if canonicalize_name(req.name) == canonicalize_name(project["name"]):
                wanted.extend(e for e in req.extras if e not in seen)
            else:
                reqs.append(req)
    return reqs


def test_every_dev_requirement_is_locked_within_its_range() -> None:
    pins = _locked()
    for req in _dev_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in hack/constraints.txt; {REFRESH}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"hack/constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {req}; "
            + REFRESH
        )


def test_the_lock_holds_no_local_build() -> None:
    # agentrl itself is installed editable; a local label (torch's +cpu) would make pip refuse
    # every other build of the same release.
    pins = _locked()
    assert "agentrl" not in pins
    assert [n for n, v in pins.items() if v.local] == []


def test_the_venv_has_the_locked_versions() -> None:
    drifted = []
    for name, pin in _locked().items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue  # a platform-conditional dependency this machine does not need
        if Version(installed.public) != pin:
            drifted.append(f"{name} {installed} (locked {pin})")
    assert drifted == [], (
        "the venv differs from hack/constraints.txt: "
        + ", ".join(drifted)
        + "; run `rm .venv/.agentrl-deps-* && bash hack/setup.sh`"
    )


def test_agentrl_is_built_by_the_locked_setuptools() -> None:
    """hack/setup.sh builds the editable install without build isolation, so the setuptools
    the lock names builds it, not whichever one PyPI holds the day a fresh clone sets up."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    (backend,) = [Requirement(r) for r in build["requires"] if r.startswith("setuptools")]
    pin = _locked()["setuptools"]
    assert backend.specifier.contains(pin), f"{pin} is outside pyproject.toml's {backend}"
    wheel = metadata.distribution("agentrl").read_text("WHEEL") or ""
    assert f"Generator: setuptools ({pin})" in wheel.splitlines(), wheel


CHECKOV_LOCK = ROOT / "hack" / "checkov-constraints.txt"


def test_checkovs_venv_has_the_locked_versions() -> None:
    """checkov lives in a venv of its own (hack/setup.sh) whose dependencies checkov itself
    mostly leaves open; they are locked as the dev extras are, so a release of one of them
    cannot change checkov's findings on a commit that changed nothing."""
    assert CHECKOV_LOCK.is_file(), "hack/checkov-constraints.txt is missing; " + REFRESH
    pins = _pins(CHECKOV_LOCK)
    assert "checkov" in pins
    venv_python = (Path(sys.executable).parent / "checkov").resolve().parent / "python"
    listed = subprocess.run(
        [str(venv_python), "-c", "from importlib import metadata\n"
         "for d in metadata.distributions(): print(d.metadata['Name'], d.version)"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split("\n")  # fmt: skip
    installed = {
        canonicalize_name(n): v for n, _, v in (line.partition(" ") for line in listed if line)
    }
    for tool in ("pip", "setuptools", "wheel"):  # the venv's own installer, never locked
        installed.pop(tool, None)
    assert installed == pins, (
        f"checkov's venv ({venv_python.parent.parent}) differs from hack/checkov-constraints.txt;"
        " run `bash hack/setup.sh`, or `bash hack/lock.sh` to refresh the lock"
    )
