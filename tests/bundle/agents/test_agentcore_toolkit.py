"""agentrl's AgentCore backend against the released agentcore-rl-toolkit app, end to end.

Everything that can run here is the real thing:
- the agent is `toolkit_math_agent.py`, an `AgentCoreRLApp` with `@app.rollout_entrypoint`
  from agentcore-rl-toolkit 0.2.0 (PyPI), served by bedrock-agentcore's own HTTP server in a
  process of its own, as in an AgentCore runtime container;
- it calls the model through agentrl's real gateway (the hub's production wiring) in front
  of the protocol-level SGLang stub, so its turns become training samples;
- S3 is moto's server on a socket, which the app (boto3, `AWS_ENDPOINT_URL_S3`) and the
  backend both use;
- the backend calls AgentCore through boto3's `bedrock-agentcore` client.
The one imitation is AgentCore's data plane (tests/support/agentcore_dataplane.py), which
forwards invocations to the app as the service does; test_agentcore_dataplane.py shows that
botocore's service model agrees with it.

No timing assertions: the agent's episodes take real (sub-second) time, deadlines are
generous except where a timeout is the point, and waits for asynchronous effects (a
shielded stop landing) are bounded waits on a condition.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
import stamina
from tests.support.agentcore_app import (
    CREDENTIALS,
    REGION,
    AgentApp,
    keys,
    moto_s3,
    toolkit_app,
)
from tests.support.agentcore_dataplane import AgentCoreDataPlane
from tests.support.process import free_port
from tests.support.retries import scheduled_retries
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.api.models import AgentCoreAgent
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.agents.agentcore import (
    INVOKE_ATTEMPTS,
    AgentCoreBackend,
    experiment_id,
    input_id,
    make_clients,
    result_key,
    with_rollout_fields,
)
from agentrl.bundle.agents.ratelimit import TpsLimiter
from agentrl.bundle.gateway import GatewayClient
from agentrl.bundle.gateway.tokenizer import load_tokenizer
from agentrl.bundle.hub import Hub
from agentrl.bundle.rollout.batch import RolloutContext, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeSpec, run_episode

AGENT_APP = Path(__file__).with_name("toolkit_math_agent.py")
ARN = f"arn:aws:bedrock-agentcore:{REGION}:123456789012:runtime/math_agent-AbCdEf1234"
BUCKET = "rl-results"
EXP = experiment_id("ns", "math")
REPLY = "6 times 7 is 42.\n#### 42"  # what the stub model answers, whatever it is asked
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 32}


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_s3(BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def agent_app(s3_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentApp]:
    """The toolkit app in its own process, as AgentCore runs it (one container)."""
    with toolkit_app(AGENT_APP, s3_url, tmp_path_factory.mktemp("agent") / "agent.log") as app:
        yield app


@pytest.fixture
async def dataplane(agent_app: AgentApp) -> AsyncIterator[AgentCoreDataPlane]:
    plane = AgentCoreDataPlane(ARN, REGION, agent_app.url)
    await plane.start()
    try:
        yield plane
    finally:
        await plane.stop()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    """agentrl's model gateway, started the way the hub actor starts it in the pod."""
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    tok = load_tokenizer(str(checkpoint))
    reply = [*tok.encode(REPLY), tok.convert_tokens_to_ids("<|im_end|>")]
    engine = StubEngine(vocab_size=len(tok.get_vocab()), responder=lambda p, s: list(reply))
    router = StubRouter([await engine.start()])
    await router.start()
    port = free_port()
    config = RuntimeConfig.model_validate(
        {
            "experiment": "math",
            "namespace": "ns",
            "bundleVersion": "test",
            "gatewayUrl": f"http://127.0.0.1:{port}",
            "spec": {
                "model": {
                    "path": str(checkpoint),
                    "type": "qwen2.5-0.5B",
                    "rendererFamily": "qwen3",
                },
                "data": {"train": "/data/train.jsonl"},
                "agent": {
                    "agentCore": {"runtimeArn": ARN, "region": REGION, "s3Bucket": BUCKET},
                    "maxConcurrent": 8,
                },
                "grpo": {
                    "numRollouts": 2,
                    "rolloutBatchSize": 2,
                    "samplesPerPrompt": 2,
                    "maxResponseLength": 64,
                },
                "gateway": {"port": port, "cumulativeTokenMode": True},
            },
        }
    )
    hub = Hub(config.to_json(), "127.0.0.1", 0, gateway_host="127.0.0.1")
    admin_url, token = await hub.start_gateway(router.url)
    client = GatewayClient(admin_url, token)
    try:
        yield client
    finally:
        await client.aclose()
        await hub.stop()
        await router.stop()
        await engine.stop()


