"""The RayJob entrypoint: read the runtime config, pin CUDA, check, then become slime.

`python -m agentrl.bundle.launch --config /etc/agentrl/config.json` resolves everything
first and reports every problem at once (exit 2), because a wrong path found after the
cluster is up costs GPU hours. `--dry-run` prints the resolved env (secrets redacted) and
argv as JSON instead of exec'ing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from pydantic import ValidationError

from agentrl.api.constants import CONFIG_PATH, ENV_CONFIG_PATH
from agentrl.api.runtime import ENV_WANDB_API_KEY, RuntimeConfig
from agentrl.bundle.launch import command, cuda, preflight, probe

DEFAULT_MEGATRON_DIR = "/root/Megatron-LM"
T = TypeVar("T")
LOG_PREFIX = "agentrl-launch:"


class LaunchError(Exception):
    """Launch cannot proceed; carries every problem found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class Plan:
    argv: list[str]
    env: dict[str, str]
    changed_env: dict[str, str]
    train_env: dict[str, str]
    files: dict[str, dict[str, Any]]
    cuda_major: int
    cudarts: list[str]
    tms: str | None
    secret_names: list[str]
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "env": command.redact(self.changed_env, self.secret_names),
            "trainEnvVars": command.redact(self.train_env, self.secret_names),
            # Names only: shows the Secret reached the pod without showing its value.
            "secretsPresent": sorted(n for n in self.secret_names if self.env.get(n)),
            "files": self.files,
            "cuda": {"major": self.cuda_major, "libcudart": self.cudarts},
            "torchMemorySaver": self.tms,
            "warnings": self.warnings,
        }


def load_config(path: str) -> RuntimeConfig:
    try:
        return RuntimeConfig.load(path)
    except OSError as e:
        raise LaunchError([f"cannot read the runtime config {path}: {e.strerror}"]) from e
    except ValidationError as e:
        raise LaunchError(
            [f"runtime config {path} is invalid (operator and image out of step?):\n{e}"]
        ) from e


def pinned_env(
    config: RuntimeConfig, cuda_env: cuda.CudaEnv, ambient: Mapping[str, str], config_path: str
) -> dict[str, str]:
    """The env the launcher adds for slime's driver (and, via --train-env-vars, its actors)."""
    runtime = config.spec.runtime
    megatron = ambient.get("MEGATRON_DIR", DEFAULT_MEGATRON_DIR)
    # Ambient first (agentrl's code, the user's extra code), then Megatron and slime, last so
    # the slime checkout's top-level dirs (tools, examples, tests) shadow nothing.
    python_path = [
        *ambient.get("PYTHONPATH", "").split(":"),
        *([megatron] if Path(megatron).is_dir() else []),
        runtime.slime_dir,
    ]
    return {
        **cuda_env.env(),
        "PYTHONPATH": ":".join(dict.fromkeys(p for p in python_path if p)),
        # Megatron's TP comm/compute overlap needs one device queue (SlimeRunner sets it too).
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "PYTHONUNBUFFERED": "1",
        ENV_CONFIG_PATH: os.path.abspath(config_path),
    }


def _resolve_cuda(
    config: RuntimeConfig, ambient: Mapping[str, str], problems: list[str]
) -> cuda.CudaEnv | None:
    try:
        return cuda.resolve_cuda(
            Path("/"),
            config.spec.runtime.cuda_home,
            probe.site_dirs(),
            dict(ambient),
            probe.ldconfig_text(),
        )
    except cuda.CudaError as e:
        problems.append(str(e))
        return None


def _tms(config: RuntimeConfig, major: int, problems: list[str], warnings: list[str]) -> str | None:
    site_dir, libs = probe.tms_listing()
    choice = cuda.choose_tms(site_dir, libs, major)
    if choice.problem:
        # Only colocated training offloads the actors through torch_memory_saver.
        (problems if config.spec.resources.colocate else warnings).append(
            f"torch_memory_saver: {choice.problem}"
        )
    return choice.path


def _guarded(problems: list[str], fn: Callable[..., T], *args: str) -> T | None:
    """fn(*args), or None with its ProbeError recorded as a problem."""
    try:
        return fn(*args)
    except probe.ProbeError as e:
        problems.append(str(e))
        return None


def _check_flags(
    parts: list[command.Part], env: Mapping[str, str], problems: list[str], warnings: list[str]
) -> None:
    """Refuse flags slime's own parser does not define (slime would drop them silently)."""
    try:
        known = probe.known_flags(env)
    except probe.ProbeError as e:
        problems.append(str(e))
        return
    if known is None:
        warnings.append("slime is not importable here: flags were not checked against its parser")
    elif bad := command.unknown_flags(parts, known):
        problems.append(command.unknown_flags_message(bad, known))


