"""The flags agentrl's rollout cannot honour, judged with slime's own code at each row.

- Every flag the policy names is one the row's own parser defines (so no rule is stale), and
  the value the policy reads is the one slime's parse_args ends up with.
- Refused flags: a group of samples exactly as agentrl's rollout returns them goes through
  the slime code that reads them after the rollout (tests/support/upstream_site/slime_run.py,
  `"samples": true`), and with each refused flag slime raises there; without it, it does not.
- Unhonoured flags: nothing on agentrl's path through slime reads them; only slime's own
  rollout, reward-model and eval-dataset code does (read from the row's source).
- The launcher refuses, and warns, naming the flag, its origin and the fix.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from launch_pod import Pod, slime_upstream

from agentrl.api.runtime import RuntimeConfig
from agentrl.api.slime_flags import DATA_KEY_FLAGS
from agentrl.bundle.gateway import GatewaySettings
from agentrl.slimecmd import Part, policy

ROWS = slime_upstream.ROWS
# slime's own rollout, reward-model and eval-dataset code: what agentrl's rollout replaces.
# Everything else under slime/ is on agentrl's path (the RolloutManager, the data source, the
# trainer, the SGLang engines, metrics), apart from arguments.py, which defines and checks.
SLIMES_OWN = (
    "slime/rollout/sglang_rollout.py",
    "slime/rollout/sglang_streaming_rollout.py",
    "slime/rollout/fully_async_rollout.py",
    "slime/rollout/sft_rollout.py",
    "slime/rollout/sleep_rollout.py",
    "slime/rollout/forge_load.py",
    "slime/rollout/on_policy_distillation.py",
    "slime/rollout/rm_hub/",
    "slime/rollout/filter_hub/",
    "slime/utils/eval_config.py",  # defaults of slime's own eval datasets
)
DEFINES = "slime/utils/arguments.py"
# Read on agentrl's path, but only to log (none today: --n-samples-per-eval-prompt, which
# slime's eval logging groups agentrl's eval rewards by for pass@k, is refused in extraArgs).
LOGGED_ONLY: dict[str, set[str]] = {}
# The step of slime's own code each refused flag fails (slime_run's sample readers).
FAILS_AT = {
    "--rollout-top-p": (["--rollout-top-p", "0.9"], "top_p_replay", "ValueError: rollout_top_p"),
    "--use-rollout-routing-replay": (
        ["--use-rollout-routing-replay"],
        "routing_replay",
        "ValueError: rollout_routed_experts is required",
    ),
    "--reward-key": (["--reward-key", "score"], "zero_std_metric", "TypeError: 'float' object"),
    "--log-passrate": (
        ["--log-passrate"],
        "passrate",
        "AssertionError: len(flat_rewards)=5 num_groups=1 group_size=4",
    ),
    "--opd-type": (
        ["--use-opd", "--opd-type", "sglang"],
        "opd",
        "ValueError: OPD with opd_type='sglang' requires teacher_log_probs",
    ),
}
# Refused flags slime stops on in its trainer's tensor code, which needs the real torch:
# shown on a train step of agentrl's rollout by the test named.
FAILS_IN_THE_TRAINER = {
    "--advantage-estimator": "tests/bundle/rollout/test_train_data_upstream.py",
}
MENTIONED = ("--use-routing-replay", "--use-opd", "--opd-teacher-load")


@cache
def _sources(row: str) -> dict[str, str]:
    root = slime_upstream.slime_dir(row)
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((root / "slime").rglob("*.py"))
    }


def readers(row: str, flag: str) -> set[str]:
    """The modules of the row's slime that read the attribute the flag sets."""
    dest = slime_upstream.parser_dests(row)[flag]
    pattern = re.compile(rf"\.{dest}\b|[\"']{dest}[\"']")
    return {path for path, text in _sources(row).items() if pattern.search(text)} - {DEFINES}


def _slimes_own(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in SLIMES_OWN)


def test_the_policy_covers_every_refused_flag_here() -> None:
    assert not set(FAILS_AT) & set(FAILS_IN_THE_TRAINER)
    assert set(FAILS_AT) | set(FAILS_IN_THE_TRAINER) == {r.flag for r in policy.REFUSALS}
    root = Path(__file__).resolve().parents[3]
    for flag, test in FAILS_IN_THE_TRAINER.items():
        assert flag in (root / test).read_text(encoding="utf-8")


@pytest.mark.parametrize("row", ROWS)
def test_every_flag_the_policy_names_is_slimes(row: str) -> None:
    dests = slime_upstream.parser_dests(row)
    named = [r.flag for r in policy.REFUSALS] + [u.flag for u in policy.UNHONOURED]
    assert [f for f in [*named, *MENTIONED] if f not in dests] == []


@pytest.mark.parametrize("row", ROWS)
def test_refused_flags_are_read_on_agentrls_path(row: str) -> None:
    for rule in policy.REFUSALS:
        on_path = {p for p in readers(row, rule.flag) if not _slimes_own(p)}
        assert on_path, f"{rule.flag}: nothing on agentrl's path reads it at {row}"


