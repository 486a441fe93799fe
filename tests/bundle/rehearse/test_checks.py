"""The rehearsal's own checks, one by one, on what a gateway session records.

The CLI tests (test_rehearse_http.py) show each mistake named end to end; here each way a
check can fire, and each way it must not, with the gateway's real renderers and parsers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway.tokenizer import load_renderer
from agentrl.bundle.rehearse.checks import (
    CALLBACK,
    CONTEXT,
    TOOL_CALLS,
    ToolCallCheck,
    callback_findings,
    context_findings,
)
from agentrl.bundle.rehearse.observe import Seen
from agentrl.bundle.traces import Turn

HERMES = '<tool_call>\n{"name": "click", "arguments": {"text": "buy"}}\n</tool_call>'
XML = (
    "<tool_call>\n<function=click>\n<parameter=text>\nbuy\n</parameter>\n</function>\n</tool_call>"
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


def check(checkpoint: Path, family: str, parser: str | None = None) -> ToolCallCheck:
    tok, renderer = load_renderer(str(checkpoint), family, parser)
    return ToolCallCheck(renderer, tok, f"rendererFamily {family}")


def turn(tok: Any, text: str, finish: str = "stop") -> Turn:
    ids = [*tok.encode(text, add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
    return Turn([1, 2, 3], ids, [-0.1] * len(ids), finish)


def test_a_call_the_parser_reads_is_no_failure(checkpoint: Path) -> None:
    qwen3 = check(checkpoint, "qwen3")
    assert qwen3.failures([turn(qwen3.tokenizer, HERMES), turn(qwen3.tokenizer, "done")]) == (0, [])


def test_a_call_in_another_format_is_a_failure_with_its_parse_status(checkpoint: Path) -> None:
    qwen3 = check(checkpoint, "qwen3")
    count, (finding,) = qwen3.failures([turn(qwen3.tokenizer, XML)] * 2)
    assert count == 2 and finding.check == TOOL_CALLS
    assert "turn 1: invalid_json" in finding.message and "rendererFamily qwen3" in finding.message


def test_markup_a_parser_never_looked_for_names_the_parser_that_reads_it(
    checkpoint: Path,
) -> None:
    """The chat-template family without a tool parser (`auto`'s fallback before it got one)
    finds no call at all; the check names the format that does read it."""
    plain = check(checkpoint, "default")
    count, (finding,) = plain.failures([turn(plain.tokenizer, HERMES)])
    assert count == 1
    assert "a tool call in the 'qwen3' format" in finding.message and "click" in finding.message


def test_a_completion_cut_by_length_is_the_cut_s_doing(checkpoint: Path) -> None:
    qwen3 = check(checkpoint, "qwen3")
    assert qwen3.failures([turn(qwen3.tokenizer, HERMES[:30], finish="length")]) == (0, [])


def test_the_context_check_fires_on_each_way_the_gateway_meets_a_full_context() -> None:
    full = Seen(context_full=2)
    ((finding,),) = [list(context_findings(full, 4096))]
    assert (
        finding.check == CONTEXT
        and "2 model call(s)" in finding.message
        and "4096" in finding.message
    )
    refused = Seen(refusals={"context_length_exceeded": 1}, last_refusal="engine: too long")
    assert "engine: too long" in next(context_findings(refused, None)).message
    edge = Seen(turns=[Turn([0] * 90, [5] * 10, None, "length")])
    assert "turn 1 was cut at the edge" in next(context_findings(edge, 100)).message
    # Not at the edge, or no context known: a response budget, not the context.
    assert list(context_findings(Seen(turns=[Turn([0] * 10, [5] * 10, None, "length")]), 100)) == []
    assert list(context_findings(edge, None)) == []
    assert list(context_findings(Seen(refusals={"400": 3}), 100)) == []


def test_only_a_result_by_poll_is_an_unreachable_callback() -> None:
    url = "http://gw/agentrl/callback/s1"
    (finding,) = callback_findings(Seen(via="poll"), url)
    assert finding.check == CALLBACK and url in finding.message
    assert [*callback_findings(Seen(via="callback"), url), *callback_findings(Seen(), url)] == []
