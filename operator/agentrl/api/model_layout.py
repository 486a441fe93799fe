"""The model's layers, experts and heads against Megatron's and SGLang's parallelism (pure).

slime's `parse_args`, in the driver on a GPU worker once the whole gang is scheduled, runs
Megatron's `validate_args`, which stops on two facts of the model that no GPU count can show
and on one of slime's, and Megatron's `TransformerConfig` on the heads and expert biases when
slime builds the model:

- pipeline parallelism must divide the model's layers (`--num-layers`, plus one for each of
  `--account-for-embedding-in-pipeline-split` and `--account-for-loss-in-pipeline-split`),
  unless the split is made uneven (`--decoder-first/last-pipeline-num-layers`) or laid out by
  hand (`--pipeline-model-parallel-layout`, virtual pipeline stages), which Megatron judges
  elsewhere and which are not judged here;
- expert parallelism above 1 needs a mixture-of-experts model (`--num-experts`), and must
  divide its experts;
- context parallelism above 1 must split slime's `--seq-length` (4096, slime's placeholder,
  unless extraArgs set it) into 2 x context chunks (a fact of slime, not of the model);
- tensor parallelism must divide the model's attention heads (`--num-attention-heads`), and
  be a divisor or a multiple of its key/value heads (`--num-query-groups`, with
  `--group-query-attention`);
- a mixture-of-experts model with biases (no `--disable-bias-linear`) needs expert tensor
  parallelism 1, which follows tensor parallelism unless `--expert-tensor-parallel-size` is
  set.

See `validate_args` of the Megatron both supported slime rows build with:
https://github.com/NVIDIA/Megatron-LM/blob/1dcf0dafa884ad52ffb243625717a3471643e087/megatron/training/arguments.py#L570-L571
(layers), #L816-L819 (context) and #L1024-L1027 (experts), and
`TransformerConfig.__post_init__` (heads, then key/value heads; expert biases at #L1614-L1617):
https://github.com/NVIDIA/Megatron-LM/blob/1dcf0dafa884ad52ffb243625717a3471643e087/megatron/core/transformer/transformer_config.py#L939-L961

Each SGLang rollout engine runs the model with tensor parallelism `rolloutGpusPerEngine`
(divided by SGLang's pipeline size), and its attention layer asserts the same heads rule
when the engine loads the model, after the gang is scheduled (e.g.
https://github.com/sgl-project/sglang/blob/v0.5.13/python/sglang/srt/models/qwen2.py#L128-L138,
and each supported architecture's attention at v0.5.13 and v0.5.15.post1). Where SGLang splits
attention otherwise (data-parallel or context-parallel attention) this is not judged.

The model's numbers are slime's `scripts/models/<type>.sh` (its `MODEL_ARGS`, which come
first in slime's command line): at admission, from the table generated from the supported
rows (`upstream_names.MODEL_LAYOUT_ARGS`); in the pod, from the script the image has. The
spec's parallelism comes next and `spec.runtime.extraArgs` last, so a flag there wins, as it
does in argparse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from agentrl.api.findings import Finding, Rule, err, warn
from agentrl.api.models import RLExperiment, RuntimeSpec
from agentrl.api.slime_flags import EXTRA_ARGS_ORIGIN, ArgRun, Seen, last_seen, option_name
from agentrl.api.upstream_names import MODEL_LAYOUT_ARGS

# The MODEL_ARGS flags this module reads (hack/gen-upstream-names.py copies these from each
# model script into upstream_names.MODEL_LAYOUT_ARGS; a test keeps the two lists equal).
NUM_LAYERS: Final = "--num-layers"
NUM_EXPERTS: Final = "--num-experts"
NUM_HEADS: Final = "--num-attention-heads"
# Megatron reads --num-query-groups only with --group-query-attention; without it the model
# has as many key/value heads as attention heads (or latent attention), which the heads rule
# covers.
NUM_QUERY_GROUPS: Final = "--num-query-groups"
GQA: Final = "--group-query-attention"
# Without it Megatron gives the linear layers biases, the experts' too, and takes expert
# biases only with expert tensor parallelism 1 (which follows tensor parallelism unless set).
NO_BIAS: Final = "--disable-bias-linear"
EXPERT_TENSOR: Final = "--expert-tensor-parallel-size"
TENSOR: Final = "--tensor-model-parallel-size"
PIPELINE: Final = "--pipeline-model-parallel-size"
EXPERT: Final = "--expert-model-parallel-size"
CONTEXT: Final = "--context-parallel-size"
SEQ_LENGTH: Final = "--seq-length"
# The --seq-length slime sets when none is given (a placeholder: its batches have their own
# lengths), in set_default_megatron_args at both supported rows; Megatron's validate_args
# still wants it to split into 2 x context-parallel chunks.
SLIME_SEQ_LENGTH: Final = 4096
# Each adds one layer to what the pipeline stages split.
SPLIT_EXTRA: Final = (
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
)
# With any of these Megatron does not require an even split of the layers (it checks the
# uneven split or the layout in other code): not judged here.
UNEVEN_SPLIT: Final = (
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
)
SCRIPT_FLAGS: Final = (
    NUM_LAYERS, NUM_EXPERTS, NUM_HEADS, NUM_QUERY_GROUPS, GQA, NO_BIAS, *SPLIT_EXTRA,
    *UNEVEN_SPLIT,
)  # fmt: skip

# slime starts each SGLang engine with tp_size = rollout GPUs per engine // SGLang's pipeline
# size (slime/backends/sglang_utils/sglang_engine.py, `_compute_server_args`, at both rows).
ENGINE: Final = "--rollout-num-gpus-per-engine"
SGLANG_PP: Final = ("--sglang-pipeline-parallel-size", "--sglang-pp-size")
# With any of these SGLang splits attention over fewer ranks than the engine's tensor size
# (data-parallel or context-parallel attention), or the engines' sizes come from elsewhere
# (a --sglang-config file, external engines): the engine rule stays quiet.
ENGINE_OWN_LAYOUT: Final = ("--sglang-config", "--rollout-external-engine-addrs")
ENGINE_OWN_LAYOUT_WORDS: Final = ("dp-attention", "context-parallel", "cp-size")

PIPELINE_FIELD: Final = "spec.resources.parallelism.pipeline"
EXPERT_FIELD: Final = "spec.resources.parallelism.expert"
TENSOR_FIELD: Final = "spec.resources.parallelism.tensor"
CONTEXT_FIELD: Final = "spec.resources.parallelism.context"
ENGINE_FIELD: Final = "spec.resources.rolloutGpusPerEngine"


@dataclass(frozen=True)
class Run:
    """A run of argv and where it came from (an `ArgRun`)."""

    origin: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class LayoutProblem:
    path: str
    message: str
    hint: str


def script_origin(model_type: str) -> str:
    return f"slime's scripts/models/{model_type}.sh"


def spec_runs(
    model_type: str,
    model_args: Sequence[str],
    pipeline: int,
    expert: int,
    extra_args: Sequence[str],
    *,
    tensor: int = 1,
    rollout_gpus_per_engine: int | None = None,
    context: int = 1,
) -> list[Run]:
    """The runs `judge` reads, in slime's command-line order, built from a spec."""
    parallelism: tuple[str, ...] = (TENSOR, str(tensor), PIPELINE, str(pipeline), EXPERT,
                                    str(expert), CONTEXT, str(context))  # fmt: skip
    if rollout_gpus_per_engine is not None:
        parallelism += (ENGINE, str(rollout_gpus_per_engine))
    return [
        Run(script_origin(model_type), tuple(model_args)),
        Run("spec.resources.parallelism", parallelism),
        Run(EXTRA_ARGS_ORIGIN, tuple(extra_args)),
    ]