@pytest.mark.parametrize("row", ROWS)
def test_unhonoured_flags_are_read_only_by_slimes_own_rollout(row: str) -> None:
    for rule in policy.UNHONOURED:
        on_path = {p for p in readers(row, rule.flag) if not _slimes_own(p)}
        assert on_path <= LOGGED_ONLY.get(rule.flag, set()), (rule.flag, on_path)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_slime_fails_on_agentrls_samples_with_each_refused_flag(row: str, tmp_path: Path) -> None:
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    extras = [[], *(flags for flags, _, _ in FAILS_AT.values())]
    extras.append(["--rollout-top-p", "0.9", "--rollout-top-p=1.0"])  # argparse keeps 1.0
    cases = [{"argv": [*argv, *extra], "env": env, "samples": True} for extra in extras]
    base, *refused, last_value = slime_upstream.run_slime(row, cases)

    assert set(base["samples"].values()) == {"ok"}, base
    assert set(last_value["samples"].values()) == {"ok"}, last_value
    for (flag, (extra, step, error)), result in zip(FAILS_AT.items(), refused, strict=True):
        assert "parse_error" not in result, (flag, result.get("trace"))
        assert result["samples"][step].startswith(error), (flag, result["samples"])
        messages = policy.refusals([Part("spec.runtime.extraArgs", tuple(extra))])
        assert [m.split(" (from ")[0].split()[0] for m in messages] == [flag]
    assert policy.refusals([]) == []


@pytest.mark.slow
def test_the_launcher_refuses_before_slime_starts(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=["--rollout-top-p", "0.9", "--reward-key", "score"])
    done = pod.launch()
    assert done.returncode == 2
    assert "--rollout-top-p 0.9 (from spec.runtime.extraArgs) cannot work" in done.stderr
    assert "--reward-key score (from spec.runtime.extraArgs) cannot work" in done.stderr
    assert not pod.record.exists()


@pytest.mark.slow
def test_the_launcher_warns_about_flags_only_slimes_rollout_reads(tmp_path: Path) -> None:
    pod = Pod(tmp_path, extra_args=["--rollout-top-k", "5", "--eval-top-p", "0.9"])
    done = pod.launch()
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "has no effect" in line]
    assert len(warnings) == 2
    assert "--rollout-top-k" in warnings[0] and "spec.grpo" in warnings[0]
    assert "--eval-top-p" in warnings[1] and "spec.data.eval" in warnings[1]


@pytest.mark.parametrize("row", ROWS)
def test_every_flag_refused_in_extra_args_and_every_data_key_flag_is_slimes(row: str) -> None:
    dests = slime_upstream.parser_dests(row)
    named = [*policy.REPLACED, *policy.DATA_CONTRACT, *policy.HOOKS, *sorted(DATA_KEY_FLAGS)]
    assert [f for f in named if f not in dests] == []


_DP_SCHEDULE = r"""
import json
from types import SimpleNamespace
from slime.utils.dp_schedule import build_dp_schedule
args = SimpleNamespace(micro_batch_size=1, use_dynamic_batch_size=True, max_tokens_per_gpu=4096,
                       balance_data=False, balance_by_flops=False)
cfg = {"dp_size": 1, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
out = {}
for gbs in (16, 12, 32):
    try:
        parts, _, _, steps = build_dp_schedule(args, cfg, [10] * 16, global_batch_size=gbs,
                                               rollout_indices=list(range(16)))
        out[str(gbs)] = sum(len(p) for p in parts)
    except AssertionError as e:
        out[str(gbs)] = "AssertionError: " + str(e)
print(json.dumps(out))
"""


@pytest.mark.parametrize("row", ROWS)
def test_slime_trains_global_batch_size_episodes_per_step(row: str) -> None:
    """A rollout of 16 episodes (4 prompts x 4, as the spec renders): slime's own schedule
    trains all 16 with the spec's --global-batch-size 16, silently drops 4 with an extraArgs
    --global-batch-size 12 (or --n-samples-per-prompt 3 against a rendered 16...), and stops
    with 32: why the three batch flags are refused in extraArgs."""
    trained = slime_upstream._run_site(row, ["-c", _DP_SCHEDULE])
    assert trained["16"] == 16 and trained["12"] == 12
    assert str(trained["32"]).startswith("AssertionError: num_rollouts (16) < global_batch_size")
    for flag in ("--global-batch-size", "--n-samples-per-prompt", "--rollout-batch-size"):
        (message,) = policy.refusals([Part("spec.runtime.extraArgs", (flag, "3"))])
        assert "Fix: remove it and set spec.grpo." in message


_DATASET = r"""
import json, sys
from transformers import AutoTokenizer
from slime.utils.data import Dataset
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = {}
for name, kw in {"rendered": {}, "--input-key": {"prompt_key": "question"},
                 "--metadata-key": {"metadata_key": "meta"},
                 "--tool-key": {"tool_key": "fns"},
                 "--apply-chat-template": {"apply_chat_template": True}}.items():
    kw = {"prompt_key": "prompt", "metadata_key": "metadata", "tool_key": "tools", **kw}
    s = Dataset(sys.argv[2], tok, None, None, **kw).samples[0]
    out[name] = {"prompt": s.prompt, "metadata": s.metadata}
print(json.dumps(out))
"""


