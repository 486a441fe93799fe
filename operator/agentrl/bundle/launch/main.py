"""The RayJob entrypoint: read the runtime config, pin CUDA, check, then become slime.

`python -m agentrl.bundle.launch --config /etc/agentrl/config.json` resolves everything
first and reports every problem at once (exit 2), because a wrong path found after the
cluster is up costs GPU hours. What only the pod knows (MODEL_ARGS, the pinned env, the
flags the image's slime defines, whether the checkpoint directory holds a saved run) is
gathered here and handed to `agentrl.slimecmd.compose`, the one place that knows slime's
command line. `--dry-run` prints the resolved env (secrets redacted) and argv as JSON
instead of exec'ing. With `spec.checkpoint.path` set, slime runs as a child whose output is
also kept on that volume, one file per launch (`capture`); without it, the launcher execs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from pydantic import ValidationError

from agentrl import slimecmd
from agentrl.api import model_layout
from agentrl.api.constants import (
    CONFIG_PATH,
    ENV_CONFIG_PATH,
    IMAGE_CUDA_HOME,
    IMAGE_MEGATRON_DIR,
    REDACTED,
)
from agentrl.api.models import RLExperimentSpec
from agentrl.api.runtime import ENV_WANDB_API_KEY, RuntimeConfig
from agentrl.api.slime_flags import last_index, prompt_limit, user_load
from agentrl.bundle.launch import argcheck, capture, cuda, gang, gangrun, preflight, probe
from agentrl.slimecmd import policy
from agentrl.slimecmd.compose import HF_MODE_FLAG

T = TypeVar("T")
LOG_PREFIX = capture.LOG_PREFIX


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
    start: slimecmd.Decision
    hf_mode_flag: bool
    config: RuntimeConfig
    cuda_env: cuda.CudaEnv
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "start": {"decision": str(self.start.start), "iteration": self.start.iteration},
            "slime": {"definesMegatronToHfMode": self.hf_mode_flag},
            "env": redact(self.changed_env, self.secret_names),
            "trainEnvVars": redact(self.train_env, self.secret_names),
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
    megatron = ambient.get("MEGATRON_DIR", IMAGE_MEGATRON_DIR)
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


def tms_choice(env: Mapping[str, str], major: int) -> tuple[cuda.TmsChoice, str | None]:
    """The preload library the image's slime will pick for CUDA `major` actors (its lookup
    order read from its own source in `env`), and a warning when that order was unreadable
    and every supported row's order judged the image instead."""
    lookup = probe.tms_lookup(env)
    site_dir, libs = probe.tms_listing()
    if lookup.order is not None:
        return cuda.choose_tms(site_dir, libs, major, [lookup.order]), None
    warning = (
        f"torch_memory_saver: slime's preload lookup order is unknown ({lookup.source}); "
        "judged by the order of every slime row agentrl supports"
    )
    return cuda.choose_tms(site_dir, libs, major, cuda.KNOWN_TMS_ORDERS), warning


def _tms(
    config: RuntimeConfig,
    env: Mapping[str, str],
    major: int,
    problems: list[str],
    warnings: list[str],
) -> str | None:
    choice, warning = tms_choice(env, major)
    warnings += [warning] if warning else []
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


def _slime_parser(
    config: RuntimeConfig, env: Mapping[str, str], problems: list[str]
) -> probe.SlimeParser | None:
    """What the image's slime accepts, from its own parser built with the pinned env."""
    spec = config.spec
    weights = preflight.hf_weights(Path("/"), spec)
    try:
        parser = probe.slime_parser(env, weights)
    except probe.ProbeError as e:
        problems.append(str(e))
        return None
    if parser is None:
        problems.append(
            f"slime is not importable with the pinned env (PYTHONPATH ends with "
            f"{spec.runtime.slime_dir}): set spec.runtime.slimeDir to the slime checkout "
            "inside the image"
        )
    elif parser.hf_loadable is False and weights:
        problems += preflight.unloadable_hf_weights(Path("/"), spec, weights)
    return parser


def _start(config: RuntimeConfig, problems: list[str], warnings: list[str]) -> slimecmd.Decision:
    """First run or restart, judged from what spec.checkpoint.path holds now."""
    spec = config.spec
    found, read_problems = preflight.read_checkpoint(Path("/"), spec)
    problems += read_problems
    decision = slimecmd.decide(spec, found, config.uid)
    problems += [decision.problem] if decision.problem else []
    warnings += [decision.warning] if decision.warning else []
    return decision


