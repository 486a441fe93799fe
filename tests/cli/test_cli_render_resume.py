"""`agentrl render` for `kubectl apply` by hand, and `checkpoint.resume: false`.

The launcher tells this run's own saves from another run's by the experiment's uid
(`agentrl.slimecmd.checkpoint`, RUN_MARK), which only the API server assigns. Rendered from a
file, the runtime config has none: these tests run the launcher's own checkpoint reading and
decision on what `render` printed, the way two attempts of one RayJob would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl import slimecmd
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.launch import preflight
from agentrl.cli.main import main
from agentrl.slimecmd.checkpoint import TRACKER, Start
from conftest import minimal_body

IMAGE = "runtime@sha256:" + "1" * 64  # a test value
CKPT = "/ckpt/run"
UID = "5d1c7a52-operator-assigned"


@pytest.fixture(autouse=True)
def _no_image_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRL_IMAGE", raising=False)
    monkeypatch.delenv("AGENTRL_POLICY", raising=False)


def experiment(tmp_path: Path, *, resume: bool, uid: str | None = None) -> Path:
    body = minimal_body(checkpoint={"path": CKPT, "saveInterval": 5, "resume": resume})
    if uid is not None:
        body["metadata"]["uid"] = uid
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def render(capsys: pytest.CaptureFixture[str], path: Path, *flags: str) -> tuple[int, str, str]:
    code = main(["render", "-f", str(path), "--image", IMAGE, *flags])
    out, err = capsys.readouterr()
    return code, out, err


def runtime_config(rendered: str) -> RuntimeConfig:
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(rendered))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "config.json" in d.get("data", {})]
    return RuntimeConfig.model_validate_json(cm["data"]["config.json"])


def two_attempts(config: RuntimeConfig, root: Path) -> list[Start]:
    """The launcher's start decision for attempt 1, then, after attempt 1 saved rollout 5,
    for attempt 2 (a KubeRay retry, or a resume after a suspend: a new pod each)."""
    spec = config.spec
    assert spec.checkpoint.path is not None
    directory = root / spec.checkpoint.path.lstrip("/")
    directory.mkdir(parents=True)
    starts = []
    for attempt in (1, 2):
        found, problems = preflight.read_checkpoint(root, spec)
        assert problems == []
        decision = slimecmd.decide(spec, found, config.uid)
        if decision.mark is not None:
            preflight.write_run_mark(root, spec, decision.mark)
        starts.append(decision.start)
        if attempt == 1:
            (directory / "iter_0000005").mkdir()
            (directory / TRACKER).write_text("5")
    return starts


def test_resume_false_without_a_uid_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = render(capsys, experiment(tmp_path, resume=False))
    assert code == 1 and out == ""
    (line,) = [x for x in err.splitlines() if "spec.checkpoint.resume" in x]
    assert "spec.checkpoint.resume: false needs the experiment's uid" in line
    assert "start over from the model" in line and CKPT in line
    assert "`kubectl apply -f`" in line and "remove spec.checkpoint.resume" in line
    assert err.splitlines()[-1] == "error: invalid RLExperiment(s); nothing rendered"


def test_why_without_a_uid_a_retry_would_start_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the refusal prevents: the same spec rendered with the operator's uid lets attempt 2
    go on from attempt 1's save; without one (what `render` of a file would print) attempt 2
    starts from the model again."""
    code, out, err = render(capsys, experiment(tmp_path, resume=False, uid=UID))
    assert code == 0, err
    config = runtime_config(out)
    assert config.uid == UID
    assert two_attempts(config, tmp_path / "with") == [Start.FIRST_RUN, Start.RESUME]
    without = config.model_copy(update={"uid": None})
    assert two_attempts(without, tmp_path / "without") == [Start.FIRST_RUN, Start.FIRST_RUN]


def test_resume_true_and_the_previews_still_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = render(capsys, experiment(tmp_path, resume=True))
    assert code == 0, err
    config = runtime_config(out)
    assert config.uid is None
    assert two_attempts(config, tmp_path / "resume") == [Start.FIRST_RUN, Start.RESUME]
    for preview in (["--show-command"], ["--summary"], ["--summary", "-o", "json"]):
        code, out, err = render(capsys, experiment(tmp_path, resume=False), *preview)
        assert code == 0, (preview, err)
        assert out and "needs the experiment's uid" not in err
    assert json.loads(out)["experiments"]