@pytest.fixture
async def backend(
    dataplane: AgentCoreDataPlane, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AgentCoreBackend]:
    """Production's clients: boto3 finds S3 through AWS_ENDPOINT_URL_S3, AgentCore at the
    stand-in's endpoint (as at a VPC endpoint)."""
    for var, value in CREDENTIALS.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_url)
    spec = AgentCoreAgent(runtimeArn=ARN, region=REGION, s3Bucket=BUCKET, timeoutSeconds=120)
    be = AgentCoreBackend(
        spec,
        exp_id=EXP,
        pool_size=8,
        clients=make_clients(spec, pool_size=8, endpoint_url=dataplane.url),
        limiter=TpsLimiter(1000.0),
    )
    try:
        yield be
    finally:
        await be.aclose()


def s3(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, region_name=REGION, **keys())


def row(prompt: str, answer: str, behaviour: str = "solve") -> dict[str, Any]:
    return {"prompt": prompt, "answer": answer, "behaviour": behaviour}


def groups_of(*rows: dict[str, Any], n: int = 1) -> list[list[EpisodeInput]]:
    return [
        [EpisodeInput(r["prompt"], r, r["answer"], g, n * g + i) for i in range(n)]
        for g, r in enumerate(rows)
    ]


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """agentrl's log records (not moto's server, which logs every S3 request)."""
    return [r for r in caplog.records if r.name.startswith("agentrl")]


def payload_of(plane: AgentCoreDataPlane, sid: str) -> dict[str, Any]:
    (inv,) = [i for i in plane.invocations if i.session_id == sid and i.app_status]
    return dict(json.loads(inv.payload))


def test_the_toolkit_release_is_the_one_the_contract_was_read_from() -> None:
    """docs/agents.md describes agentcore-rl-toolkit 0.2.0, read from its source; a newer
    release must be read again (and this pin moved) before agentrl claims to speak it."""
    assert importlib.metadata.version("agentcore-rl-toolkit") == "0.2.0"


async def test_rewards_from_the_released_toolkit_app_reach_the_samples(
    gateway: GatewayClient,
    backend: AgentCoreBackend,
    dataplane: AgentCoreDataPlane,
    s3_url: str,
    agent_app: AgentApp,
) -> None:
    ctx = RolloutContext(gateway, backend, asyncio.Semaphore(4))
    spec = EpisodeSpec(SAMPLING, 256, 120.0, "agentrl")
    right, wrong = row("What is 6*7?", "42"), row("What is 2+3?", "5")
    outcomes = await run_groups(ctx, groups_of(right, wrong, n=2), spec, "train")

    flat = [o for g in outcomes for o in g]
    assert all(o.failure is None for o in flat), [o.message for o in flat] + [agent_app.log_tail()]
    # The agent's own reward (its answer after "####" against the row's answer) arrives.
    assert [[o.reward for o in g] for g in outcomes] == [[1.0, 1.0], [0.0, 0.0]]
    for group, reward in zip(outcomes, (1.0, 0.0), strict=True):
        for outcome in group:
            (sample,) = outcome.samples  # one model turn through the gateway: one sequence
            assert sample.reward == reward and sample.metadata["raw_reward"] == reward
            assert sample.response_length > 0 and sum(sample.loss_mask) > 0

    store = s3(s3_url)
    for group, r in zip(outcomes, (right, wrong), strict=True):
        prefix = f"{EXP}/{input_id(r)}/"
        listed = store.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
        # One GRPO group, one prefix: the toolkit keyed both results by our input_id.
        assert sorted(o["Key"] for o in listed) == sorted(
            result_key(EXP, input_id(r), o.session_id) for o in group
        )
        for outcome in group:
            key = result_key(EXP, input_id(r), outcome.session_id)
            doc = json.loads(store.get_object(Bucket=BUCKET, Key=key)["Body"].read())
            assert doc["status_code"] == 200 and doc["stop_reason"] == "end_turn"  # the SDK's
            assert doc["result_key"] == key and doc["input_id"] == input_id(r)
            sent = payload_of(dataplane, outcome.session_id)["_rollout"]
            assert {k: sent[k] for k in ("exp_id", "input_id", "s3_bucket")} == {
                "exp_id": EXP,
                "input_id": input_id(r),
                "s3_bucket": BUCKET,
            }
    # StopRuntimeSession for every episode, the successful ones too (as the toolkit's own
    # client does once it has the result): nothing waits for AgentCore's idle timeout.
    for outcome in flat:
        await dataplane.wait_for_stop(outcome.session_id)
    assert sorted(dataplane.stopped) == sorted(o.session_id for o in flat)


