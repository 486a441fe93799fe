"""`agentrl rehearse` with an AgentCore agent: the released agentcore-rl-toolkit app, end to end.

The agent is the toolkit math app the AgentCore backend's tests run (bedrock-agentcore's
server, a process of its own), behind the data-plane stand-in those tests use
(tests/support/agentcore_dataplane.py); S3 is moto's server. `agentrl rehearse` reaches both
the way a user's boto3 would be pointed elsewhere: `AWS_ENDPOINT_URL_BEDROCK_AGENTCORE` and
`AWS_ENDPOINT_URL_S3`, with the user's credentials in the environment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from tests.support.agentcore_app import CREDENTIALS, REGION, AgentApp, keys, moto_s3, toolkit_app
from tests.support.agentcore_dataplane import AgentCoreDataPlane
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.bundle.gateway.tokenizer import load_tokenizer

from .rig import ROOT, Model, rehearse, spec, start_engine, write

pytestmark = pytest.mark.slow

APP = ROOT / "tests" / "bundle" / "agents" / "toolkit_math_agent.py"
ARN = f"arn:aws:bedrock-agentcore:{REGION}:123456789012:runtime/math_agent-AbCdEf1234"
BUCKET = "rl-results"


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_s3(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def app(s3_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentApp]:
    with toolkit_app(APP, s3_url, tmp_path_factory.mktemp("app") / "app.log") as running:
        yield running


@pytest.fixture
async def plane(app: AgentApp) -> AsyncIterator[AgentCoreDataPlane]:
    stand_in = AgentCoreDataPlane(ARN, REGION, app.url)
    await stand_in.start()
    try:
        yield stand_in
    finally:
        await stand_in.stop()


def math_row(answer: str, behaviour: str = "solve") -> dict[str, Any]:
    question = "What is 6 times 7?"
    return {
        "prompt": question,
        "metadata": {"prompt": question, "answer": answer, "behaviour": behaviour},
    }


async def test_the_toolkit_app_rehearses_through_agentcore_and_s3(
    tmp_path: Path, s3_url: str, app: AgentApp, plane: AgentCoreDataPlane
) -> None:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    model = Model(load_tokenizer(str(checkpoint)))
    engine = await start_engine(model.tok, lambda prompt, _: model.say("6 times 7 is 42.\n#### 42"))
    agent = {
        "agentCore": {"runtimeArn": ARN, "region": REGION, "s3Bucket": BUCKET,
                      "timeoutSeconds": 60},
        "maxConcurrent": 8,
    }  # fmt: skip
    rows = [math_row("42"), math_row("41"), math_row("42", behaviour="raise")]
    spec_path, data = write(tmp_path, spec(agent, samples=2), rows)
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3_url,
           "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": plane.url}  # fmt: skip
    try:
        run = await rehearse("-f", spec_path, "--engine", engine.url, "--model-dir", checkpoint,
                             "--data", data, "--prompts", 3, "--out", tmp_path / "out",
                             "-o", "json", env=env)  # fmt: skip
    finally:
        await engine.stop()
    assert run.code == 1, run.out + run.err + app.log_tail()  # the third prompt's agent raised
    episodes = run.episodes()
    by_group = [[e for e in episodes if e["group"] == g] for g in range(3)]
    for e in by_group[0] + by_group[1]:
        assert e["status"] == "ok" and e["result_via"] == "s3" and e["model_calls"] == 1
        assert e["callback_url"] is None  # AgentCore results come through S3, not a callback
    assert [e["reward"] for e in by_group[0]] == [1.0, 1.0]  # the toolkit's reward function
    assert [e["reward"] for e in by_group[1]] == [0.0, 0.0]  # a wrong ground truth: 0, no failure
    for e in by_group[2]:
        assert e["reason"] == "agent_error" and "calculator tool crashed" in e["message"]
        assert e["reward_received"] == {"value": None, "type": "null"}  # the toolkit's error doc
    # Every episode's runtime session was stopped, and the results are where the pods read them.
    assert sorted(plane.stopped) == sorted(e["session_id"] for e in episodes)
    s3 = boto3.client("s3", endpoint_url=s3_url, region_name=REGION, **keys())
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="agentrl/rl/web-agent/")
    assert len(listed.get("Contents", [])) == 6
