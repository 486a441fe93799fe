"""Every flag agentrl passes exists in each supported slime row, by slime's own parser.

The parser is the one the launcher builds in the pod (`probe.known_flags`), built here from
slime's source at each supported commit, Megatron-LM's at the commit both build with, and
SGLang's release with slime's patches (tests/support/slime_upstream). Nothing here lists
flags by hand: if a release drops a flag agentrl renders, these tests fail for that row.
"""

from __future__ import annotations

import ast

import pytest
from launch_pod import slime_upstream
from launch_trees import example_docs, experiment
from tests.support import upstream
from tests.support.shared import require

from agentrl import slimecmd
from agentrl.bundle.launch import argcheck, probe
from agentrl.slimecmd.checkpoint import FIRST_RUN_FLAGS
from agentrl.slimecmd.compose import HF_MODE_FLAG, wandb_args

ROWS = slime_upstream.ROWS
DOCS = example_docs()
_KNOWN: dict[str, frozenset[str]] = {}


def known(row: str) -> frozenset[str]:
    if row not in _KNOWN:
        flags = probe.known_flags(slime_upstream.env(row))
        assert flags is not None, f"slime {row} did not import"
        _KNOWN[row] = flags
    return _KNOWN[row]


def test_the_pins_name_the_sglang_release_of_every_row() -> None:
    """hack/setup.sh fetches the SGLang releases images/upstream.toml names: each row's."""
    slime_upstream.require_upstream()
    pinned = upstream.sglang_pin()["versions"]
    for row in ROWS:
        assert slime_upstream.sglang_version(row) in pinned, row  # type: ignore[operator]


@pytest.mark.parametrize("row", ROWS)
def test_the_parser_is_slimes_own(row: str) -> None:
    """Flags from each source: Megatron, slime, SGLang (through slime's --sglang- prefix)."""
    flags = known(row)
    assert {"--tensor-model-parallel-size", "--no-load-optim", "--finetune"} <= flags  # Megatron
    assert {"--rollout-function-path", "--ref-load", "--custom-config-path"} <= flags  # slime
    assert {"--sglang-mem-fraction-static", "--sglang-tool-call-parser"} <= flags  # SGLang
    assert "--sglang-model-path" not in flags  # slime skips the server args it sets itself
    assert "--use-dynamic-global-batch-size" not in flags  # removed from slime (#1933)


def test_the_rows_differ_in_megatron_to_hf_mode() -> None:
    """Why the launcher adapts: fa3c990 defines the flag, 624b824 dropped it."""
    assert HF_MODE_FLAG in known("fa3c990")
    assert HF_MODE_FLAG not in known("624b824")


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("name", sorted(DOCS))
@pytest.mark.parametrize("start", list(slimecmd.Start))
def test_every_passed_flag_exists(row: str, name: str, start: slimecmd.Start) -> None:
    flags = known(row)
    spec = experiment(DOCS[name]).spec
    model = probe.model_args(str(slime_upstream.slime_dir(row)), spec.model.type)
    cmd = slimecmd.compose(
        spec,
        slimecmd.PodFacts(
            model_args=model,
            train_env={"CUDA_HOME": "/usr/local/cuda"},
            wandb_key=True,
            start=start if spec.checkpoint.path else slimecmd.Start.FIRST_RUN,
            hf_mode_flag=HF_MODE_FLAG in flags,
        ),
    )
    assert cmd.resolved
    assert argcheck.unknown_flags(cmd.parts, flags) == []
    argv = cmd.argv()
    assert (HF_MODE_FLAG in argv) == (row == "fa3c990")
    if start is slimecmd.Start.FIRST_RUN:
        assert set(FIRST_RUN_FLAGS) <= set(argv) and "--load" not in argv


@pytest.mark.parametrize("row", ROWS)
def test_every_flag_of_the_preview_exists_where_it_can_be_passed(row: str) -> None:
    """The preview's flags (every condition shown) exist, but for the one the launcher drops
    where the row lacks it."""
    flags = known(row)
    for name, doc in DOCS.items():
        cmd = slimecmd.compose(experiment(doc).spec, slimecmd.PodFacts())
        bad = [f for f, _ in argcheck.unknown_flags(cmd.parts, flags)]
        assert bad == ([] if row == "fa3c990" else [HF_MODE_FLAG]), (name, bad)


@pytest.mark.parametrize("row", ROWS)
def test_wandb_names_the_run_and_group_after_the_experiment(row: str) -> None:
    """slime's own W&B start on agentrl's flags: the run and its group are `<namespace>/<name>`
    (no random suffix, so a retry's run lands in the same group under the same name), and a
    spec's own group names both."""
    body = DOCS["qwen2.5-3b-gsm8k-agentcore"]
    spec = experiment(body).spec
    assert spec.tracking.wandb is not None and spec.tracking.wandb.group is None
    flags = wandb_args(spec, "team-a/gsm8k")
    got = slime_upstream.slime_wandb(row, flags)
    assert got == {"entity": spec.tracking.wandb.team, "project": spec.tracking.wandb.project,
                   "group": "team-a/gsm8k", "name": "team-a/gsm8k"}  # fmt: skip
    # What agentrl passed before: no group, suffix on. slime fails on it.
    old = [f for f in flags if f != "--disable-wandb-random-suffix"]
    del old[old.index("--wandb-group") : old.index("--wandb-group") + 2]
    assert "TypeError" in str(slime_upstream.slime_wandb(row, old).get("error"))
    sweep = spec.model_copy(update={"tracking": spec.tracking.model_copy(update={
        "wandb": spec.tracking.wandb.model_copy(update={"group": "lr-sweep"})})})  # fmt: skip
    got = slime_upstream.slime_wandb(row, wandb_args(sweep, "team-a/gsm8k"))
    assert (got["group"], got["name"]) == ("lr-sweep", "lr-sweep")


@pytest.mark.parametrize("row", ROWS)
def test_slime_turns_on_sglangs_metrics_itself(row: str) -> None:
    """Every engine slime starts serves /metrics (what /engine-metrics relays): the row's own
    server-args builder sets `enable_metrics: True` in the dict it fills `--sglang-*` values
    into only where a key is missing, so the flag could neither add nor remove it."""
    source = slime_upstream.slime_dir(row) / "slime/backends/sglang_utils/sglang_engine.py"
    require(source, f"slime {row}'s sglang_engine.py")
    tree = ast.parse(source.read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    (builder,) = [f for f in functions if f.name == "_compute_server_args"]
    pinned = {
        (key.value, value.value)
        for node in ast.walk(builder) if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and isinstance(value, ast.Constant)
    }  # fmt: skip
    assert ("enable_metrics", True) in pinned
    text = ast.unparse(builder)
    assert "attr.name not in kwargs" in text  # --sglang-* fills only keys not yet set