def _int(seen: Seen | None) -> int | None:
    if seen is None or seen.value is None:
        return None
    try:
        return int(seen.value)
    except ValueError:
        return None  # slime's own parser reports a malformed number


def _field(seen: Seen, field: str) -> str:
    """The spec field a parallelism flag came from."""
    return EXTRA_ARGS_ORIGIN if seen.origin == EXTRA_ARGS_ORIGIN else field


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _query_groups(lookup: Callable[[str], Seen | None]) -> int | None:
    """The model's key/value heads where they differ from its attention heads: Megatron
    reads `--num-query-groups` only with `--group-query-attention`."""
    return _int(lookup(NUM_QUERY_GROUPS)) if lookup(GQA) is not None else None


def _splits(groups: int | None, tensor: int) -> bool:
    """Whether `tensor` ranks cannot share out `groups` key/value heads: Megatron (and SGLang)
    give each rank whole heads, or replicate one head over a whole number of ranks."""
    return groups is not None and groups > 0 and groups % tensor != 0 and tensor % groups != 0


def _fitting(heads: int, groups: int | None) -> str:
    """The tensor sizes the model's heads take, as a hint."""
    sizes = [d for d in range(1, heads + 1) if heads % d == 0 and not _splits(groups, d)]
    return ", ".join(str(d) for d in sizes)