def _prompt_lengths(
    spec: RLExperimentSpec,
    prompts: list[tuple[int, Any]] | None,
    problems: list[str],
    warnings: list[str],
) -> None:
    """The train rows slime's Dataset will drop for extraArgs' prompt length, counted with
    the tokenizer slime loads (only when the flag is set: `prompts` is None otherwise)."""
    if prompts is None:
        return
    try:
        lengths = preflight.slime_prompt_lengths(Path("/"), spec.model.path)
    except Exception as exc:  # slime loads the same tokenizer and stops, saying why
        warnings.append(
            f"spec.runtime.extraArgs: the train prompts were not measured against the prompt "
            f"length limit ({type(exc).__name__}: {str(exc)[:200]})"
        )
        return
    found, said = preflight.check_prompt_lengths(spec, prompts, lengths)
    problems += found
    warnings += said


def build_plan(
    config_path: str, ambient: Mapping[str, str], files_dir: str = slimecmd.FILES_DIR
) -> Plan:
    config = load_config(config_path)
    spec = config.spec
    problems: list[str] = []
    warnings: list[str] = []
    cuda_env = _resolve_cuda(config, ambient, problems)
    major = cuda_env.major if cuda_env else 0
    added = pinned_env(config, cuda_env, ambient, config_path) if cuda_env else {}
    env = {**ambient, **added}
    # slime's driver runs with the pinned env: its slime decides what the actors preload.
    tms = _tms(config, env, major, problems, warnings) if cuda_env else None
    slime_dir, model_type = spec.runtime.slime_dir, spec.model.type
    model_args = _guarded(problems, probe.model_args, slime_dir, model_type) or []
    gpus, gpu_warning = probe.visible_gpus()
    warnings += [gpu_warning] if gpu_warning else []
    # The train prompts, read in the row check's pass, when a prompt length is set.
    prompts: list[tuple[int, Any]] | None = (
        [] if prompt_limit(spec.runtime.extra_args) is not None else None
    )
    problems += preflight.run_all(Path("/"), spec, gpus, prompts)  # creates the checkpoint dir
    problems += preflight.check_context_length(Path("/"), spec, env)
    problems += preflight.check_offline_hub(Path("/"), spec, env)
    warnings += preflight.model_warnings(spec)
    _prompt_lengths(spec, prompts, problems, warnings)
    start = _start(config, problems, warnings)
    key_env = config.wandb_api_key_env or ENV_WANDB_API_KEY
    if spec.tracking.wandb is not None and not ambient.get(key_env):
        warnings.append(f"spec.tracking.wandb is set but {key_env} is empty: wandb logging is off")
    # slime's parser is built with the pinned env, like slime itself.
    parser = _slime_parser(config, env, problems) if cuda_env else None
    if parser is not None:
        problems += preflight.check_driver_device(parser.cuda_devices, gpus, env, parser.cuda_error)
    known = parser.flags if parser else None
    train_env = slimecmd.train_env_vars(added)
    cmd = slimecmd.compose(
        spec,
        slimecmd.PodFacts(
            model_args=model_args,
            train_env=train_env,
            wandb_key=bool(ambient.get(key_env)),
            start=start.start,
            hf_mode_flag=known is not None and HF_MODE_FLAG in known,
            files_dir=files_dir,
            experiment=slimecmd.wandb_run_name(config.namespace, config.experiment),
        ),
    )
    if known is not None and (bad := argcheck.unknown_flags(cmd.parts, known)):
        problems.append(argcheck.unknown_flags_message(bad, known))
    problems += policy.refusals(cmd.parts)
    if model_args:  # the image's own script: Megatron's layer and expert checks, judged now
        problems += [
            f"{p.path}: {p.message}; {p.hint}" for p in model_layout.judge(cmd.parts, model_type)
        ]
    warnings += policy.unhonoured(cmd.parts)
    if known is not None and HF_MODE_FLAG in known:
        hf_mode = argcheck.flag_value(cmd.argv(), HF_MODE_FLAG)
        problems += preflight.check_weights_for_mode(Path("/"), spec, hf_mode)
    if problems:
        raise LaunchError(problems)
    assert cuda_env is not None and known is not None  # no problems means both resolved
    assert cmd.resolved  # every pod fact was given
    return Plan(
        argv=cmd.argv(),
        env=env,
        changed_env={k: v for k, v in added.items() if ambient.get(k) != v},
        train_env=train_env,
        files=slimecmd.file_docs(config, cmd, os.path.abspath(config_path)),
        cuda_major=major,
        cudarts=[f"{c.path} ({c.source})" for c in cuda_env.cudarts],
        tms=tms,
        secret_names=secret_names(config),
        start=start,
        hf_mode_flag=HF_MODE_FLAG in known,
        config=config,
        cuda_env=cuda_env,
        warnings=warnings,
    )


