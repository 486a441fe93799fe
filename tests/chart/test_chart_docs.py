"""README's values table is generated from values.yaml, and every value is documented."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

from chart_helpers import CHART, ROOT

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
