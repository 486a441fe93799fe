"""The bundle ConfigMap: agentrl's in-pod code as one zip archive that Python imports from."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from agentrl.api.constants import BUNDLE_ARCHIVE_NAME, BUNDLE_ARCHIVE_PATH, BUNDLE_MOUNT_DIR
from agentrl.api.validation import parse_experiment
from agentrl.render import Bundle, OperatorDefaults, collect_bundle_files, render_all
from agentrl.render.bundle import archive, content_hash
from conftest import minimal_body
from kube_checks import core_errors

DEFAULTS = OperatorDefaults(image="img@sha256:" + "1" * 64, bundle_version="1.2.3")
BUNDLE = {"agentrl/__init__.py": "x = 1\n", "agentrl/bundle/launch/__main__.py": "pass\n"}


def rendered(files: dict[str, str] = BUNDLE) -> dict[str, dict[str, Any]]:
    exp, problems = parse_experiment(minimal_body())
    assert exp is not None, problems
    kids = render_all(exp, DEFAULTS, files)
    return {"bundle": kids.bundle, "rayjob": kids.rayjob}


def unpacked(config_map: dict[str, Any]) -> dict[str, str]:
    raw = base64.b64decode(config_map["binaryData"][BUNDLE_ARCHIVE_NAME])
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return {name: zf.read(name).decode() for name in zf.namelist()}


def test_bundle_is_immutable_and_named_by_content() -> None:
    code = rendered()["bundle"]
    assert code["immutable"] is True and "data" not in code
    assert code["metadata"]["name"] == f"demo-bundle-{content_hash(BUNDLE)[:10]}"
    changed = {**BUNDLE, "agentrl/__init__.py": "x = 2\n"}
    assert rendered(changed)["bundle"]["metadata"]["name"] != code["metadata"]["name"]


def test_archive_holds_exactly_the_sources_and_is_reproducible() -> None:
    assert unpacked(rendered()["bundle"]) == BUNDLE
    assert archive(BUNDLE) == archive(dict(reversed(BUNDLE.items())))  # order, time: fixed


def test_volume_mounts_the_archive_first_on_pythonpath() -> None:
    objs = rendered()
    spec = objs["rayjob"]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "agentrl-bundle")
    assert volume["configMap"] == {"name": objs["bundle"]["metadata"]["name"]}
    (container,) = spec["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "agentrl-bundle")
    assert mount == {"name": "agentrl-bundle", "mountPath": BUNDLE_MOUNT_DIR, "readOnly": True}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PYTHONPATH"].split(":")[0] == BUNDLE_ARCHIVE_PATH


def test_real_bundle_holds_api_and_bundle_only() -> None:
    files = collect_bundle_files()
    assert "agentrl/__init__.py" in files and "agentrl/api/models.py" in files
    assert "agentrl/api/runtime.py" in files
    assert any(p.startswith("agentrl/bundle/") for p in files)
    assert not any(p.startswith(("agentrl/render/", "agentrl/controller/", "agentrl/cli/"))
                   for p in files)  # fmt: skip
    # `agentrl rehearse` runs on the user's machine only: the pods never carry it.
    assert "agentrl/bundle/rollout/episode.py" in files
    assert not any(p.startswith("agentrl/bundle/rehearse/") for p in files)
    assert all(p.endswith(".py") and "__pycache__" not in p for p in files)
    code = rendered(files)["bundle"]
    assert core_errors(code) == []
    assert unpacked(code) == files


def test_the_real_bundle_runs_from_its_archive(tmp_path: Path) -> None:
    """What a Ray pod does: the archive alone on PYTHONPATH, then agentrl's entry points."""
    zipped = tmp_path / BUNDLE_ARCHIVE_NAME
    zipped.write_bytes(archive(collect_bundle_files()))
    probe = (
        "import agentrl.bundle.rollout, agentrl.bundle.rewards, agentrl.bundle.traces as t\n"
        "print(t.__file__)\n"
        "t.merge_turns([t.Turn([1, 2], [3], [-0.5], 'stop')])\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(zipped), "PYTHONNOUSERSITE": "1"}
    # The image provides the dependencies (site-packages); PYTHONPATH puts the archive ahead
    # of any installed agentrl, and __file__ proves which one answered.
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{zipped}/agentrl/bundle/traces.py"
    launch = subprocess.run([sys.executable, "-m", "agentrl.bundle.launch", "--help"],
                            env=env, cwd=tmp_path, capture_output=True, text=True,
                            check=False, timeout=60)  # fmt: skip
    assert launch.returncode == 0, launch.stderr
    assert "--dry-run" in launch.stdout


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"agentrl/x.txt": ""}, "expected a relative .py path"),
        ({"../evil.py": ""}, "expected a relative .py path"),
        ({"/abs.py": ""}, "expected a relative .py path"),
        ({"agentrl/big.py": os.urandom(800 * 1024).hex()}, "a ConfigMap holds"),
    ],
)
def test_bad_bundles_are_refused(files: dict[str, str], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        Bundle.of(files)