def _last_of(runs: Sequence[ArgRun], names: Sequence[str]) -> Seen | None:
    """The last occurrence of any of `names` (aliases of one option), as argparse keeps it."""
    found: Seen | None = None
    for run in runs:
        args = run.args
        for i, arg in enumerate(args):
            name = option_name(arg)
            if name is None or name not in names:
                continue
            if len(arg) > len(name):
                found = Seen(arg[len(name) + 1 :], run.origin)
            else:
                found = Seen(args[i + 1] if i + 1 < len(args) else None, run.origin)
    return found


def _engine_layout_own(runs: Sequence[ArgRun]) -> bool:
    """Whether the command line lays SGLang's attention or engines out in its own way."""
    for run in runs:
        for arg in run.args:
            name = option_name(arg)
            if name is None:
                continue
            if name in ENGINE_OWN_LAYOUT or (
                name.startswith("--sglang-") and any(w in name for w in ENGINE_OWN_LAYOUT_WORDS)
            ):
                return True
    return False


def _engine_problems(
    runs: Sequence[ArgRun], model_type: str, heads: int | None, groups: int | None
) -> list[LayoutProblem]:
    """What each SGLang rollout engine's attention layer asserts when it loads the model: its
    tensor size divides the attention heads and divides or is a multiple of the key/value
    heads (the same rule as Megatron's)."""
    lookup = last_seen(runs, takes_value=True)
    engine_seen = lookup(ENGINE)
    per_engine = _int(engine_seen)
    if engine_seen is None or not per_engine or heads is None or _engine_layout_own(runs):
        return []
    pp = _int(_last_of(runs, SGLANG_PP)) or 1
    if per_engine % pp:
        return []  # slime's own validate_args says so
    tp = per_engine // pp
    if tp == 1:
        return []
    path = _field(engine_seen, ENGINE_FIELD)
    size = f"SGLang tensor parallelism {tp} (rolloutGpusPerEngine {per_engine}"
    size += f" / --sglang-pipeline-parallel-size {pp})" if pp > 1 else ")"
    hint = (
        f"use a rolloutGpusPerEngine that gives an SGLang tensor size of {_fitting(heads, groups)}"
    )
    hint += f" (times {pp} with SGLang pipeline parallelism)" if pp > 1 else ""
    if heads % tp:
        why = (
            f"{size} does not divide the {heads} attention heads of model.type {model_type!r}; "
            "every rollout engine fails to load the model (SGLang's attention layer asserts "
            "total_num_heads % tp_size == 0)"
        )
        return [LayoutProblem(path, why, hint)]
    if _splits(groups, tp):
        why = (
            f"{size} neither divides nor is a multiple of the {groups} key/value heads of "
            f"model.type {model_type!r}; every rollout engine fails to load the model "
            "(SGLang's attention layer asserts total_num_kv_heads % tp_size == 0 or "
            "tp_size % total_num_kv_heads == 0)"
        )
        return [LayoutProblem(path, why, hint)]
    return []


