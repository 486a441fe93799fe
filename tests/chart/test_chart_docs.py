"""README's values table is generated from values.yaml, and every value is documented."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from chart_helpers import CHART, ROOT, run_helm

SCRIPT = ROOT / "hack" / "chart-docs.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_docs", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_docs"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_readme_values_table_is_in_sync() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_every_value_has_a_doc_comment_and_a_table_row() -> None:
    docs = load_script()
    text = (CHART / "values.yaml").read_text()
    rows, missing = docs.parse(text)
    assert missing == []
    keys = {row.key for row in rows}
    assert {"image.digest", "watchNamespaces", "monitoring.dashboard.label"} <= keys
    readme = (CHART / "README.md").read_text()
    assert all(f"| `{key}` |" in readme for key in keys)


def test_an_undocumented_value_is_reported() -> None:
    docs = load_script()
    text = (CHART / "values.yaml").read_text()
    text = text.replace("  # -- Image pull policy of the operator container.\n", "")
    rows, missing = docs.parse(text)
    assert missing == ["image.pullPolicy"]
    assert "image.pullPolicy" not in {row.key for row in rows}


# Stand-ins for the placeholders the docs' commands carry; <digest> is a sha256 hex digest.
PLACEHOLDERS = {
    "<registry>": "registry.example.com",
    "<digest>": "0" * 64,
    "<tag>": "1.0.0",
    "<version>": "1.0.0",
}
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), CHART / "README.md",
        ROOT / "images" / "README.md"]  # fmt: skip


def documented_installs() -> list[tuple[str, list[str]]]:
    """Every `helm install ... charts/agentrl` of a shell block in the docs, as its words."""
    found = []
    for path in DOCS:
        n = 0
        blocks = re.findall(r"```(?:bash|sh|shell)?\n(.*?)```", path.read_text(), flags=re.S)
        for block in blocks:
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                if not line.lstrip().startswith("helm install"):
                    continue
                words = shlex.split(line, comments=True)
                if words[:2] == ["helm", "install"] and "charts/agentrl" in words:
                    n += 1
                    found.append((f"{path.relative_to(ROOT)}#{n}", words))
    return found


INSTALLS = documented_installs()


def test_the_docs_show_the_install_commands() -> None:
    shown = {where.split("#")[0] for where, _ in INSTALLS}
    assert {"docs/monitoring.md", "charts/agentrl/README.md", "images/README.md"} <= shown


@pytest.mark.parametrize(("where", "words"), INSTALLS, ids=[w for w, _ in INSTALLS])
def test_every_documented_helm_install_installs(
    where: str, words: list[str], tmp_path: Path
) -> None:
    """Each as written, placeholders filled in, through the real helm's client dry run: the
    chart refuses an install without `image.repository`, so a command that leaves it out
    stops the reader there."""
    args = []
    for word in words[1:]:
        filled = word.replace("charts/agentrl", str(CHART))
        for placeholder, value in PLACEHOLDERS.items():
            filled = filled.replace(placeholder, value)
        args.append(filled)
    assert not [a for a in args if "<" in a], args
    kubeconfig = tmp_path / "kubeconfig"  # no cluster, no context: nothing to connect to
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    # helm 4: helm 3.17's client dry run still asks the cluster for its version.
    dry_run = ("--dry-run=client", "--kubeconfig", str(kubeconfig))
    proc = run_helm("helm4", *args, *dry_run, check=False)
    assert proc.returncode == 0, f"{where}: {shlex.join(words)}\n{proc.stderr}"
