"""slime's own code at each supported commit, runnable here: the launcher tests' ground truth.

Reads the upstream snapshots as data (`../shared/upstream`: slime at each supported commit,
Megatron-LM at the commit both build with) and SGLang's released source of the version each
slime row's `docker/Dockerfile` builds on (fetched from PyPI by hack/setup.sh), with the
row's own `docker/patch/latest/sglang*.patch` applied to it as slime's image does. Code from
these trees runs in subprocesses (`upstream_site/`), where an import hook serves it with
stand-ins for the GPU stack.

Tests that need the snapshots skip, naming the folder, only when it is absent
(`tests/support/shared.py`).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support import upstream
from tests.support.shared import SHARED, missing, require

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(__file__).resolve().parent / "upstream_site"
# The slime rows agentrl supports, by commit (the folder names of the snapshots).
ROWS = upstream.slime_rows()
_SLIME = {Path(folder).name: SHARED / folder for folder in upstream.folders("slime")}
(_MEGATRON,) = upstream.folders("Megatron-LM")
MEGATRON = SHARED / _MEGATRON
_SGLANG_PREFIXES = ("server_args", "arg_groups", "function_call", "parser")


def require_upstream() -> None:
    for row in ROWS:
        slime_dir(row)
    require(MEGATRON, "Megatron-LM's snapshot")


@functools.cache
def work_dir() -> Path:
    """This process's scratch directory for the rows' patched SGLang trees (made once);
    skips the calling test without the snapshots."""
    require_upstream()
    path = Path(tempfile.mkdtemp(prefix="agentrl-upstream-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def slime_dir(row: str) -> Path:
    """slime's source at the row's commit; every read of it starts here, so a test without
    it skips with the upstream tier instead of failing on the first file it opens."""
    return require(_SLIME[row], f"slime {row}'s snapshot")


def sglang_version(row: str) -> str:
    """The SGLang release the row's image builds on: `ARG SGLANG_IMAGE_TAG=v0.5.13-cu129`."""
    dockerfile = require(slime_dir(row) / "docker" / "Dockerfile", f"slime {row}'s docker/ files")
    text = dockerfile.read_text(encoding="utf-8")
    m = re.search(r"^ARG SGLANG_IMAGE_TAG=v([0-9][^\s-]*)", text, re.MULTILINE)
    assert m, f"no SGLANG_IMAGE_TAG in slime {row}'s docker/Dockerfile"
    return m.group(1)


def _sglang_patches(row: str) -> list[Path]:
    """The row's sglang*.patch files, in the order its Dockerfile applies them."""
    docker = slime_dir(row) / "docker"
    text = (docker / "Dockerfile").read_text(encoding="utf-8")
    version = re.search(r"^ARG PATCH_VERSION=(\S+)", text, re.MULTILINE)
    folder = docker / "patch" / (version.group(1) if version else "latest")
    named = dict.fromkeys(re.findall(r"\b(sglang[\w-]*\.patch)\b", text))
    return [folder / n for n in named if (folder / n).is_file()]


