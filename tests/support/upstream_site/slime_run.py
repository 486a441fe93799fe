"""Runs slime's own argument parsing and checkpoint loading on given argvs (test support).

Started by `tests/support/slime_upstream.run_slime` with this directory on PYTHONPATH and
AGENTRL_UPSTREAM_ROOTS naming one slime row's source, so `sitecustomize` serves slime,
Megatron-LM and SGLang from there. Reads a JSON list of cases on stdin, each
`{"argv": [...], "env": {...}, "load": true|false, "samples": true|false, "config":
true|false, "engine": true|false, "placement": true|false}`, and prints one JSON list of results.

For each case, slime's real `slime.utils.arguments.parse_args()` runs on the argv, in the
process environment `env` describes (the driver's: what the launcher exec'd train.py with,
and which pod it runs in, see `torch_cuda.py`): SGLang's and Megatron's parsers, Megatron's
HF-config check (against the model's config.json, read by transformers), Megatron's
`validate_args` (which reads the GPU's architecture when TP>1 or CP>1, and requires
CUDA_DEVICE_MAX_CONNECTIONS=1 then), and `slime_validate_args` with its `--load`/`--ref-load`
decisions. Only SGLang's server checks are left out (replaced by a no-op); the rest runs as
written. With `"load": true`, slime's `load_checkpoint` (backends/megatron_utils/checkpoint.py)
then runs on the parsed args with its own existence assertion and its own choice between a
Megatron and a Hugging Face checkpoint; only the final weight copy into GPU tensors is
recorded instead of done:

- Megatron checkpoint: Megatron's `load_checkpoint` is recorded with the flags it would
  honour (finetune, no_load_optim, no_load_rng) and the iteration Megatron's own
  `read_metadata` reads from the tracker file;
- Hugging Face checkpoint: at slime releases with Megatron-Bridge, the bridge's
  `load_hf_weights` is recorded (after slime's own bridge-mode assertion); at releases with
  their own loader, slime picks the loader by the config's model_type (raising for a type it
  cannot load) and only the copy (`load_model_hf_weights`) is recorded.

With `"config": true`, Megatron's `core_transformer_config_from_args` then builds the
model's `TransformerConfig` from the parsed args, as slime's model provider does on each
Megatron actor; its `__post_init__` checks the heads against tensor parallelism.

With `"engine": true`, slime's own SGLang argument checks run on the parsed args (the one
part of parse_args left out above), then `_compute_server_args` for engine 0: the tensor and
pipeline sizes and the context length it hands SGLang's ServerArgs are recorded.

With `"placement": true`, slime's own `_get_placement_group_layout` runs on the parsed args:
how many GPUs its placement group reserves and where the rollout engines' GPUs start.

With `"load_ref": true`, the actor's own `load_other_checkpoint("ref", args.ref_load)` runs
the same recorded loader on the reference model's checkpoint (`loaded_ref`).

With `"samples": true`, a group of samples as agentrl's rollout returns them (its own
`to_sample`, on slime's `Sample` class, rewards from agentrl's `post_process_rewards`; one
prompt, 4 episodes, the last of which broke into two sequences) goes
through the slime code that reads them after the rollout, on the parsed args: the
RolloutManager's conversion to train data, the zero-std reward metric slime logs each step,
and the trainer-side readers of per-sample rollout data (the policy loss's top-p replay
kwargs; with their flags, on-policy distillation's KL, the actor's routing replay and the
trainer's pass@k, on the step's raw rewards for its shape of one prompt x 4 episodes). Each
records "ok" or the error slime raises.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FIELDS = (
    "load",
    "ref_load",
    "hf_checkpoint",
    "save",
    "no_load_optim",
    "no_load_rng",
    "finetune",
    "start_rollout_id",
    "megatron_to_hf_mode",
    "use_kl_loss",
    "num_rollout",
    "global_batch_size",
)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _parse(argv: list[str]) -> Any:
    import slime.utils.arguments as slime_args

    slime_args.sglang_validate_args = lambda args: None  # SGLang's server checks
    sys.argv = ["train.py", *argv]
    return slime_args.parse_args()


@contextlib.contextmanager
def _environ(env: dict[str, str | None]) -> Iterator[None]:
    """The driver's environment for one case (None removes a variable); its PYTHONPATH
    entries go on sys.path as they would at the start of that process."""
    saved, saved_path = dict(os.environ), list(sys.path)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    extra = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        sys.path[:] = saved_path


def _load(args: Any) -> dict[str, Any]:
    ckpt = importlib.import_module("slime.backends.megatron_utils.checkpoint")
    training = importlib.import_module("megatron.training.checkpointing")
    # megatron.core.msc_utils is not in the snapshot; for a local path it is plain open().
    training.open_file = open
    record: dict[str, Any] = {}

    def megatron(**kwargs: Any) -> tuple[int, int]:
        tracker = Path(args.load) / "latest_checkpointed_iteration.txt"
        iteration, release = training.read_metadata(str(tracker))
        record.update(
            kind="megatron",
            path=args.load,
            iteration="release" if release else iteration,
            finetune=bool(args.finetune),
            no_load_optim=bool(args.no_load_optim),
            no_load_rng=bool(args.no_load_rng),
        )
        return iteration, 0

    def hf_copy(path: Any, **extra: Any) -> None:
        record.update(kind="hf", path=str(path), **extra)

    ckpt.get_args = lambda: args
    ckpt._load_checkpoint_megatron = megatron
    if hasattr(ckpt, "megatron_bridge_utils"):  # slime with Megatron-Bridge
        ckpt.megatron_bridge_utils = SimpleNamespace(
            patch_megatron_model=lambda model: contextlib.nullcontext(),
            patch_auto_bridge_hf_config=lambda bridge: SimpleNamespace(
                load_hf_weights=lambda model: hf_copy(args.load, loader="megatron-bridge")
            ),
        )
    else:  # slime with its own HF loader
        loader = importlib.import_module("slime.backends.megatron_utils.hf_to_megatron")
        assert callable(loader.load_hf_weights)  # runs the package's __init__ before patching
        loader.load_model_hf_weights = lambda a, model, path, config, fn: hf_copy(
            path, loader=fn.__name__, model_type=config.model_type
        )
    ckpt.load_checkpoint(
        None, None, None, checkpointing_context={}, skip_load_to_model_and_opt=False
    )
    return record


def _config(args: Any) -> str | None:
    """Megatron's `core_transformer_config_from_args` on the parsed args, as slime's model
    provider calls it when it builds the model: None, or what `TransformerConfig` raised."""
    from megatron.training.arguments import core_transformer_config_from_args

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            core_transformer_config_from_args(args)
    except BaseException as e:
        return _error(e)
    return None


def _engine(args: Any) -> dict[str, Any]:
    """The parallel sizes and context slime starts SGLang engine 0 with: its own SGLang checks
    (left out of parse_args here), then `_compute_server_args`, whose kwargs become SGLang's
    ServerArgs; or `{"error": ...}`."""
    from slime.backends.sglang_utils.arguments import validate_args
    from slime.backends.sglang_utils.sglang_engine import _compute_server_args

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            validate_args(args)
            found = _compute_server_args(args, 0, "127.0.0.1:1", 1, "127.0.0.1", 2)
    except BaseException as e:
        return {"error": _error(e)}
    # 624b824 returns (kwargs, ...), fa3c990 the kwargs alone
    kwargs = next(x for x in found if isinstance(x, dict)) if isinstance(found, tuple) else found
    return {
        "tp_size": kwargs["tp_size"],
        "pp_size": kwargs["pp_size"],
        "context_length": kwargs.get("context_length"),
    }


def _placement(args: Any) -> dict[str, Any]:
    """How the parsed args split the GPUs: slime's own `_get_placement_group_layout` (the
    GPUs of its one placement group, and the first rollout bundle), and the sizes it reads."""
    from slime.ray.placement_group import _get_placement_group_layout

    total, rollout_offset = _get_placement_group_layout(args)
    return {
        "gpus": total,
        "rollout_offset": rollout_offset,
        "actor_gpus": args.actor_num_nodes * args.actor_num_gpus_per_node,
        "rollout_num_gpus": args.rollout_num_gpus,
        "rollout_num_gpus_per_engine": args.rollout_num_gpus_per_engine,
        "num_gpus_per_node": args.num_gpus_per_node,
        "colocate": bool(args.colocate),
    }


def _load_ref(args: Any) -> dict[str, Any]:
    """The reference model's load: slime's own `load_other_checkpoint("ref", --ref-load)` on
    the actor (it points --load at --ref-load for the call, then at slime's loader)."""
    actor = importlib.import_module("slime.backends.megatron_utils.actor")
    holder = SimpleNamespace(
        args=args, model=None, weights_backuper=SimpleNamespace(backup=lambda tag: None)
    )
    record: dict[str, Any] = {}
    ckpt = importlib.import_module("slime.backends.megatron_utils.checkpoint")
    real = ckpt.load_checkpoint

    def load(*a: Any, **kw: Any) -> Any:
        record.update(_load(args))  # slime's loader on the args the actor set for the call
        return 0, 0

    actor.load_checkpoint = load
    try:
        actor.MegatronTrainRayActor.load_other_checkpoint(holder, "ref", args.ref_load)
    finally:
        actor.load_checkpoint = real
    return record


def _samples(args: Any) -> dict[str, str]:
    """agentrl's samples through slime's own readers (see the module docstring)."""
    from agentrl.bundle.rewards import post_process_rewards
    from agentrl.bundle.rollout.types import SampleFields, Status, slime_types, to_sample

    types = slime_types()
    assert types.real, "slime's Sample did not import"
    episodes = [0, 1, 2, 3, 3]  # episode 3's trace broke into two sequences
    samples = [
        to_sample(
            SampleFields(
                group_index=0,
                index=i,
                prompt="1+1?",
                tokens=[11, 12, 13, 14, 15],
                response_length=3,
                loss_mask=[1, 0, 1],
                rollout_log_probs=[-0.5, 0.0, -0.25],
                reward=float(i % 2),
                status=Status.COMPLETED,
                rollout_id=i,
                session_id=f"s{i}",
            ),
            types,
        )
        for i in episodes
    ]
    rollout = importlib.import_module("slime.ray.rollout")
    manager = SimpleNamespace(
        args=args,
        custom_convert_samples_to_train_data_func=None,
        _post_process_rewards=lambda batch: post_process_rewards(args, batch),
    )
    try:  # where later slime releases keep the metric
        metrics = importlib.import_module("slime.observability.rollout_metrics")
    except ModuleNotFoundError:
        metrics = rollout
    loss = importlib.import_module("slime.backends.megatron_utils.loss")
    actor = importlib.import_module("slime.backends.megatron_utils.actor")
    out: dict[str, str] = {}
    data: dict[str, Any] = {}

    def step(name: str, fn: Any) -> None:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                fn()
            out[name] = "ok"
        except BaseException as e:
            out[name] = _error(e)

    def convert() -> None:
        cls = rollout.RolloutManager.__ray_metadata__.modified_class
        data.update(cls._convert_samples_to_train_data(manager, samples))

    step("convert", convert)
    step("zero_std_metric", lambda: metrics._compute_zero_std_metrics(args, samples))
    step("top_p_replay", lambda: loss.get_rollout_top_p_logprob_kwargs(args, data))
    if args.use_opd:  # the trainer's step, with the rollout's log-probs as the student's
        step(
            "opd",
            lambda: loss.apply_opd_kl_to_advantages(
                args=args,
                rollout_data=data,
                advantages=[],
                student_log_probs=data.get("rollout_log_probs"),
            ),
        )
    if args.log_passrate:  # the trainer's log_passrate, for this step's shape
        try:  # where later slime releases keep it
            passrate = importlib.import_module("slime.observability.metric_utils")
        except ModuleNotFoundError:
            passrate = importlib.import_module("slime.utils.metric_utils")
        step(
            "passrate",
            lambda: passrate.compute_pass_rate(
                flat_rewards=data["raw_reward"], group_size=len(set(episodes)), num_groups=1
            ),
        )
    if args.use_rollout_routing_replay:
        step(
            "routing_replay",
            lambda: actor.MegatronTrainRayActor.fill_routing_replay(None, None, None, data),
        )
    return out


def run(case: dict[str, Any]) -> dict[str, Any]:
    with _environ(case.get("env") or {}):
        return _run(case)


def _run(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args = _parse(case["argv"])
    except BaseException as e:
        out["parse_error"] = _error(e) if not isinstance(e, SystemExit) else f"exit {e.code}"
        out["trace"] = traceback.format_exc()[-3000:]
        return out
    out["args"] = {f: getattr(args, f, None) for f in FIELDS}
    out["eval_datasets"] = [
        {k: v for k, v in vars(d).items() if v not in (None, {}, [])}
        for d in getattr(args, "eval_datasets", None) or []
    ]
    if case.get("config"):
        out["config_error"] = _config(args)
    if case.get("engine"):
        out["engine"] = _engine(args)
    if case.get("placement"):
        out["placement"] = _placement(args)
    if case.get("samples"):
        out["samples"] = _samples(args)
    if case.get("load"):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                out["loaded"] = _load(args)
        except BaseException as e:
            out["load_error"] = _error(e)
    if case.get("load_ref"):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                out["loaded_ref"] = _load_ref(args)
        except BaseException as e:
            out["load_ref_error"] = _error(e)
    return out


if __name__ == "__main__":
    results = [run(case) for case in json.loads(sys.stdin.read())]
    print(json.dumps(results, default=str))
