"""The Ray pod image's version matrix is slime's own docker/ files, read, not restated.

`hack/slime-matrix.py` derives images/README.md's table from `docker/version.txt`,
`docker/justfile` and `docker/Dockerfile` of the slime snapshots in `../shared/upstream/slime`
(verbatim upstream files); these tests re-derive it, check that images/slime/Dockerfile's
build arguments and every slime image named in the docs trace to it, and that the parser
fails loudly on what it cannot read instead of guessing.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.support import upstream
from tests.support.shared import SHARED, require
from tests.support.shared import UPSTREAM as SHARED_UPSTREAM

from conftest import ROOT

UPSTREAM = SHARED_UPSTREAM / "slime"
SNAPSHOTS = [SHARED / folder for folder in upstream.folders("slime")]  # oldest first, as the README
SCRIPT = ROOT / "hack" / "slime-matrix.py"
for _snapshot in SNAPSHOTS:
    require(_snapshot / "docker" / "Dockerfile", "slime's docker/ files")
SLIME_IMAGE = re.compile(r"slimerl/(?:slime|sglang):[\w.-]+")


@functools.cache
def matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slime_matrix", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["slime_matrix"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def rows() -> list:  # type: ignore[type-arg]
    m = matrix()
    return [row for snapshot in SNAPSHOTS for row in m.rows_of(snapshot, warn=False)]


def test_readme_table_is_what_slimes_docker_files_say() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", *map(str, SNAPSHOTS)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_published_tags_follow_slimes_release_recipes() -> None:
    """fa3c990's primary recipe publishes `<version>` with no suffix (and no x86 CUDA 13
    image at all); 624b824 publishes `<version>-cu129` and `<version>-cu130`."""
    images = [r.image for r in rows()]
    assert images == [
        "slimerl/slime:nightly-dev-20260629a",
        "slimerl/slime:nightly-dev-20260810a-cu129",
        "slimerl/slime:nightly-dev-20260810a-cu130",
    ]
    assert "slimerl/slime:nightly-dev-20260629a-cu129" not in images
    assert "slimerl/slime:nightly-dev-20260629a-cu130" not in images


def test_runtime_dockerfile_build_args_trace_to_the_matrix() -> None:
    dockerfile = (ROOT / "images" / "slime" / "Dockerfile").read_text()
    args: dict[str, str] = {}
    for m in re.finditer(r"^ARG (\w+)(?:=(\S*))?$", dockerfile, re.MULTILINE):
        args.setdefault(m.group(1), m.group(2) or "")  # the default; a re-declaration has none
    # Nothing version-shaped of our own: the base is a matrix row, the CUDA major the base's.
    assert set(args) == {"SLIME_BASE", "CUDA_MAJOR", "ALLOW_UNPINNED_BASE"}, args
    assert args["SLIME_BASE"].split("@")[0] == rows()[0].image  # the default is the first row
    digest = args["SLIME_BASE"].partition("@")[2]
    assert digest == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", digest)  # a release pins it
    assert args["CUDA_MAJOR"] == ""


def test_every_slime_image_the_docs_name_is_in_the_matrix() -> None:
    known = {r.image for r in rows()} | {r.sglang_base for r in rows()}
    texts = [ROOT / "images" / "README.md", ROOT / "images" / "slime" / "Dockerfile",
             ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # fmt: skip
    for path in texts:
        for image in SLIME_IMAGE.findall(path.read_text()):
            if image.endswith(":<tag>"):
                continue
            assert image in known, f"{path.relative_to(ROOT)} names {image}"


def test_components_differ_where_slimes_files_differ() -> None:
    """Spot checks of what the snapshots say (the README had 624b824's pins on fa3c990)."""
    old, new12, new13 = rows()
    assert (old.transformer_engine, new12.transformer_engine) == (
        "2.10.0 (wheel)",
        "2.16.1 (wheel)",
    )
    assert new13.transformer_engine == "`c9877beb` (source)"
    assert old.torch_memory_saver == "`a193d9dd` (fzyzcjy)"
    assert new12.torch_memory_saver == new13.torch_memory_saver == "`8d30c59c` (zhuzilin)"
    assert old.flash_attn.startswith("2.7.4.post1") and new12.flash_attn.startswith("2.8.3")
    assert new13.flash_attn == "the SGLang base's"  # FA2/FA3 only on CUDA 12 there
    assert "scipy" not in old.numpy_scipy and old.also == ""
    assert (old.cuda, new12.cuda, new13.cuda) == (12, 12, 13)


def copy_snapshot(tmp_path: Path, name: str = "fa3c990") -> Path:
    target = tmp_path / name
    shutil.copytree(UPSTREAM / name / "docker", target / "docker", ignore=shutil.ignore_patterns(
        "*patch*", "*.rocm*", "NOTES*"))  # fmt: skip
    shutil.copy(UPSTREAM / name / "COMMIT", target / "COMMIT")
    return target


def test_a_component_installed_twice_is_an_error_not_a_guess(tmp_path: Path) -> None:
    snapshot = copy_snapshot(tmp_path)
    dockerfile = snapshot / "docker" / "Dockerfile"
    text = dockerfile.read_text()
    dockerfile.write_text(text + '\nRUN pip install "transformer_engine[pytorch]==9.9.9"\n')
    with pytest.raises(matrix().MatrixError, match="installed 2 times"):
        matrix().rows_of(snapshot, warn=False)


def test_a_changed_recipe_or_pin_changes_the_row(tmp_path: Path) -> None:
    snapshot = copy_snapshot(tmp_path)
    justfile = snapshot / "docker" / "justfile"
    justfile.write_text(
        justfile.read_text().replace('ARG_TAG_POSTFIX="" ', 'ARG_TAG_POSTFIX="-cu129" ')
    )
    dockerfile = snapshot / "docker" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("==2.10.0", "==2.11.0"))
    (row,) = matrix().rows_of(snapshot, warn=False)
    assert row.image == "slimerl/slime:nightly-dev-20260629a-cu129"
    assert row.transformer_engine == "2.11.0 (wheel)"
