"""Runs one train step of agentrl's rollout through slime's own training-data path (test support).

Started by `tests/support/slime_upstream.slime_train_data` with this directory on PYTHONPATH
and AGENTRL_SLIME_TRAIN_ROOTS naming one slime row's source (and Megatron-LM's and SGLang's,
for the parser). Unlike the other scripts here, torch is the real (CPU) torch: slime's
advantage and loss code computes on tensors. Only the GPU stack (triton kernels aside, which
torch does without), SGLang's engine and Megatron's parallel state are stood in for, and
Megatron's parallel state answers as one rank with no pipeline, tensor or context
parallelism.

Reads a JSON list of cases on stdin, each `{"rows": [metadata per prompt], "grpo": {spec.grpo keys},
"extra_args": [...], "n": samples per prompt, "batch": prompts per step}`. The argv is what
agentrl renders for that spec (`agentrl.slimecmd.flags`: data, algorithm and hook flags)
with `extra_args` last, as `spec.runtime.extraArgs` come, parsed by the row's own parser.
agentrl's `train_batch` then runs one step on slime's own `RolloutDataSourceWithBuffer` and
`Sample` (the stub agent and gateway of tests/bundle/rollout/doubles.py play the episodes as
the rows' metadata say), and what it returns goes through the row's own code as
`RolloutManager.generate` and the Megatron actor's `train` hand it on: the rollout-id
check and flattening, `_convert_samples_to_train_data` (with the reward post-process the
args name), the DP schedule, the tensors the actor receives, then
`compute_advantages_and_returns` (the rollout's log-probs stand for the trainer's, as
`--use-rollout-logprobs` does) and, per micro-batch, `get_batch`'s token and loss-mask
layout; last, what slime logs for the step (`logged`: the RolloutManager's per-sample
figures and the actor's `log_rollout_data`, each with its W&B key). Prints one JSON list:
per case, each sample as agentrl returned it (`samples`), what the trainer holds for it
(`trained`, in the same order: the DP split keeps it with one rank) and `logged`, or
`error` with the stage and what slime raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import io
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch  # the real one: imported before `install`, so the finder never stands it in
import upstream_imports

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository (tests.*)

# Real torch (without triton's kernels, which it does without); PIL only for slime's image
# processing, which no agentrl row uses.
upstream_imports.STAND_INS = frozenset(upstream_imports.STAND_INS - {"torch", "triton"} | {"PIL"})
upstream_imports.install(os.environ["AGENTRL_SLIME_TRAIN_ROOTS"].split(os.pathsep))

# Megatron's parallel state as one rank sees it without any model parallelism.
MPU = SimpleNamespace(
    is_pipeline_last_stage=lambda *a, **k: True,
    get_context_parallel_world_size=lambda *a, **k: 1,
    get_context_parallel_rank=lambda *a, **k: 0,
    get_tensor_model_parallel_world_size=lambda *a, **k: 1,
    get_data_parallel_world_size=lambda *a, **k: 1,
    get_data_parallel_rank=lambda *a, **k: 0,
    get_data_parallel_group=lambda *a, **k: None,
    get_virtual_pipeline_model_parallel_world_size=lambda *a, **k: None,
    get_tensor_model_parallel_rank=lambda *a, **k: 0,
    get_data_parallel_src_rank=lambda *a, **k: 0,
    get_data_parallel_group_gloo=lambda *a, **k: None,
)


def _argv(case: dict[str, Any], rows_path: str, config_path: str) -> tuple[list[str], Any]:
    from tests.bundle.rollout.doubles import runtime_config

    from agentrl.slimecmd import flags

    config = runtime_config(
        max_concurrent=64,
        rolloutBatchSize=case["batch"],
        samplesPerPrompt=case["n"],
        **case.get("grpo", {}),
    )
    Path(config_path).write_text(config.to_json(), encoding="utf-8")
    spec = config.spec
    argv = [
        *flags.data_args(spec),
        *flags.algorithm_args(spec),
        *flags.hook_args("/unused/custom_config.yaml"),
        *case.get("extra_args", []),
    ]
    argv[argv.index("--prompt-data") + 1] = rows_path
    return argv, config


def _parse(argv: list[str], config_path: str) -> Any:
    from slime_parser import build_parser

    parser = build_parser()
    for action in parser._actions:  # only the flags given matter; the rest keep defaults
        action.required = False
    args, _ = parser.parse_known_args(argv)
    # What slime's --custom-config-path does with the file agentrl renders.
    args.agentrl_config_path = config_path
    args.hf_checkpoint = None
    return args


def _rollout(args: Any, config: Any) -> Any:
    from tests.bundle.rollout.doubles import FakeGateway, StubAgent
    from tests.support.metrics import LocalSink

    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.bundle.rollout.batch import RolloutContext
    from agentrl.bundle.rollout.driver import train_batch
    from agentrl.bundle.rollout.runtime import RolloutRuntime
    from agentrl.bundle.rollout.types import slime_types

    types = slime_types()
    assert types.real, "slime's Sample did not import"
    data_source = importlib.import_module("slime.rollout.data_source")
    data_source.load_tokenizer = lambda *a, **k: None  # no model here; agentrl renders no
    data_source.load_processor = lambda *a, **k: None  # chat template (--apply-chat-template)
    source = data_source.RolloutDataSourceWithBuffer(args)
    gateway = FakeGateway()
    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(64))

    async def build() -> RolloutContext:
        return ctx

    async def run() -> Any:
        runtime = RolloutRuntime(build, LocalSink(BundleMetrics()))
        try:
            return await train_batch(runtime, config, args, 0, source, types=types)
        finally:
            runtime._thread.close()

    return asyncio.run(run())


def _manager(args: Any) -> tuple[Any, Any]:
    """slime's RolloutManager class, and a stand-in instance with what its methods read."""
    rollout = importlib.import_module("slime.ray.rollout")
    cls = rollout.RolloutManager
    cls = getattr(getattr(cls, "__ray_metadata__", None), "modified_class", cls)
    misc = importlib.import_module("slime.utils.misc")

    def hook(path: str | None) -> Any:
        return None if path is None else misc.load_function(path)

    manager = SimpleNamespace(
        args=args,
        custom_reward_post_process_func=hook(args.custom_reward_post_process_path),
        custom_convert_samples_to_train_data_func=hook(
            args.custom_convert_samples_to_train_data_path
        ),
        train_parallel_config={
            "dp_size": 1,
            "cp_size": 1,
            "vpp_size": 1,
            "microbatch_group_size_per_vp_stage": 1,
        },
    )
    manager._post_process_rewards = functools.partial(cls._post_process_rewards, manager)
    # The data goes to the trainer through Ray's object store: here, as it is.
    rollout.ray = SimpleNamespace(put=lambda value, **_: value, get=lambda value: value)
    return rollout, cls, manager