def _expert_bias_problems(
    lookup: Callable[[str], Seen | None], model_type: str, tensor_seen: Seen | None
) -> list[LayoutProblem]:
    """Megatron's `TransformerConfig` takes experts with biases only with expert tensor
    parallelism 1, which is tensor parallelism unless `--expert-tensor-parallel-size` says."""
    if lookup(NUM_EXPERTS) is None or lookup(NO_BIAS) is not None:
        return []
    etp_seen = lookup(EXPERT_TENSOR)
    seen = etp_seen or tensor_seen
    etp = _int(seen)
    if seen is None or etp is None or etp <= 1:
        return []
    follows = "" if etp_seen else " (it follows tensor parallelism unless set)"
    return [
        LayoutProblem(
            _field(seen, TENSOR_FIELD) if etp_seen is None else _field(seen, EXTRA_ARGS_ORIGIN),
            f"model.type {model_type!r} is a mixture-of-experts model whose experts have biases "
            "(its script has no --disable-bias-linear), which Megatron takes only with expert "
            f"tensor parallelism 1, and expert tensor parallelism is {etp}{follows}; Megatron "
            "stops on it when slime builds the model ('Bias in Moe is only supported when "
            "ETP==1')",
            f"add {EXPERT_TENSOR} 1 to spec.runtime.extraArgs, or use tensor 1",
        )
    ]


def judge(runs: Sequence[ArgRun], model_type: str) -> list[LayoutProblem]:
    """What Megatron (`validate_args`, `TransformerConfig`) and each SGLang engine would stop
    on, for the command line `runs` makes."""
    lookup: Callable[[str], Seen | None] = last_seen(runs, takes_value=True)
    out: list[LayoutProblem] = []
    pipeline_seen, expert_seen = lookup(PIPELINE), lookup(EXPERT)
    pipeline, expert = _int(pipeline_seen), _int(expert_seen)
    layers = _int(lookup(NUM_LAYERS))
    uneven = any(lookup(flag) is not None for flag in UNEVEN_SPLIT)
    if pipeline_seen and pipeline and pipeline > 1 and layers is not None and not uneven:
        extra = [flag for flag in SPLIT_EXTRA if lookup(flag) is not None]
        split = layers + len(extra)
        if split % pipeline:
            added = f" (+{len(extra)}: {', '.join(extra)})" if extra else ""
            counted = f"{layers} layers{added}"
            out.append(
                LayoutProblem(
                    _field(pipeline_seen, PIPELINE_FIELD),
                    f"pipeline parallelism {pipeline} does not divide the {counted} of "
                    f"model.type {model_type!r}; Megatron stops on it when slime starts "
                    "('Number of layers should be divisible by the pipeline-model-parallel "
                    "size')",
                    f"use a pipeline size that divides {split} ({_divisors(split)}), or split "
                    "unevenly with --decoder-first-pipeline-num-layers / "
                    "--decoder-last-pipeline-num-layers in spec.runtime.extraArgs",
                )
            )
    tensor_seen = lookup(TENSOR)
    tensor, heads = _int(tensor_seen), _int(lookup(NUM_HEADS))
    groups = _query_groups(lookup)
    if tensor_seen and tensor and tensor > 1 and heads is not None and heads % tensor:
        out.append(
            LayoutProblem(
                _field(tensor_seen, TENSOR_FIELD),
                f"tensor parallelism {tensor} does not divide the {heads} attention heads of "
                f"model.type {model_type!r}; Megatron stops on it when slime builds the model "
                f"('num_attention_heads ({heads}) must be a multiple of "
                f"tensor_model_parallel_size ({tensor})')",
                f"use a tensor size of {_fitting(heads, groups)}, and pipeline or context "
                "parallelism for the rest of the GPUs",
            )
        )
    elif tensor_seen and tensor and tensor > 1 and heads is not None and _splits(groups, tensor):
        out.append(
            LayoutProblem(
                _field(tensor_seen, TENSOR_FIELD),
                f"tensor parallelism {tensor} neither divides nor is a multiple of the "
                f"{groups} key/value heads (query groups) of model.type {model_type!r}; "
                "Megatron stops on it when slime builds the model ('num_query_groups "
                f"({groups}) must be a multiple or divisor of tensor_model_parallel_size "
                f"({tensor})')",
                f"use a tensor size of {_fitting(heads, groups)}, and pipeline or context "
                "parallelism for the rest of the GPUs",
            )
        )
    if expert_seen and expert and expert > 1:
        experts = _int(lookup(NUM_EXPERTS))
        path = _field(expert_seen, EXPERT_FIELD)
        if experts is None:
            out.append(
                LayoutProblem(
                    path,
                    f"expert parallelism {expert} needs a mixture-of-experts model, and "
                    f"model.type {model_type!r} has no experts (no --num-experts); Megatron "
                    "stops on it when slime starts ('num_experts must be non None to use "
                    "expert model parallelism')",
                    "set parallelism.expert to 1 for a dense model",
                )
            )
        elif experts % expert:
            out.append(
                LayoutProblem(
                    path,
                    f"expert parallelism {expert} does not divide the {experts} experts of "
                    f"model.type {model_type!r}; Megatron stops on it when slime starts",
                    f"use an expert size that divides {experts}",
                )
            )
    out += _expert_bias_problems(lookup, model_type, tensor_seen)
    context_seen = lookup(CONTEXT)
    context = _int(context_seen)
    seq_seen = lookup(SEQ_LENGTH)
    seq = _int(seq_seen) if seq_seen else SLIME_SEQ_LENGTH
    if context_seen and context and context > 1 and seq and seq % (2 * context):
        where = f"--seq-length {seq}" if seq_seen else f"{seq}, slime's placeholder"
        fits = [str(c) for c in range(1, 65) if seq % (2 * c) == 0]
        out.append(
            LayoutProblem(
                _field(context_seen, CONTEXT_FIELD),
                f"context parallelism {context} needs a sequence length that is a multiple of "
                f"2 x {context}, and slime's is {where}; Megatron stops on it when slime "
                "starts ('seq-length should be a multiple of 2 * context-parallel-size if "
                "context-parallel-size > 1')",
                f"use a context size of {', '.join(fits)}, or set --seq-length in "
                f"spec.runtime.extraArgs to a multiple of {2 * context}",
            )
        )
    out += _engine_problems(runs, model_type, heads, groups)
    return out