def build_plan(config_path: str, ambient: Mapping[str, str]) -> Plan:
    config = load_config(config_path)
    spec = config.spec
    problems: list[str] = []
    warnings: list[str] = []
    cuda_env = _resolve_cuda(config, ambient, problems)
    major = cuda_env.major if cuda_env else 0
    tms = _tms(config, major, problems, warnings) if cuda_env else None
    added = pinned_env(config, cuda_env, ambient, config_path) if cuda_env else {}
    env = {**ambient, **added}
    slime_dir, model_type = spec.runtime.slime_dir, spec.model.type
    model_args = _guarded(problems, probe.model_args, slime_dir, model_type) or []
    gpus, gpu_warning = probe.visible_gpus()
    warnings += [gpu_warning] if gpu_warning else []
    problems += preflight.run_all(Path("/"), spec, gpus)
    warnings += preflight.model_warnings(spec)
    key_env = config.wandb_api_key_env or ENV_WANDB_API_KEY
    if spec.tracking.wandb is not None and not ambient.get(key_env):
        warnings.append(f"spec.tracking.wandb is set but {key_env} is empty: wandb logging is off")
    train_env = command.train_env_vars(added)
    parts = command.compose(
        config, model_args, train_env, command.wandb_args(spec, ambient, key_env)
    )
    if cuda_env:  # the parser is built with the pinned env, like slime itself
        _check_flags(parts, env, problems, warnings)
    if problems:
        raise LaunchError(problems)
    assert cuda_env is not None  # no problems means CUDA resolved
    return Plan(
        argv=command.flatten(parts),
        env=env,
        changed_env={k: v for k, v in added.items() if ambient.get(k) != v},
        train_env=train_env,
        files=_files(config, config_path),
        cuda_major=major,
        cudarts=[f"{c.path} ({c.source})" for c in cuda_env.cudarts],
        tms=tms,
        secret_names=[key_env, *config.http_header_envs.values()],
        warnings=warnings,
    )


def _files(config: RuntimeConfig, config_path: str) -> dict[str, dict[str, Any]]:
    """The YAML files slime reads, keyed by the paths the rendered flags name."""
    files = {}
    if path := command.flag_value(config.slime_args, command.CUSTOM_CONFIG_FLAG):
        files[path] = command.custom_config(config, os.path.abspath(config_path))
    if path := command.flag_value(config.slime_args, command.EVAL_CONFIG_FLAG):
        files[path] = command.eval_config(config.spec)
    return files


def write_files(files: Mapping[str, Mapping[str, Any]]) -> None:
    for path, doc in files.items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agentrl.bundle.launch", description=__doc__)
    parser.add_argument(
        "--config", default=os.environ.get(ENV_CONFIG_PATH, CONFIG_PATH), help="runtime config JSON"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print env and argv as JSON; do not exec"
    )
    parser.add_argument(
        "--check-cuda",
        action="store_true",
        help="only check the image's CUDA setup (no runtime config; the image build runs this)",
    )
    parser.add_argument(
        "--cuda-home",
        default=os.environ.get("CUDA_HOME", "/usr/local/cuda"),
        help="for --check-cuda",
    )
    return parser.parse_args(argv)


def check_cuda(cuda_home: str, ambient: Mapping[str, str]) -> int:
    """One CUDA runtime major reachable and a matching torch_memory_saver, or exit 2."""
    try:
        env = cuda.resolve_cuda(
            Path("/"), cuda_home, probe.site_dirs(), dict(ambient), probe.ldconfig_text()
        )
    except cuda.CudaError as e:
        print(f"{LOG_PREFIX} error: {e}", file=sys.stderr)
        return 2
    site_dir, libs = probe.tms_listing()
    choice = cuda.choose_tms(site_dir, libs, env.major)
    report = {
        "cudaHome": env.cuda_home,
        "major": env.major,
        "libcudart": [f"{c.path} ({c.source})" for c in env.cudarts],
        "torchMemorySaver": choice.path,
    }
    print(json.dumps(report, indent=2))
    if choice.problem:
        print(f"{LOG_PREFIX} error: torch_memory_saver: {choice.problem}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    if ns.check_cuda:
        return check_cuda(ns.cuda_home, os.environ)
    try:
        plan = build_plan(ns.config, os.environ)
    except LaunchError as e:
        for problem in e.problems:
            print(f"{LOG_PREFIX} error: {problem}", file=sys.stderr)
        print(f"{LOG_PREFIX} {len(e.problems)} problem(s); slime was not started", file=sys.stderr)
        return 2
    for warning in plan.warnings:
        print(f"{LOG_PREFIX} warning: {warning}", file=sys.stderr)
    if ns.dry_run:
        print(json.dumps(plan.describe(), indent=2))
        return 0
    try:
        write_files(plan.files)
    except OSError as e:
        print(f"{LOG_PREFIX} error: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return _exec(plan)


def _exec(plan: Plan) -> NoReturn:
    print(
        f"{LOG_PREFIX} exec {' '.join(plan.argv[:2])} ({len(plan.argv) - 2} args)",
        file=sys.stderr,
        flush=True,
    )
    os.execvpe(plan.argv[0], plan.argv, plan.env)  # replaces this process; never returns