def secret_names(config: RuntimeConfig) -> list[str]:
    """The variables whose values are secrets, whatever their names: the wandb key, the agent's
    header values and the runtime.env variables set from a Secret. One list for the dry run's
    env and for the output kept and relayed, so neither redacts less than the other."""
    return [
        config.wandb_api_key_env or ENV_WANDB_API_KEY,
        *config.http_header_envs.values(),
        *config.runtime_secret_envs,
    ]


def redact(env: Mapping[str, str], secret_names: Sequence[str]) -> dict[str, str]:
    """Env for printing: values of secret-bearing variables replaced."""
    names = set(secret_names)
    return {
        k: (REDACTED if k in names or capture.SECRET_NAME.search(k) else v)
        for k, v in sorted(env.items())
    }


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
        "--files-dir",
        default=slimecmd.FILES_DIR,
        help="where to write the YAML files slime reads (custom config, eval config)",
    )
    parser.add_argument(
        "--check-cuda",
        action="store_true",
        help="only check the image's CUDA setup (no runtime config; the image build runs this)",
    )
    parser.add_argument(
        "--cuda-home",
        default=os.environ.get("CUDA_HOME", IMAGE_CUDA_HOME),
        help="for --check-cuda",
    )
    parser.add_argument(
        "--gang-preflight",
        action="store_true",
        help="only run the gang preflight on the Ray cluster of RAY_ADDRESS, then exit 0 or 2",
    )
    parser.add_argument(
        "--preflight-backend",
        choices=gangrun.BACKENDS,
        default=gangrun.BACKENDS[0],
        help="torch.distributed backend of the gang all-reduce (gloo: CPU tensors, no GPU)",
    )
    parser.add_argument(
        "--preflight-mib",
        type=int,
        default=gangrun.MESSAGE_BYTES >> 20,
        help="MiB each rank all-reduces",
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
    choice, warning = tms_choice({**ambient, **env.env()}, env.major)
    if warning:
        print(f"{LOG_PREFIX} warning: {warning}", file=sys.stderr)
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


def gang_preflight(
    config: RuntimeConfig,
    cuda_env: cuda.CudaEnv,
    ambient: Mapping[str, str],
    backend: str = gangrun.BACKENDS[0],
    nbytes: int = gangrun.MESSAGE_BYTES,
) -> int:
    """Check every GPU worker and the gang's all-reduce (spec.runtime.preflight): 0 to go
    on, 2 when a problem stops the run. Reports to the job log and the Preflight condition."""
    if not config.spec.runtime.preflight.gang:
        print(f"{LOG_PREFIX} gang preflight off (spec.runtime.preflight.gang: false)",
              file=sys.stderr, flush=True)  # fmt: skip
        return 0
    if not ambient.get("RAY_ADDRESS"):
        print(
            f"{LOG_PREFIX} warning: not running as a Ray job (RAY_ADDRESS is unset): the gang "
            "preflight did not run",
            file=sys.stderr,
            flush=True,
        )
        return 0
    try:
        report = gangrun.run(config, cuda_env, backend, nbytes)
    except Exception as e:  # Ray or torch.distributed could not even start: say so, stop
        report = gang.Report(0, 0, backend, nbytes)
        report.problems.append(
            gang.Problem(
                gang.CHECK_WORKERS, "the driver", f"could not run: {type(e).__name__}: {e}"
            )
        )
    for line in report.lines():
        print(f"{LOG_PREFIX} {line}", file=sys.stderr)
    for warning in report.warnings:
        print(f"{LOG_PREFIX} warning: {warning.line()}", file=sys.stderr)
    for problem in report.problems:
        print(f"{LOG_PREFIX} error: {problem.line()}", file=sys.stderr)
    verdict = "passed" if report.passed else f"failed with {len(report.problems)} problem(s)"
    print(f"{LOG_PREFIX} gang preflight {verdict}: {report.summary()}", file=sys.stderr,
          flush=True)  # fmt: skip
    gangrun.publish(config, report.passed, report.reason(), report.summary())
    return 0 if report.passed else 2


def _gang_only(ns: argparse.Namespace) -> int:
    """--gang-preflight: the CUDA pin of this pod, then the gang preflight alone."""
    try:
        config = load_config(ns.config)
    except LaunchError as e:
        print(f"{LOG_PREFIX} error: {e}", file=sys.stderr)
        return 2
    problems: list[str] = []
    cuda_env = _resolve_cuda(config, os.environ, problems)
    if cuda_env is None:
        print(f"{LOG_PREFIX} error: {problems[0]}", file=sys.stderr)
        return 2
    return gang_preflight(
        config, cuda_env, os.environ, ns.preflight_backend, ns.preflight_mib << 20
    )


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    if ns.check_cuda:
        return check_cuda(ns.cuda_home, os.environ)
    if ns.gang_preflight:
        return _gang_only(ns)
    log = None if ns.dry_run else start_capture(ns.config, os.environ)
    try:
        returncode = _launch(ns, log)
    finally:
        if log is not None:
            log.finish()
    return capture.exit_like(returncode)


def start_capture(config_path: str, ambient: Mapping[str, str]) -> capture.Capture | None:
    """Keep this launch's output under spec.checkpoint.path, when there is one."""
    try:
        config = RuntimeConfig.load(config_path)
    except (OSError, ValidationError):
        return None  # build_plan reports it
    path = config.spec.checkpoint.path
    if not path:
        return None
    directory = capture.log_dir(path)
    try:
        log = capture.Capture.start(
            Path(directory),
            config.experiment,
            capture.secret_values(ambient, secret_names(config)),
            capture.now_utc(),
        )
    except OSError as e:
        print(
            f"{LOG_PREFIX} warning: cannot keep a log file in {directory} ({e.strerror}); "
            "the output goes to the job log only",
            file=sys.stderr,
        )
        return None
    print(f"{LOG_PREFIX} attempt {log.attempt}: output also kept in {log.path}", file=sys.stderr)
    return log


def _launch(ns: argparse.Namespace, log: capture.Capture | None) -> int:
    try:
        plan = build_plan(ns.config, os.environ, ns.files_dir)
    except LaunchError as e:
        for problem in e.problems:
            print(f"{LOG_PREFIX} error: {problem}", file=sys.stderr)
        print(f"{LOG_PREFIX} {len(e.problems)} problem(s); slime was not started", file=sys.stderr,
              flush=True)  # fmt: skip
        if not ns.dry_run:
            _publish_refusal(ns.config, e.problems[0], os.environ)
        return 2
    for warning in plan.warnings:
        print(f"{LOG_PREFIX} warning: {warning}", file=sys.stderr)
    if ns.dry_run:
        print(json.dumps(plan.describe(), indent=2))
        return 0
    if gang_preflight(plan.config, plan.cuda_env, os.environ) != 0:
        print(f"{LOG_PREFIX} slime was not started", file=sys.stderr, flush=True)
        return 2
    try:
        if plan.start.mark is not None:
            preflight.write_run_mark(Path("/"), plan.config.spec, plan.start.mark)
        write_files(plan.files)
    except OSError as e:
        print(f"{LOG_PREFIX} error: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    if log is None:
        _exec(plan)
    _announce(plan, "run")
    try:
        return capture.run_child(plan.argv, plan.env)
    except OSError as e:
        print(f"{LOG_PREFIX} error: cannot start {plan.argv[0]}: {e.strerror}", file=sys.stderr)
        return 127


def _publish_refusal(config_path: str, problem: str, ambient: Mapping[str, str]) -> None:
    """In a Ray job, the launcher's first problem becomes the Preflight condition too."""
    if not ambient.get("RAY_ADDRESS"):
        return
    try:
        config = RuntimeConfig.load(config_path)
    except (OSError, ValidationError):
        return  # nothing to name the hub by; the job log has the problem
    gangrun.publish(config, False, gang.CHECK_LAUNCH, f"the driver's pod: {problem}")


def start_line(plan: Plan) -> str:
    """How slime starts, as the argv makes it: extraArgs `--finetune` starts every attempt
    over, and an extraArgs `--load` starts a first run from its directory."""
    start, extra = plan.start, plan.config.spec.runtime.extra_args
    saved = start.start is slimecmd.Start.RESUME
    load = user_load(extra)
    if last_index(extra, "--finetune") is not None:
        beside = f", beside saved iteration {start.iteration}" if saved else ""
        return f"spec.runtime.extraArgs --finetune: from {load or 'the model'} at rollout 0{beside}"
    if saved:
        return f"restart from saved iteration {start.iteration}"
    if load:
        return f"first run, from {load} (spec.runtime.extraArgs --load)"
    return "first run, from the model"


def _announce(plan: Plan, verb: str) -> None:
    how = start_line(plan)
    # The argv carries no secret (wandb and header values travel in the env), so the job
    # log records exactly what ran.
    print(f"{LOG_PREFIX} {how}; {verb} {json.dumps(plan.argv)}", file=sys.stderr, flush=True)


def _exec(plan: Plan) -> NoReturn:
    _announce(plan, "exec")
    os.execvpe(plan.argv[0], plan.argv, plan.env)  # replaces this process; never returns
