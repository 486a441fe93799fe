"""Runs slime's own argument parsing and checkpoint loading on given argvs (test support).

Started by `tests/support/slime_upstream.run_slime` with this directory on PYTHONPATH and
AGENTRL_UPSTREAM_ROOTS naming one slime row's source, so `sitecustomize` serves slime,
Megatron-LM and SGLang from there. Reads a JSON list of cases on stdin, each
`{"argv": [...], "load": true|false}`, and prints one JSON list of results.

For each case, slime's real `slime.utils.arguments.parse_args()` runs on the argv: SGLang's
and Megatron's parsers, Megatron's HF-config check (against the model's config.json, read by
transformers), and `slime_validate_args` with its `--load`/`--ref-load` decisions. Two steps
are left out because they need a GPU: Megatron's `validate_args` (it queries the device
architecture) and SGLang's server checks; each is replaced by a no-op, the rest runs as
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
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import traceback
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
)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _parse(argv: list[str]) -> Any:
    import slime.utils.arguments as slime_args

    megatron_args = importlib.import_module("slime.backends.megatron_utils.arguments")
    megatron_args.validate_args = lambda args: None  # needs a GPU (device architecture)
    slime_args.sglang_validate_args = lambda args: None  # SGLang's server checks
    sys.argv = ["train.py", *argv]
    return slime_args.parse_args()


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


def run(case: dict[str, Any]) -> dict[str, Any]:
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
    if case.get("load"):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                out["loaded"] = _load(args)
        except BaseException as e:
            out["load_error"] = _error(e)
    return out


if __name__ == "__main__":
    results = [run(case) for case in json.loads(sys.stdin.read())]
    print(json.dumps(results, default=str))
