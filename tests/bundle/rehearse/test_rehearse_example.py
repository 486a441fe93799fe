"""docs/rehearse.md, followed: the HTTP-agent example rehearsed from a fresh clone.

The same commands as the walkthrough, with two stand-ins a test needs: the SGLang protocol
stub in place of `python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct`, and
the tiny Qwen-style checkpoint (its tokenizer and chat template) in place of the Qwen2.5
download. The spec, the data, the agent (examples/agents/http_agent.py, unmodified, behind
its bearer token) and the CLI are the ones the walkthrough uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway.tokenizer import load_tokenizer

from .rig import EXAMPLE_AGENT, ROOT, AgentProcess, Model, rehearse, run_agent, start_engine

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "qwen2.5-7b-http-agent-two-evals.yaml"
DATA = ROOT / "examples" / "data" / "web-train.jsonl"
TOKEN = "dev-secret"


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    log = tmp_path_factory.mktemp("agent") / "agent.log"
    yield from run_agent(EXAMPLE_AGENT, log, "--token", TOKEN)


async def test_the_http_example_rehearses_as_the_walkthrough_says(
    tmp_path: Path, agent: AgentProcess
) -> None:
    checkpoint = write_checkpoint(tmp_path / "qwen2.5-7b-instruct")
    model = Model(load_tokenizer(str(checkpoint)))
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        run = await rehearse(
            "-f", EXAMPLE, "--engine", engine.url, "--model-dir", checkpoint, "--data", DATA,
            "--agent-url", agent.url, "--out", tmp_path / "out",
            env={"AGENTRL_HTTP_HEADER_0": f"Bearer {TOKEN}"},
        )  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 0, run.out + run.err + agent.log_tail()
    out = run.out
    # One prompt, the spec's group of 8, each through the chat template and the qwen25 parser.
    assert "rl/qwen7b-web-agent (train): 8 episode(s) in 1 group(s)" in out
    assert out.count(" ok ") == 8 and "results via callback 8" in out
    assert "called in 8 of 8 episode(s)" in out and "[trained " in out
    assert "exit status 0" in out
    # The spec's agent URL, which --agent-url replaced, is named as the pods' and unrehearsed.
    assert run.code == 0 and "episodes to https://agents.example.com/v1/episodes" in out
    for name in ("samples.jsonl", "report.json", "runtime-config.json", "rehearse.log"):
        assert (tmp_path / "out" / name).is_file()
    # The report the walkthrough shows is this one, up to ids, numbers and paths (and the
    # episode rows it elides with "...", which read as the one it shows).
    shown = {_shape(line) for line in _documented_report() if line.strip() != "..."}
    printed = {_shape(line) for line in out.splitlines()}
    assert (sorted(shown - printed), sorted(printed - shown)) == ([], [])


def _documented_report() -> list[str]:
    """The lines of docs/rehearse.md's example report, unindented."""
    text = (ROOT / "docs" / "rehearse.md").read_text(encoding="utf-8")
    block = re.search(r"```\n( *)(agentrl rehearse rl/.*?)```", text, flags=re.S)
    assert block, "docs/rehearse.md shows no report"
    indent = len(block.group(1))
    return [line[indent:] for line in (block.group(1) + block.group(2)).splitlines()]


def _shape(line: str) -> str:
    """A report line with what differs between runs (session ids, ports, token counts,
    seconds, temporary paths) replaced, and column padding collapsed."""
    line = re.sub(r"/\S*/out/", "OUT/", line)
    line = re.sub(r"/\S*/qwen2\.5-7b-instruct\b", "CHECKPOINT", line)  # --model-dir's path
    line = re.sub(r"\b[0-9a-f]{12,}\b", "ID", line)
    return " ".join(re.sub(r"\d+(?:\.\d+)?", "N", line).split())


async def test_without_the_agent_s_header_the_rehearsal_says_which_variable(
    tmp_path: Path, agent: AgentProcess
) -> None:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    model = Model(load_tokenizer(str(checkpoint)))
    engine = await start_engine(model.tok, model.click_then_finish())
    try:
        run = await rehearse("-f", EXAMPLE, "--engine", engine.url, "--model-dir", checkpoint,
                             "--data", DATA, "--agent-url", agent.url, "--out", tmp_path / "out",
                             env={"AGENTRL_HTTP_HEADER_0": ""})  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 2, run.out + run.err
    assert "export AGENTRL_HTTP_HEADER_0=<key bearer of Secret web-agent>" in run.err