@pytest.mark.parametrize("row", ROWS)
def test_slimes_dataset_with_the_data_contract_flags(row: str, tmp_path: Path) -> None:
    """slime's own Dataset on a train row: with agentrl's flags it hands the rollout the
    row's `prompt` and `metadata`, as `agentrl rehearse` reads them (read_groups); each
    refused flag hands it something else, and --apply-chat-template the prompt's chat-template
    text, which the gateway would template again as the agent's user message."""
    from tests.support.tiny_tokenizer import write_checkpoint

    from agentrl.bundle.rollout.inputs import read_groups

    ckpt = write_checkpoint(tmp_path / "tok")
    rows = tmp_path / "train.jsonl"
    row_ = {"prompt": "What is 6*7?", "question": "Q?", "metadata": {"t": 1}, "meta": {"t": 2},
            "tools": [{"name": "calc"}], "fns": [{"name": "web"}]}  # fmt: skip
    rows.write_text(json.dumps(row_) + "\n", encoding="utf-8")
    got = slime_upstream._run_site(row, ["-c", _DATASET, str(ckpt), str(rows)])
    ((rehearsed,),) = read_groups(rows, 1, "spec.data.train", as_train_set=True)
    assert got["rendered"] == {"prompt": rehearsed.prompt, "metadata": rehearsed.metadata}
    assert got["--input-key"]["prompt"] != rehearsed.prompt
    assert got["--metadata-key"]["metadata"] != rehearsed.metadata
    assert rehearsed.metadata["tools"] == [{"name": "calc"}]
    assert got["--tool-key"]["metadata"]["tools"] == [{"name": "web"}]
    templated = got["--apply-chat-template"]["prompt"]
    assert templated.endswith("<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n")
    for flag in policy.DATA_CONTRACT:
        (message,) = policy.refusals([Part("spec.runtime.extraArgs", (flag,))])
        assert "`prompt`" in message and "`metadata`" in message


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_slime_ignores_num_epoch_and_stops_on_num_steps_per_rollout(
    row: str, tmp_path: Path
) -> None:
    """slime's own parse_args on the launcher's argv: an extraArgs --num-epoch is ignored (the
    run still has the spec's numRollouts: the user asked for epochs and got something else,
    silently), and --num-steps-per-rollout that does not match the rendered global batch
    stops slime at start; both are refused, naming the spec field."""
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    extras = [[], ["--num-epoch", "3"], ["--num-steps-per-rollout", "3"]]
    base, epochs, steps = slime_upstream.run_slime(
        row, [{"argv": [*argv, *extra], "env": env} for extra in extras]
    )
    grpo = pod.exp.spec.grpo
    assert base["args"]["num_rollout"] == grpo.num_rollouts
    assert "parse_error" not in epochs and epochs["args"]["num_rollout"] == grpo.num_rollouts
    assert base["args"]["global_batch_size"] == grpo.effective_global_batch_size
    assert "global_batch_size" in steps["parse_error"] and "is not equal" in steps["parse_error"]
    for flag, field in (("--num-epoch", "numRollouts"), ("--num-steps-per-rollout", "global")):
        (message,) = policy.refusals([Part("spec.runtime.extraArgs", (flag, "3"))])
        assert f"Fix: remove it and set spec.grpo.{field}" in message


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_an_extra_args_context_length_is_the_one_slime_s_engines_get(
    row: str, tmp_path: Path
) -> None:
    """slime's own parse_args on the launcher's argv: an extraArgs --sglang-context-length is
    what slime starts every engine with, whatever spec.model.contextLength says, while the
    gateway caps each call by the spec's context (the one the launcher and `agentrl
    rehearse` judge). A rehearsal against an engine at the spec's context passed; in
    training the engines refused the calls the gateway let through past 1024 tokens."""
    pod = Pod(tmp_path, row=row)
    argv, env = pod.launched()
    extra = ["--sglang-context-length", "1024"]
    base, overridden = slime_upstream.run_slime(
        row,
        [{"argv": a, "env": env, "engine": True} for a in (argv, [*argv, *extra])],
    )
    # What slime hands SGLang's ServerArgs for engine 0 (None: SGLang reads config.json).
    assert base["engine"]["context_length"] == pod.exp.spec.model.context_length
    got = overridden["engine"]["context_length"]
    # fa3c990's SGLang converts the value with sglang.srt.utils' human_readable_int, which is
    # a stand-in here (no GPU stack): what reaches ServerArgs is then the stand-in's result.
    assert got == 1024 or "human_readable_int" in str(got), got
    config = RuntimeConfig.load(pod.config_path)
    settings = GatewaySettings.from_runtime_config(config, "http://router:1")
    assert settings.context_length == pod.exp.spec.model.context_length  # not 1024
    (message,) = policy.refusals([Part("spec.runtime.extraArgs", tuple(extra))])
    assert "Fix: remove it and set spec.model.contextLength" in message
