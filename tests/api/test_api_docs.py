"""docs/api.md covers every field of the API, with its default and meaning, and matches
the models exactly (regenerate with `python -m agentrl.cli.apidoc > docs/api.md`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

from agentrl.api.models import RLExperimentSpec, RLExperimentStatus
from agentrl.cli.apidoc import nested_model, render_markdown
from conftest import ROOT

API_MD = ROOT / "docs" / "api.md"


def walk(model: type[BaseModel], path: str) -> list[tuple[str, str, str]]:
    """(section path, wire name, description) of every field below a model."""
    out = []
    for name, field in model.model_fields.items():
        wire = field.alias or name
        out.append((path, wire, field.description or ""))
        found = nested_model(field.annotation)
        if found:
            out += walk(found[0], f"{path}.{wire}{'[]' if found[1] else ''}")
    return out


FIELDS = walk(RLExperimentSpec, "spec") + walk(RLExperimentStatus, "status")


def test_checked_in_reference_matches_the_models() -> None:
    assert API_MD.read_text() == render_markdown(), (
        "docs/api.md is stale: run `python -m agentrl.cli.apidoc > docs/api.md`"
    )


def test_every_field_has_a_description() -> None:
    assert [f"{p}.{w}" for p, w, d in FIELDS if not d.strip()] == []


def test_every_field_has_a_row_with_default_in_its_section() -> None:
    text = API_MD.read_text()
    sections = dict(re.findall(r"### `([^`]+)`\n\n(?:[^\n]*\n\n)?((?:\|[^\n]*\n)+)", text))
    assert len(FIELDS) > 100
    for path, wire, _ in FIELDS:
        table = sections[path]
        row = next(r for r in table.splitlines() if r.startswith(f"| `{wire}` |"))
        assert len(row.split(" | ")) == 4, row  # field, type, default, description


def test_the_changelog_names_only_fields_the_api_has() -> None:
    """CHANGELOG.md's upgrade notes send users to spec fields; each must exist, so a rename
    cannot leave them pointing at nothing."""
    known = {f"{p}.{w}".replace("[]", "") for p, w, _ in FIELDS}
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(spec(?:\.[A-Za-z]+)+)`", text))
    assert named, "the changelog names no spec field"
    assert sorted(named - known) == []
    assert "## [Unreleased]" in text and "## Upgrading" in text


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped,
    spaces to hyphens, `-N` for the Nth repeat), plus explicit `<a id=...>`/`name=`."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    seen: dict[str, int] = {}
    anchors = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    for heading in re.findall(r"^#+\s+(.*?)\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "charts" / "agentrl" / "README.md", ROOT / "images" / "README.md"]  # fmt: skip
# A link to another project's moving branch or "latest" docs says something else next month;
# the docs cite upstream at the tag or commit agentrl was checked against. Our own repository's
# main is where its runbooks live, so it may be linked as it moves.
MOVING = re.compile(
    r"https?://(?:github\.com/(?!agentrl/agentrl/)[^/\s)]+/[^/\s)]+/(?:blob|tree)/"
    r"(?:main|master|HEAD|develop)/|[^/\s)]*docs?\.[^/\s)]+/(?:en/)?(?:latest|stable|master)/)"
)


TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".json", ".txt", ".sh", ".tpl", ".toml"}
SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
SKIPPED_DIRS |= {".pytest_cache", ".hypothesis"}


def text_files() -> list[Path]:
    """The repository's own text files: what git tracks or would track, so that what a tool
    writes into an ignored folder (pytest's cache README links a moving page) is not ours;
    outside a git checkout, every file but the venv's and the caches'."""
    git = shutil.which("git")
    listing = [git or "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(listing, cwd=ROOT, capture_output=True, check=False) if git else None
    if listed is not None and listed.returncode == 0:
        paths = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
        return [path for path in paths if path.suffix in TEXT_SUFFIXES and path.is_file()]
    found = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [name for name in dirs if name not in SKIPPED_DIRS]
        found += [Path(top, name) for name in names if Path(name).suffix in TEXT_SUFFIXES]
    return found


def test_links_to_other_projects_are_pinned() -> None:
    """Upstream is cited at a tag or commit (a branch or a `latest` page moves under the text),
    in the docs, the chart and the code alike."""
    files = [path for path in text_files() if path != Path(__file__).resolve()]
    moving = [f"{path.relative_to(ROOT)}: {hit.group(0)}" for path in files
              for hit in MOVING.finditer(path.read_text("utf-8", errors="replace"))]  # fmt: skip
    assert len(files) > 300 and moving == []
    assert MOVING.search("see https://docs.ray.io/en/latest/cluster/kubernetes/")
    assert MOVING.search("https://github.com/THUDM/slime/blob/main/train.py")
    assert not MOVING.search("https://github.com/THUDM/slime/blob/fa3c990/train.py")
    assert not MOVING.search("https://github.com/agentrl/agentrl/blob/main/docs/monitoring.md")


def test_every_relative_link_and_anchor_of_the_docs_resolves() -> None:
    """A renamed file or heading must not leave a link in the docs pointing at nothing."""
    broken, checked = [], 0
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue  # a URL
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            checked += 1
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert checked > 20 and broken == []