def sglang_source(row: str) -> Path:
    """SGLang's argument modules as the row's image has them (release + slime's patches)."""
    version = sglang_version(row)
    release = upstream.sglang_dir(version)
    if not (release / ".complete").is_file():
        # images/upstream.toml must name every row's SGLang (a test checks it); hack/setup.sh
        # fetches each from PyPI.
        missing(release, f"SGLang {version}'s argument modules")
    dest = work_dir() / f"sglang-{row}"
    if (dest / ".complete").is_file():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(release / "sglang", dest / "sglang")
    include = [f"--include=sglang/srt/{p}*" for p in _SGLANG_PREFIXES]
    for patch in _sglang_patches(row):
        done = subprocess.run(
            ["git", "apply", "-p2", *include, str(patch)],
            cwd=dest,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{patch} does not apply to SGLang {version}: {done.stderr}"
    (dest / ".complete").touch()
    return dest


def roots(row: str) -> list[Path]:
    return [slime_dir(row), require(MEGATRON, "Megatron-LM's snapshot"), sglang_source(row)]


def env(row: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """A process env in which `import slime` runs the row's own code (see upstream_site)."""
    out = dict(base if base is not None else os.environ)
    path = [str(SITE), *filter(None, out.get("PYTHONPATH", "").split(os.pathsep))]
    out["PYTHONPATH"] = os.pathsep.join(path)
    out["AGENTRL_UPSTREAM_ROOTS"] = os.pathsep.join(str(r) for r in roots(row))
    return out


def _run_site(
    row: str, argv: list[str], stdin: Any = None, base: dict[str, str] | None = None,
    timeout: float = 600,
) -> Any:  # fmt: skip
    """Run `python argv...` in the row's env (`stdin` as JSON); the last stdout line, parsed."""
    done = subprocess.run(
        [sys.executable, *argv],
        input=None if stdin is None else json.dumps(stdin),
        env=env(row, base),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def run_slime(row: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run slime's parse_args and checkpoint loader on each case (see upstream_site/slime_run)."""
    results: list[dict[str, Any]] = _run_site(row, [str(SITE / "slime_run.py")], cases)
    return results


_DESTS = """
import json
from slime_parser import build_parser
p = build_parser()
print(json.dumps({o: a.dest for o, a in p._option_string_actions.items()}))
"""


@functools.cache
def parser_dests(row: str) -> dict[str, str]:
    """Every option string of the row's own parser (as slime's parse_args builds it: Megatron's
    arguments, slime's, SGLang's) and the attribute of `args` it sets."""
    dests: dict[str, str] = _run_site(row, ["-c", _DESTS])
    return dests


def flag_kinds(row: str, flags: list[str]) -> dict[str, list[str] | None]:
    """What the row's own parser makes of each option string: [the attribute of args it
    sets, the kind of value] as `agentrl.bundle.rehearse.slime_argv` names kinds, or None for
    an option it lacks (see upstream_site/slime_flag_kinds)."""
    kinds: dict[str, list[str] | None] = _run_site(row, [str(SITE / "slime_flag_kinds.py"), *flags])
    return kinds


def slime_parse(row: str, options: list[str]) -> dict[str, Any]:
    """`{"args": vars(args), "rest": unknown options}` from the row's own parser on an argv's
    options (see upstream_site/slime_parse_args)."""
    parsed: dict[str, Any] = _run_site(row, [str(SITE / "slime_parse_args.py")], options)
    return parsed


def slime_preload(row: str, pylib: Path) -> dict[str, str | None]:
    """What the row's own actor_group sets as the Megatron actors' LD_PRELOAD when
    torch_memory_saver imports from `pylib` (see upstream_site/slime_preload):
    `{"LD_PRELOAD": path}`, or `{"error": ...}` with what slime raised."""
    base = {**os.environ, "PYTHONPATH": str(pylib)}
    result: dict[str, str | None] = _run_site(
        row, [str(SITE / "slime_preload.py")], base=base, timeout=300
    )
    return result


def slime_eval(row: str, case: dict[str, Any]) -> dict[str, Any]:
    """The dict the row's own eval logging logs for one eval pass of agentrl's rollout, or
    `{"error": ...}`, with agentrl's own eval gauges (see upstream_site/slime_eval)."""
    result: dict[str, Any] = _run_site(row, [str(SITE / "slime_eval.py")], case, timeout=300)
    return result


def slime_wandb(row: str, argv: list[str]) -> dict[str, str | None]:
    """What the row's own `init_wandb_primary` passes to `wandb.init` (entity, project, group,
    name) for `argv`, or `{"error": ...}` (see upstream_site/slime_wandb)."""
    result: dict[str, str | None] = _run_site(
        row, [str(SITE / "slime_wandb.py")], argv, timeout=300
    )
    return result


def slime_train_data(row: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One train step of agentrl's rollout per case, through the row's own training-data path
    with the real (CPU) torch (see upstream_site/slime_train_data): what slime's trainer
    holds for each sample, or `{"error": ...}` with the stage and what slime raised."""
    base = dict(os.environ)
    base.pop("AGENTRL_UPSTREAM_ROOTS", None)  # sitecustomize would stand torch in
    path = [str(SITE), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
    base["PYTHONPATH"] = os.pathsep.join(path)
    base["AGENTRL_SLIME_TRAIN_ROOTS"] = os.pathsep.join(str(r) for r in roots(row))
    done = subprocess.run(
        [sys.executable, str(SITE / "slime_train_data.py")],
        input=json.dumps(cases),
        env=base,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return results