DEFAULT_SLIME_DIR: Final = RuntimeSpec.model_fields["slime_dir"].default


def parallelism_fits_model(exp: RLExperiment) -> Iterator[Finding]:
    """`parallelism.pipeline` divides the layers of `model.type` (unless `runtime.extraArgs`
    split them unevenly), and `parallelism.expert` above 1 needs a mixture-of-experts
    `model.type` whose experts it divides, and `parallelism.tensor` divides its attention
    heads and divides or is a multiple of its key/value heads: Megatron asserts these when
    slime starts, after the gang is scheduled, as it does on a `parallelism.context` whose
    double does not divide slime's sequence length (4096 unless `--seq-length`), and on a
    mixture-of-experts `model.type` with biases whose expert tensor parallelism (tensor, unless
    `--expert-tensor-parallel-size`) is above 1. `rolloutGpusPerEngine` (each SGLang
    engine's tensor size) takes the same heads rule: every engine asserts it when it loads
    the model. An error for the supported images' scripts; a warning with a
    `runtime.slimeDir` of your own (the launcher then judges the image's own script before
    slime starts)."""
    spec = exp.spec
    model_args = MODEL_LAYOUT_ARGS.get(spec.model.type)
    if model_args is None:
        return  # not a supported row's model type: names_known says so
    par = spec.resources.parallelism
    runs = spec_runs(
        spec.model.type,
        model_args,
        par.pipeline,
        par.expert,
        spec.runtime.extra_args,
        tensor=par.tensor,
        rollout_gpus_per_engine=spec.resources.rollout_gpus_per_engine,
        context=par.context,
    )
    own_slime = spec.runtime.slime_dir != DEFAULT_SLIME_DIR
    for problem in judge(runs, spec.model.type):
        if own_slime:
            own = " (as the supported images' script has it; runtime.slimeDir is your own)"
            yield warn(problem.path, problem.message + own, problem.hint)
        else:
            yield err(problem.path, problem.message, problem.hint)


RULES: tuple[Rule, ...] = (parallelism_fits_model,)