def _validate_rollout_ids(rollout: Any) -> Any:
    fn = getattr(rollout, "_validate_rollout_id_annotated", None)
    if fn is None:  # where later slime releases keep it
        fn = importlib.import_module(
            "slime.observability.rollout_data_utils"
        ).validate_rollout_id_annotated
    return fn


def _trainer(args: Any, rollout_data: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The actor's side: advantages (and returns) as slime computes them, then each
    micro-batch's packed layout. The advantages per sample, and per micro-batch the packed
    token stream with the loss mask `get_batch` aligns to it (position j: the logit that
    predicts token j + 1)."""
    loss = importlib.import_module("slime.backends.megatron_utils.loss")
    data = importlib.import_module("slime.backends.megatron_utils.data")
    cp_utils = importlib.import_module("slime.backends.megatron_utils.cp_utils")
    for module in (loss, data, cp_utils, importlib.import_module("megatron.core")):
        module.mpu = MPU  # ppo_utils imports it from megatron.core inside its functions
    if hasattr(data, "accelerator"):  # later releases ask it for the device (CPU here)
        data.accelerator = SimpleNamespace(device=lambda *a, **k: torch.device("cpu"))
    distributed = importlib.import_module("slime.utils.distributed_utils")
    # One rank: the all-reduce of the masked whitening's sums leaves them as they are.
    distributed.dist = SimpleNamespace(
        all_reduce=lambda *a, **k: None, ReduceOp=torch.distributed.ReduceOp
    )
    # The rollout's log-probs stand for the trainer's forward pass (no model here).
    rollout_data["log_probs"] = [lp.clone() for lp in rollout_data["rollout_log_probs"]]
    rollout_data["ref_log_probs"] = [lp.clone() for lp in rollout_data["rollout_log_probs"]]
    loss.compute_advantages_and_returns(args, rollout_data)
    torch.Tensor.cuda = lambda self, *a, **k: self  # get_batch moves cu_seqlens to the GPU
    keys = ["tokens", "loss_masks", "total_lengths", "response_lengths", "advantages"]
    packed = []
    (iterator, *_) = data.get_data_iterator(rollout_data)
    for _ in iterator.micro_batch_indices:
        batch = data.get_batch(iterator, keys)
        packed.append(
            {"tokens": batch["tokens"][0].tolist(), "mask": batch["full_loss_masks"][0].tolist()}
        )
    return [a.tolist() for a in rollout_data["advantages"]], packed


def _slime_logs(args: Any, rollout_data: dict[str, Any]) -> dict[str, Any]:
    """What the actor's `log_rollout_data` reports for the step (to W&B and TensorBoard,
    under `rollout/...`), computed by the row's own code on what the trainer holds; one rank,
    so the gather across data-parallel ranks hands back this rank's figures."""
    try:  # where later slime releases keep it
        module = importlib.import_module("slime.observability.train_metric_utils")
    except ImportError:
        module = importlib.import_module("slime.backends.megatron_utils.data")
    gather = sys.modules[module.gather_and_reduce_log_dict.__module__]
    gather.dist = SimpleNamespace(
        get_rank=lambda *a, **k: 0,
        gather_object=lambda obj, out, **k: out.__setitem__(0, obj),
    )
    logged: dict[str, Any] = {}
    module.logging_utils = SimpleNamespace(log=lambda _args, metrics, **k: logged.update(metrics))
    module.log_rollout_data(0, args, rollout_data)
    return logged


