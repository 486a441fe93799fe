"""model.type and the parsers against the supported slime images (agentrl.api.model_names)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ROOT, minimal_body
from tests.support import slime_upstream
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.api import model_names, renderer_families, upstream_names
from agentrl.api.validation import parse_experiment

GENERATOR = ROOT / "hack" / "gen-upstream-names.py"


def test_the_table_is_what_the_pinned_rows_hold() -> None:
    """hack/gen-upstream-names.py --check on each row's slime and (patched) SGLang."""
    rows = [
        f"{row}:{slime_upstream.slime_dir(row)}:{slime_upstream.sglang_source(row)}"
        for row in slime_upstream.ROWS
    ]
    done = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", *rows],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"run {GENERATOR.name} with the rows: {done.stderr}"
    assert tuple(upstream_names.SGLANG_OF_ROW) == slime_upstream.ROWS


def test_every_gateway_parser_reads_an_sglang_name_of_every_row() -> None:
    every = tuple(upstream_names.SGLANG_OF_ROW)
    for theirs, ours, sglang in (
        (model_names.GATEWAY_TOOL_PARSERS, renderer_families.TOOL_PARSERS,
         upstream_names.TOOL_CALL_PARSERS),
        (model_names.GATEWAY_REASONING_PARSERS, renderer_families.REASONING_PARSERS,
         upstream_names.REASONING_PARSERS),
    ):  # fmt: skip
        for name, parser in theirs.items():
            assert sglang[name] == every and parser in ours, (name, parser)


@pytest.mark.parametrize("name", sorted(model_names.GATEWAY_TOOL_PARSERS))
def test_the_gateway_builds_the_default_family_with_sglang_names(tmp_path: Path, name: str) -> None:
    """The examples' `default` + `qwen25` stopped the gateway at start ("Unknown
    tool_parser 'qwen25'")."""
    from agentrl.bundle.gateway.tokenizer import build_renderer, load_tokenizer

    tokenizer = load_tokenizer(str(write_checkpoint(tmp_path)))
    renderer = build_renderer(tokenizer, "default", name, "qwen3")
    assert renderer.supports_tools


def _problems(**model: Any) -> list[str]:
    body = minimal_body(model={"path": "Qwen/Q", "refLoad": "/models/q", **model})
    return [str(p) for p in parse_experiment(body)[1]]


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ({"type": "Qwen3-8B"}, "spec.model.type: 'Qwen3-8B' is not a model type of any "
         "supported slime image (did you mean 'qwen3-8B'?"),
        ({"type": "qwen3-8B", "toolCallParser": "qwen3"}, "spec.model.toolCallParser: 'qwen3' "
         "is not a tool-call parser of any supported slime image (did you mean 'qwen'"),
        ({"type": "qwen3-8B", "reasoningParser": "qwen"}, "spec.model.reasoningParser: 'qwen'"),
        ({"type": "gemma4-12B"}, "warning: spec.model.type: 'gemma4-12B' is a model type of "
         "slime fa3c990 (SGLang 0.5.13) only"),
        ({"type": "qwen3-8B", "rendererFamily": "llama-3", "path": "/models/q"},
         "warning: spec.model.rendererFamily: 'llama-3' is for Llama 3 models; model.type "
         "'qwen3-8B' is a Qwen3 model (use 'qwen3' or 'prime-qwen3')"),
        ({"type": "llama3.1-8B-Instruct", "toolCallParser": "qwen25"},
         "warning: spec.model.toolCallParser: 'qwen25' is for Qwen2.5 and Qwen3 models"),
        ({"type": "qwen2.5-3B", "rendererFamily": "default", "path": "/models/q",
          "toolCallParser": "mistral"}, "spec.model.toolCallParser: with rendererFamily default"),
    ],
)  # fmt: skip
def test_names_are_judged_with_the_nearest_and_the_fit(model: dict[str, Any], words: str) -> None:
    found = _problems(**model)
    assert any(p.startswith(words) for p in found), found


@pytest.mark.parametrize(
    ("model", "words", "hint"),
    [
        ({"type": "qwen2.5-3B", "path": "/models/Qwen2.5-7B-Instruct/"},
         "warning: spec.model.path: 'Qwen2.5-7B-Instruct' names another model than model.type "
         "'qwen2.5-3B'", "set model.type 'qwen2.5-7B'"),
        ({"type": "qwen3-8B", "path": "meta-llama/Llama-3.1-8B-Instruct"},
         "warning: spec.model.path: 'Llama-3.1-8B-Instruct' names another model",
         "set model.type 'llama3.1-8B-Instruct'"),
        ({"type": "qwen3-30B-A3B", "path": "Qwen/Qwen3-30B-A3B", "refLoad": "/ckpt/Qwen3-32B"},
         "warning: spec.model.refLoad: 'Qwen3-32B' names another model", "set model.type "
         "'qwen3-32B'"),
    ],
)  # fmt: skip
def test_a_checkpoint_named_for_another_model_is_a_warning(
    model: dict[str, Any], words: str, hint: str
) -> None:
    """Validation said OK to /models/Qwen2.5-7B-Instruct with model.type qwen2.5-3B: slime
    builds the 3B model and stops loading the 7B weights into it, after the gang is up."""
    found = _problems(**model)
    assert any(p.startswith(words) and hint in p for p in found), found


@pytest.mark.parametrize(
    ("model_type", "path"),
    [
        ("qwen2.5-3B", "/models/Qwen2.5-3B-Instruct"),
        ("qwen3.5-9B", "Qwen/Qwen3.5-9B"),
        ("qwen3-30B-A3B", "/models/Qwen3-30B-A3B-Thinking-2507"),
        ("llama3.1-8B-Instruct", "/models/Meta-Llama-3.1-8B-Instruct"),
        ("glm4.5-106B-A12B", "/models/GLM-4.5-Air"),
        ("gemma4-26B-A4B", "/models/gemma-4-26b-a4b-it"),
        ("qwen3-8B", "/models/my-sft-run"),
        ("deepseek-v3", "/models/DeepSeek-V3-0324"),
    ],
)
def test_a_checkpoint_named_for_its_model_is_fine(model_type: str, path: str) -> None:
    found = _problems(type=model_type, path=path, rendererFamily="default")
    assert not [p for p in found if "names another model" in p], found


def test_an_own_slime_makes_an_unknown_type_a_warning() -> None:
    found = [str(p) for p in parse_experiment(minimal_body(
        model={"path": "Qwen/Q", "refLoad": "/models/q", "type": "my-model"},
        runtime={"slimeDir": "/opt/slime"},
    ))[1]]  # fmt: skip
    assert found and all(p.startswith("warning: spec.model.type") for p in found), found


def test_default_and_generic_names_fit_any_model() -> None:
    assert _problems(type="qwen3-8B", rendererFamily="default", path="/models/q",
                     toolCallParser="hermes") == []  # fmt: skip