async def test_failures_are_counted_by_reason_logged_once_and_their_sessions_stopped(
    gateway: GatewayClient,
    backend: AgentCoreBackend,
    dataplane: AgentCoreDataPlane,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = RolloutContext(gateway, backend, asyncio.Semaphore(4))
    rows = [
        row("What is 6*7?", "42", "raise"),  # the handler raises: the SDK saves status 500
        row("What is 6*7?", "42", "report_error"),  # the handler returns status_code 422
        row("What is 6*7?", "42"),  # succeeds, next to the failures
    ]
    with caplog.at_level(logging.INFO):
        first = await run_groups(
            ctx, groups_of(*rows), EpisodeSpec(SAMPLING, 256, 120.0, "m"), "train"
        )
        # The agent never finishes, so its result never appears in S3: the episode
        # deadline (short here, since it is the point) ends the wait.
        stalled = await run_groups(
            ctx,
            groups_of(row("What is 6*7?", "42", "stall")),
            EpisodeSpec(SAMPLING, 256, 3.0, "m"),
            "train",
        )
    (raised,), (reported,), (solved,) = first
    ((timed_out,),) = stalled
    assert (raised.failure, reported.failure, solved.failure, timed_out.failure) == (
        "agent_error",
        "agent_error",
        None,
        "timeout",
    )
    assert "RuntimeError: calculator tool crashed" in raised.message
    assert "status_code 422" in reported.message and "the judge rejected" in reported.message
    assert f"s3://{BUCKET}/{EXP}/" in raised.message  # where the saved error document is

    counted = ctx.recorder.take().counters
    assert counted[("failed_sessions", ("train", "agent_error"))] == 2
    assert counted[("failed_sessions", ("train", "timeout"))] == 1
    assert counted[("episodes", ("train", "succeeded"))] == 1

    for failed in (raised, reported, timed_out):
        lines = [r for r in ours(caplog) if failed.session_id in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in lines]  # logged once, with its id
        assert lines[0].levelno == logging.WARNING and failed.failure in lines[0].getMessage()
    assert not [r for r in ours(caplog) if solved.session_id in r.getMessage()]

    for outcome in (raised, reported, solved, timed_out):
        await dataplane.wait_for_stop(outcome.session_id)  # every path stops its session


async def test_cancelling_an_episode_stops_its_runtime_session(
    gateway: GatewayClient, backend: AgentCoreBackend, dataplane: AgentCoreDataPlane
) -> None:
    """What the rollout does to a straggler: cancel its task; the agent is stopped."""
    inp = groups_of(row("What is 6*7?", "42", "stall"))[0][0]
    task = asyncio.create_task(
        run_episode(inp, EpisodeSpec(SAMPLING, 256, 120.0, "m"), 0, gateway, backend)
    )
    await dataplane.wait_until(lambda: any(i.app_status == 200 for i in dataplane.invocations))
    sid = dataplane.invocations[-1].session_id
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await dataplane.wait_for_stop(sid)
    assert dataplane.stopped == [sid]


@pytest.mark.parametrize("refusal", ["throttle_next", "conflict_next"])
async def test_a_refused_invoke_is_sent_again_and_the_episode_runs_once(
    gateway: GatewayClient, backend: AgentCoreBackend, dataplane: AgentCoreDataPlane, refusal: str
) -> None:
    """AgentCore refuses twice before the app sees the invoke: throttled (429), or a
    conflicting operation on the session still in progress (409, which the toolkit's own
    client retries too); the episode then runs once and succeeds."""
    setattr(dataplane, refusal, 2)
    ctx = RolloutContext(gateway, backend, asyncio.Semaphore(1))
    with stamina.set_testing(True, attempts=INVOKE_ATTEMPTS):  # no backoff waits
        ((outcome,),) = await run_groups(
            ctx,
            groups_of(row("What is 6*7?", "42")),
            EpisodeSpec(SAMPLING, 256, 120.0, "m"),
            "train",
        )
    assert outcome.failure is None and outcome.reward == 1.0
    assert [i.app_status for i in dataplane.invocations] == [None, None, 200]  # ran once
    assert {i.session_id for i in dataplane.invocations} == {outcome.session_id}


async def test_episodes_throttled_together_come_back_spread_by_jitter(
    gateway: GatewayClient, backend: AgentCoreBackend, dataplane: AgentCoreDataPlane
) -> None:
    """Real stamina waits (1 to 2 s): what is checked is the waits it drew, not time."""
    dataplane.throttle_next = 4
    ctx = RolloutContext(gateway, backend, asyncio.Semaphore(4))
    spec = EpisodeSpec(SAMPLING, 256, 120.0, "m")
    with scheduled_retries() as retries:
        outcomes = await run_groups(ctx, groups_of(row("What is 6*7?", "42"), n=4), spec, "train")
    assert [o.failure for o in outcomes[0]] == [None] * 4
    waits = [r.wait_for for r in retries]
    assert len(waits) == 4 and len(set(waits)) == 4  # no two episodes in lockstep
    assert all(1.0 <= w <= 2.0 for w in waits)  # 1 s, plus up to 1 s of jitter
    assert all(type(r.caused_by).__name__ == "ThrottlingException" for r in retries)


async def test_the_released_app_refuses_the_payload_agentrl_used_to_send(
    dataplane: AgentCoreDataPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: without `exp_id` the toolkit's app answers HTTP 500, which AgentCore turns
    into RuntimeClientError; the payload the backend builds now is accepted, and the app
    names the key the backend expects. (boto3 blocks: its calls run in a thread, since
    the stand-in serves on this loop.)"""
    for var, value in CREDENTIALS.items():
        monkeypatch.setenv(var, value)
    client = boto3.client("bedrock-agentcore", region_name=REGION, endpoint_url=dataplane.url)
    sid = "old-payload-" + "x" * 30
    old = {
        **row("What is 6*7?", "42"),
        "_rollout": {
            "s3_bucket": BUCKET,
            "result_key": f"agentrl/ns/math/{sid}.json",
            "input_id": sid,
        },
    }
    with pytest.raises(botocore.exceptions.ClientError) as err:
        await asyncio.to_thread(
            client.invoke_agent_runtime,
            agentRuntimeArn=ARN,
            runtimeSessionId=sid,
            payload=json.dumps(old),
        )
    assert err.value.response["Error"]["Code"] == "RuntimeClientError"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert "Received error (500) from runtime" in str(err.value)

    sid = "new-payload-" + "x" * 30
    payload, where = with_rollout_fields(
        {**row("What is 6*7?", "42", "stall"), "_rollout": {"base_url": "http://unused/v1"}},
        EXP,
        BUCKET,
        sid,
    )
    answer = await asyncio.to_thread(
        client.invoke_agent_runtime,
        agentRuntimeArn=ARN,
        runtimeSessionId=sid,
        payload=json.dumps(payload),
    )
    assert answer["runtimeSessionId"] == sid and answer["statusCode"] == 200
    reply = json.loads(await asyncio.to_thread(answer["response"].read))
    assert reply == {"status": "processing", "s3_bucket": BUCKET, "result_key": where.key}
    await asyncio.to_thread(client.stop_runtime_session, agentRuntimeArn=ARN, runtimeSessionId=sid)