def _slime_rollout_logs(rollout: Any, args: Any, samples: list[Any]) -> dict[str, Any]:
    """The per-sample figures the RolloutManager logs for the step (`rollout/...`, next to
    the rollout function's own metrics), by the row's own `compute_metrics_from_samples`."""
    fn = getattr(rollout, "compute_metrics_from_samples", None)
    if fn is None:  # where later slime releases keep it
        fn = importlib.import_module(
            "slime.observability.rollout_metrics"
        ).compute_metrics_from_samples
    return {f"rollout/{k}": v for k, v in fn(args, samples).items()}


def run(case: dict[str, Any]) -> dict[str, Any]:
    # One directory per case, removed with it: a suite run makes hundreds.
    with tempfile.TemporaryDirectory(prefix="agentrl-train-data-") as tmp:
        return _run(case, Path(tmp))


def _run(case: dict[str, Any], work: Path) -> dict[str, Any]:
    rows = work / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"p{i}", "metadata": {"id": i, **m}}) + "\n"
            for i, m in enumerate(case["rows"])
        ),
        encoding="utf-8",
    )
    argv, config = _argv(case, str(rows), str(work / "config.json"))
    stage = "parse"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args = _parse(argv, str(work / "config.json"))
            stage = "rollout"
            out = _rollout(args, config)
            rollout, cls, manager = _manager(args)
            stage = "rollout_ids"
            _validate_rollout_ids(rollout)(out.samples)
            samples = out.samples
            while isinstance(samples[0], list):  # as RolloutManager._get_rollout_data
                samples = [s for group in samples for s in group]
            stage = "convert"
            train_data = cls._convert_samples_to_train_data(manager, samples)
            stage = "split"
            (box,) = cls._split_train_data_by_dp(manager, train_data)
            rollout_data = dict(box.inner)  # what the one DP rank gets (process_rollout_data)
            rollout_data["total_lengths"] = [
                rollout_data["total_lengths"][i] for i in rollout_data.pop("partition")
            ]
            stage = "advantages"
            advantages, packed = _trainer(args, rollout_data)
            stage = "log"
            logged = {
                **_slime_rollout_logs(rollout, args, samples),
                **_slime_logs(args, rollout_data),
            }
    except BaseException as e:  # what slime raises is the finding
        return {"error": {"stage": stage, "message": f"{type(e).__name__}: {e}",
                          "trace": traceback.format_exc()[-3000:]}}  # fmt: skip
    from agentrl.bundle.failures import sample_failure

    return {
        "samples": [
            {
                "row": (s.metadata or {}).get("id"),
                "num_turns": (s.metadata or {}).get("num_turns"),
                "round_number": (s.metadata or {}).get("round_number"),
                "group_index": s.group_index,
                "rollout_id": s.rollout_id,
                "session_id": s.session_id,
                "failure": sample_failure(s),
                "status": s.status.name,
                "reward": s.reward,
                "tokens": list(s.tokens),
                "response_length": s.response_length,
                "loss_mask": list(s.loss_mask),
                "rollout_log_probs": list(s.rollout_log_probs or []),
            }
            for s in samples
        ],
        "max_response_len": args.rollout_max_response_len,
        "metrics": {
            k: v
            for k, v in out.metrics.items()
            if k.startswith("agentrl/groups")
            or k in ("agentrl/episode_reward_mean", "agentrl/zero_variance_share")
        },
        # What slime itself logs for the step (floats; JSON has no tensors).
        "logged": {k: float(v) for k, v in logged.items() if isinstance(v, (int, float))},
        "trained": {  # what the trainer holds, in the order of `samples`
            "rollout_ids": [int(r) for r in rollout_data["rollout_ids"]],
            "advantages": advantages,
            "loss_masks": [m.tolist() for m in rollout_data["loss_masks"]],
            "tokens": [t.tolist() for t in rollout_data["tokens"]],
            "response_lengths": [int(n) for n in rollout_data["response_lengths"]],
            "rewards": [float(r) for r in rollout_data["rewards"]],
            "rollout_mask_sums": rollout_data["rollout_mask_sums"].tolist(),
            "round_number": rollout_data.get("round_number"),
            "micro_batches": packed,
        },
    }


if __name__ == "__main__":
    print(json.dumps([run(case) for case in json.loads(sys.stdin.read())]))
