"""What a rehearsal runs: the command line's options, and the episodes they pick.

The prompts are the first rows of the split's own data file (`spec.data.train` or an eval
set's `path`), read as the rollout reads them (`inputs.read_groups`), less the train rows
slime's Dataset drops for `--rollout-max-prompt-len` in extraArgs, each row repeated
as one group of the split's size (`grpo.samplesPerPrompt`, or the eval set's). Sampling
parameters and the episode deadline are the split's (`inputs.train_spec` / `eval_spec`),
as the pods would use them. The file's first rows are judged as the launcher's preflight
judges them in the pods (`agentrl.api.data_rows`), and so is `model.contextLength` against
the checkpoint's config.json (`agentrl.api.model_context`). Paths that exist only inside the
pods are refused with the flag that supplies a local copy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from agentrl.api.constants import SPLIT_EVAL, SPLIT_TRAIN
from agentrl.api.data_rows import ENCODING, ERRORS, ROW_SHAPE, judge_rows
from agentrl.api.model_context import longer_context_problem
from agentrl.api.models import RLExperimentSpec
from agentrl.api.prompt_lengths import ALL_DROPPED_FIX, judge_prompts, not_text_problem
from agentrl.api.rules import is_local_path
from agentrl.api.slime_flags import prompt_limit
from agentrl.api.tokenizer_files import VOCABULARY_NAMES, has_vocabulary
from agentrl.bundle.gateway.context import CONFIG_FILE, config_file
from agentrl.bundle.rehearse.report import RehearsalError
from agentrl.bundle.rehearse.slime_argv import read_argv
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec
from agentrl.bundle.rollout.inputs import eval_spec, read_groups, train_spec
from agentrl.slimecmd import PodFacts, Start, compose


@dataclass(frozen=True)
class Options:
    engine: str  # the SGLang server's base URL
    out: Path  # samples.jsonl, report.json, runtime-config.json, rehearse.log
    prompts: int = 1  # the first N rows of the split's data
    samples: int | None = None  # episodes per prompt (default: the split's group size)
    split: str = SPLIT_TRAIN  # "train" or "eval:<name>"
    data: Path | None = None  # a local copy of the split's data file
    model_dir: Path | None = None  # a local copy of the checkpoint (its tokenizer)
    timeout_s: float | None = None  # the episode deadline (default: the agent's timeoutSeconds)
    agent_url: str | None = None  # HTTP agents: where the agent runs now (default: the spec's)
    listen: str = "127.0.0.1"  # the interface the gateway and the callback listener bind
    gateway_port: int = 0  # 0: any free port
    gateway_url: str | None = None  # how agents reach the gateway (e.g. through a tunnel)
    # spec.runtime.env's plain values: the pods' env, which the runtime config leaves out
    pod_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    split: str  # "train" or "eval" (the rollout's metric label)
    label: str  # "train", "eval:web-dev"
    episode: EpisodeSpec
    samples_per_prompt: int
    groups: list[list[EpisodeInput]]
    notes: list[str] = field(default_factory=list)
    # The pods' episode deadline (the agent's timeoutSeconds) where --timeout replaced it.
    pods_timeout_s: float | None = None


def plan_inputs(spec: RLExperimentSpec, options: Options) -> Plan:
    if options.prompts < 1:
        raise RehearsalError(f"--prompts must be at least 1, got {options.prompts}")
    if options.samples is not None and options.samples < 1:
        raise RehearsalError(f"--samples must be at least 1, got {options.samples}")
    if options.timeout_s is not None and options.timeout_s <= 0:
        raise RehearsalError(f"--timeout must be positive, got {options.timeout_s:g}")
    _check_model(spec.model.path, options.model_dir)
    _check_context(spec, options.model_dir, options.pod_env)
    if options.split == SPLIT_TRAIN:
        # slime's args as the pods' command line sets them (`slime_args`), as the rollout
        # reads its sampling parameters from them there.
        episode = train_spec(spec, slime_args(spec))
        size, path, where = spec.grpo.samples_per_prompt, spec.data.train, "spec.data.train"
    elif options.split.startswith(SPLIT_EVAL + ":"):
        name = options.split.split(":", 1)[1]
        sets = {s.name: (i, s) for i, s in enumerate(spec.data.eval)}
        if name not in sets:
            known = ", ".join(f"eval:{n}" for n in sets) or "none: spec.data.eval is empty"
            raise RehearsalError(f"--split eval:{name}: no such eval set (known: {known})")
        i, eval_set = sets[name]
        episode = eval_spec(spec, eval_set)
        size, path, where = eval_set.samples_per_prompt, eval_set.path, f"spec.data.eval[{i}].path"
    else:
        raise RehearsalError(f"--split {options.split}: use train or eval:<name>")
    pods_timeout_s = None
    if options.timeout_s is not None and options.timeout_s != episode.timeout_s:
        pods_timeout_s = episode.timeout_s
        episode = dataclasses.replace(episode, timeout_s=options.timeout_s)
    data = options.data or _local(path, where)
    if not data.is_file():
        raise RehearsalError(f"--data {data}: no such file")
    samples = options.samples or size
    is_train = options.split == SPLIT_TRAIN
    limit = prompt_limit(spec.runtime.extra_args) if is_train else None
    try:
        # The train set as slime's Dataset reads it in the pods; eval sets as the rollout does.
        first = None if limit else options.prompts  # all rows, to drop those slime drops
        groups = read_groups(data, samples, str(data), limit=first, as_train_set=is_train)
    except (OSError, ValueError) as exc:
        raise RehearsalError(f"{where}: {exc}") from None
    lines = _check_rows(data, where)
    notes = []
    if limit is not None:
        model = options.model_dir or spec.model.path
        groups, dropped = _slime_keeps(groups, lines, limit, model, data=data, where=where)
        groups = _first(groups, options.prompts)
        if dropped:
            notes.append(
                f"{dropped} row(s) of {data} have a prompt longer than {limit[0]} tokens "
                f"({limit[1]} in spec.runtime.extraArgs): slime's Dataset drops them in the "
                "pods, and this rehearsal left them out too"
            )
    if len(groups) < options.prompts:
        notes.append(f"{data} holds {len(groups)} row(s); --prompts asked for {options.prompts}")
    if samples != size:
        # The group is GRPO's unit: its statistics, advantages and dynamic-sampling verdict
        # (minValidSamplesPerGroup, the filter) are of its size.
        notes.append(
            f"each group ran {samples} episode(s) (--samples); the pods run {size} per prompt, "
            "so the groups' reward statistics, advantages and dynamic-sampling verdicts here "
            f"are those of groups of {samples}"
        )
    label = options.split
    return Plan(
        SPLIT_TRAIN if label == SPLIT_TRAIN else SPLIT_EVAL, label, episode, samples, groups, notes,
        pods_timeout_s=pods_timeout_s,
    )  # fmt: skip


def slime_args(spec: RLExperimentSpec, experiment: str | None = None) -> SimpleNamespace:
    """slime's args as the pods' command line sets them: the argv the launcher composes
    (`slimecmd.compose`, its pod facts taken as a first run's with nothing from the image),
    read with the table of slime's flags (`slime_argv.read_argv`: each flag under the
    attribute and with the type slime's parser gives it, a store_false flag as its False, an
    nargs "+" flag as a list). slime's own parser and its defaults are not here (slime is not
    installed on this machine): a flag agentrl does not pass is absent, except `reward_key`,
    whose default None every reader of slime's args expects (and `--reward-key` is refused).
    The rollout reads its sampling parameters from these (`inputs.train_spec`), a user's
    dynamic-sampling filter gets them whole."""
    facts = PodFacts(model_args=(), train_env={}, wandb_key=False, start=Start.FIRST_RUN,
                     hf_mode_flag=False, experiment=experiment)  # fmt: skip
    argv = compose(spec, facts).argv()
    first = next(i for i, a in enumerate(argv) if a.startswith("--"))  # after train.py
    return SimpleNamespace(**{"reward_key": None, **read_argv(argv[first:])})


def _slime_keeps(
    groups: list[list[EpisodeInput]],
    lines: list[int],
    limit: tuple[int, str],
    model: Path | str,
    *,
    data: Path,
    where: str,
) -> tuple[list[list[EpisodeInput]], int]:
    """(the groups whose prompt slime's Dataset keeps under extraArgs' prompt length, how many
    it drops), by the launcher's rule (`judge_prompts`), tokens counted with the
    checkpoint's tokenizer; a prompt it cannot count is refused as the launcher refuses it,
    naming the same rows (`lines`: each group's line in `data`)."""
    if not groups or not isinstance(groups[0][0].prompt, str):
        return groups, 0  # slime filters nothing: no tokenizer to load
    # Only with a prompt length set: the tokenizer (and `renderers`) are loaded for it alone.
    from agentrl.bundle.gateway.tokenizer import load_tokenizer

    check_hub_tokenizer(str(model), None)  # a hub id the cache lacks, the hub silent
    tokenizer = load_tokenizer(str(model))
    most, flag = limit

    def count(texts: list[str]) -> list[int]:
        return [len(tokenizer.encode(t, add_special_tokens=False)) for t in texts]

    verdict = judge_prompts([g[0].prompt for g in groups], most, count)
    if verdict is None:
        return groups, 0
    if verdict.not_text:
        raise RehearsalError(not_text_problem(str(data), lines, verdict.not_text, flag))
    if verdict.all_dropped:
        raise RehearsalError(
            f"spec.runtime.extraArgs: {flag}: slime's Dataset drops every row of {where}, each "
            f"with a prompt longer than {most} tokens, and the launcher in the pods refuses "
            f"the file; {ALL_DROPPED_FIX}"
        )
    dropped = verdict.dropped
    kept = [g for i, g in enumerate(groups) if i not in dropped]
    return kept, len(dropped)


def _first(groups: list[list[EpisodeInput]], n: int) -> list[list[EpisodeInput]]:
    """The first `n` groups, numbered again from 0 as the rollout numbers a batch."""
    out, index = [], 0
    for group_index, group in enumerate(groups[:n]):
        renumbered = []
        for inp in group:
            renumbered.append(dataclasses.replace(inp, group_index=group_index, index=index))
            index += 1
        out.append(renumbered)
    return out


def _check_rows(data: Path, where: str) -> list[int]:
    """The rows the launcher checks in the pods, checked the same way: a file it refuses
    (a `question` key for `prompt`, a row without `metadata`) stops the launch after the
    GPUs are scheduled, while the rehearsal would run its episodes without a prompt. The
    rows' line numbers, in file order (blank lines are no rows)."""
    rows: list[tuple[int, object]] = []
    with data.open(encoding=ENCODING, errors=ERRORS) as lines:
        report = judge_rows(lines, rows)
    if report.bad:
        # The rows the launcher lists (the first LISTED_ROWS), then the count it gives.
        listed = "; ".join(f"{data}:{n}: {p}" for n, p in report.bad)
        more = f" (and {report.more} more)" if report.more else ""
        raise RehearsalError(
            f"{where}: {listed}{more}. {ROW_SHAPE}; the launcher in the pods refuses a file "
            "with such a row anywhere in it, after the GPUs are scheduled"
        )
    return [n for n, _ in rows]


def _local(path: str, where: str) -> Path:
    """The spec's data path, if it is readable here; else the flag that supplies it."""
    if "://" in path:
        raise RehearsalError(
            f"{where} is {path!r}, a URI; pass --data with a local copy of the file"
        )
    local = Path(path)
    if not local.is_file():
        raise RehearsalError(
            f"{where} is {path}, which does not exist on this machine (it is a path in the "
            "pods); pass --data with a local copy of the file"
        )
    return local


def _check_model(path: str, model_dir: Path | None) -> None:
    """The tokenizer's checkpoint is readable here: `--model-dir`, a hub id, or a local path
    that holds tokenizer files (transformers' own error for a directory without any blames
    a missing sentencepiece or tiktoken)."""
    if model_dir is not None:
        if not model_dir.is_dir():
            raise RehearsalError(f"--model-dir {model_dir}: no such directory")
        _check_tokenizer_files(model_dir, f"--model-dir {model_dir}")
    elif is_local_path(path):
        if not Path(path).is_dir():
            raise RehearsalError(
                f"spec.model.path is {path}, which does not exist on this machine (it is a path "
                "in the pods); pass --model-dir with a local copy of the checkpoint (its "
                "tokenizer files are enough)"
            )
        _check_tokenizer_files(Path(path), f"spec.model.path {path}")


def check_hub_tokenizer(model_id: str, model_dir: Path | None) -> None:
    """A hub id without `--model-dir`: the gateway loads its tokenizer from the hub, or from
    the Hugging Face cache where the hub does not answer (or HF_HUB_OFFLINE is set); a
    cache without it is said before the gateway starts, with `--model-dir`."""
    if model_dir is not None or is_local_path(model_id):
        return
    from agentrl.bundle.gateway.tokenizer import hub_tokenizer_problem

    problem = hub_tokenizer_problem(model_id)[1]
    if problem is not None:
        raise RehearsalError(
            f"spec.model.path is the Hugging Face id {model_id!r}, and {problem}. Or pass "
            "--model-dir with a local copy of its tokenizer files (hf download "
            f"{model_id} tokenizer.json tokenizer_config.json config.json --local-dir DIR)"
        )


def _check_context(
    spec: RLExperimentSpec, model_dir: Path | None, pod_env: Mapping[str, str]
) -> None:
    """`model.contextLength` against the context SGLang derives from the checkpoint's
    config.json, as the launcher judges it in the pods (`longer_context_problem`): there
    SGLang would refuse to start the engines, after the GPUs are scheduled, while an engine
    started here without `--context-length` runs the rehearsal. Read from `--model-dir`,
    else the spec's path (a local checkpoint, or a hub id's config.json as the gateway
    fetches it); nothing readable, nothing judged."""
    model = spec.model
    if model.context_length is None:
        return
    try:
        config = model_dir / CONFIG_FILE if model_dir is not None else config_file(model.path)
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    where = f"{config} (--model-dir)" if model_dir is not None else f"{model.path}/{CONFIG_FILE}"
    problem = longer_context_problem(model.context_length, doc, where, pod_env)
    if problem is not None:
        raise RehearsalError(f"{problem}; in the pods the engines would not start")


def _check_tokenizer_files(directory: Path, what: str) -> None:
    if has_vocabulary(p.name for p in directory.iterdir() if p.is_file()):
        return
    raise RehearsalError(
        f"{what} holds no tokenizer files ({VOCABULARY_NAMES}); copy them "
        "from the checkpoint, e.g. hf download <hub id> tokenizer.json tokenizer_config.json "
        f"config.json --local-dir {directory}"
    )
