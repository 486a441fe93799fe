"""The hub's gateway wiring, end to end with the real gateway and a stub SGLang cluster.

`Hub.start_gateway` builds the gateway from the runtime config (the same call the Ray
actor makes in the pod), the rollout talks to it through `GatewayClient` over HTTP, and
an agent speaking OpenAI chat completions over HTTP plays each episode with the session
URL and token it was given. The engine is the protocol-level SGLang stub (no GPU here).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.metrics import exposition
from tests.support.process import free_port
from tests.support.sglang_stub import StubEngine, StubRouter
from tests.support.tiny_tokenizer import write_checkpoint

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.gateway import GatewayClient
from agentrl.bundle.gateway.tokenizer import load_tokenizer
from agentrl.bundle.hub import Hub
from agentrl.bundle.rollout.batch import RolloutContext, run_groups
from agentrl.bundle.rollout.episode import EpisodeInput, EpisodeOutcome, EpisodeSpec
from agentrl.bundle.rollout.types import Status

from .doubles import ChatAgent, runtime_config


@pytest.fixture
def model_overrides() -> dict[str, int]:
    """`spec.model` fields a test sets (by wire name) before the hub starts its gateway."""
    return {}


@pytest.fixture
def engine_limits() -> dict[str, int]:
    """The stand-in engine's length checks a test turns on (`StubEngine` fields)."""
    return {}


@pytest.fixture
async def hub_with_gateway(
    tmp_path: Path, model_overrides: dict[str, int], engine_limits: dict[str, int]
) -> AsyncIterator[tuple[Hub, GatewayClient]]:
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    tok = load_tokenizer(str(checkpoint))
    reply = [*tok.encode("The answer is 42."), tok.convert_tokens_to_ids("<|im_end|>")]
    # A model that ends its turn properly, so the next prompt can extend it exactly.
    engine = StubEngine(
        vocab_size=len(tok.get_vocab()), responder=lambda p, s: list(reply), **engine_limits
    )
    router = StubRouter([await engine.start()])
    await router.start()
    port = free_port()
    base = runtime_config().model_dump(by_alias=True, mode="json")
    base["gatewayUrl"] = f"http://127.0.0.1:{port}"
    base["spec"]["model"]["path"] = str(checkpoint)
    base["spec"]["model"].update(model_overrides)
    base["spec"]["gateway"] = {"port": port, "cumulativeTokenMode": True}
    config = RuntimeConfig.model_validate(base)
    hub = Hub(config.to_json(), "127.0.0.1", 0, gateway_host="127.0.0.1")
    await hub.start_metrics()
    admin_url, token = await hub.start_gateway(router.url)
    client = GatewayClient(admin_url, token)
    try:
        yield hub, client
    finally:
        await client.aclose()
        await hub.stop()
        await router.stop()
        await engine.stop()


async def test_episodes_through_the_real_gateway(
    hub_with_gateway: tuple[Hub, GatewayClient],
) -> None:
    hub, client = hub_with_gateway
    agent = ChatAgent(turns=2)
    ctx = RolloutContext(client, agent, asyncio.Semaphore(2))
    spec = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 16}, 256, 60.0, "agentrl")
    groups = [
        [EpisodeInput("p", {"q": f"task {g}"}, None, g, 2 * g + i) for i in range(2)]
        for g in range(2)
    ]
    try:
        outcomes = await run_groups(ctx, groups, spec, "train")
    finally:
        await agent.aclose()

    for outcome in (o for g in outcomes for o in g):
        assert outcome.failure is None, outcome.message
        (sample,) = outcome.samples  # two turns that extend each other: one sequence
        assert sample.metadata["num_turns"] == 2
        assert len(sample.loss_mask) == sample.response_length == len(sample.rollout_log_probs)
        assert 0 < sum(sample.loss_mask) < sample.response_length  # bridge tokens masked
    assert len(hub._gateway.store) == 0  # every session closed
    text = exposition(hub.metrics)
    assert 'agentrl_gateway_requests_total{api="openai",code="200"} 8.0' in text


# The row's 17-token prompt fills what a request may hold: the gateway's context (8), or,
# the gateway's context (40) passing it, the engine's, where SGLang's scheduler takes prompts
# under 10 tokens: `max_req_len - 5`, `max_req_len` one under its KV pool of 16 tokens (a
# pool smaller than the context), so 16 tokens a request may hold, which no context names.
# The gateway knowing no context, the same 16 tokens may be either limit.
@pytest.mark.parametrize(
    ("model_overrides", "engine_limits", "says", "fixes"),
    [
        ({"contextLength": 8}, {}, "filled the model's context of 8 tokens", {"context"}),
        (
            {"contextLength": 40},
            {"max_req_input_len": 10},
            "filled the 16 tokens the engine's KV cache holds for a request",
            {"kv_cache"},
        ),
        (
            {},
            {"max_req_input_len": 10},
            "filled the 16 tokens a request may hold",
            {"context", "kv_cache"},
        ),
    ],
    ids=["context", "engine-kv-pool", "engine-unknown"],
)
async def test_a_prompt_over_the_context_fails_the_episode_naming_the_context(
    hub_with_gateway: tuple[Hub, GatewayClient], says: str, fixes: set[str]
) -> None:
    """A row whose prompt alone fills the model's context: the gateway answers the agent's
    call with finish reason `length` and samples nothing, so the episode has no turn. Its
    failure says so (the prompt's and the limit's sizes, the fields to change), not that
    the agent never called the model, which sends the user debugging a working agent. The
    limit may be the engine's KV cache pool, not the context: the gateway tells which where
    it knows the context (the scheduler's limit under it is the pool), and the message names
    only the fix that helps (raising the context does nothing for a pool, nor the pool for
    the context); where it cannot tell, both."""
    hub, client = hub_with_gateway
    agent = ChatAgent(turns=1)
    ctx = RolloutContext(client, agent, asyncio.Semaphore(1))
    spec = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 4}, 256, 60.0, "agentrl")
    try:
        ((outcome,),) = await run_groups(
            ctx, [[EpisodeInput("p", {"q": "a question"}, None, 0, 0)]], spec, "train"
        )
    finally:
        await agent.aclose()
    assert agent.calls == 1
    assert outcome.failure == "no_turns"
    assert "without calling the model" not in outcome.message
    assert says in outcome.message, outcome.message
    assert "the longest prompt: 17 tokens" in outcome.message
    assert ("spec.model.contextLength" in outcome.message) == ("context" in fixes)
    assert ("--sglang-mem-fraction-static" in outcome.message) == ("kv_cache" in fixes)
    assert ("rolloutGpusPerEngine" in outcome.message) == ("kv_cache" in fixes)
    assert len(hub._gateway.store) == 0


async def two_call_episode(client: GatewayClient) -> tuple[RolloutContext, EpisodeOutcome]:
    """One train episode of an agent that calls the model twice (16 new tokens each), run
    through the gateway: its context, and its outcome, which must have ended without a
    failure."""
    agent = ChatAgent(turns=2)
    ctx = RolloutContext(client, agent, asyncio.Semaphore(1))
    spec = EpisodeSpec({"temperature": 1.0, "max_new_tokens": 16}, 256, 60.0, "agentrl")
    try:
        ((outcome,),) = await run_groups(
            ctx, [[EpisodeInput("p", {"q": "a question"}, None, 0, 0)]], spec, "train"
        )
    finally:
        await agent.aclose()
    assert agent.calls == 2
    assert outcome.failure is None, outcome.message
    return ctx, outcome


# The first call's prompt is 17 tokens and its reply 7; the second's, 42 tokens, finds the
# context full: the gateway's own check (contextLength 30), or, the gateway knowing no
# context, SGLang's refusal (its scheduler's limit, or its tokenizer manager's context).
@pytest.mark.parametrize(
    ("model_overrides", "engine_limits"),
    [
        ({"contextLength": 30}, {}),
        ({}, {"max_req_input_len": 30}),
        ({}, {"context_len": 40}),
    ],
    ids=["gateway", "engine-scheduler", "engine-tokenizer-manager"],
)
async def test_a_later_call_that_finds_the_context_full_truncates_the_episode(
    hub_with_gateway: tuple[Hub, GatewayClient],
) -> None:
    """The agent's second call finds the context full. The gateway answers it finish reason
    `length` without the engine; SGLang refused it itself where the gateway's check passed
    it (its scheduler's limit is a few tokens short of the context), and the agent got a
    400. Either way the episode was cut by the context as surely as by a completion cut at
    `max_new_tokens`, yet its sample came back COMPLETED (the refused call left no trace;
    an agent that ends on `length` failed on the 400), so truncated figures and anything
    keyed on TRUNCATED missed it. slime's own agent adapter records the gateway's case
    (slime 624b824: the sample's `truncated`). Its sample is TRUNCATED now, and holds no
    token of the refused call."""
    hub, client = hub_with_gateway
    ctx, outcome = await two_call_episode(client)
    (sample,) = outcome.samples
    assert sample.status is Status.TRUNCATED
    # The first call alone: its 17-token prompt and 7 sampled tokens, all trained.
    assert len(sample.tokens) == 24 and sample.response_length == 7
    assert sample.loss_mask == [1] * 7 and sample.metadata["num_turns"] == 1
    assert outcome.merge is not None and outcome.merge.context_full == 1
    assert ctx.recorder.take().counters[("truncated_samples", ())] == 1
    text = exposition(hub.metrics)
    assert "agentrl_context_full_turns_total 1.0" in text


# The second call's 42-token prompt fits a context of 47, but not with the 16 new tokens the
# agent asks for: the gateway caps them at the 5 left where it knows the context; SGLang's
# tokenizer manager refuses prompt + max_new_tokens where it does not (and names the
# context), or where the engine reserves tokens for speculative decoding (2 here: 3 left).
@pytest.mark.parametrize(
    ("model_overrides", "engine_limits", "room"),
    [
        ({"contextLength": 47}, {}, 5),
        ({}, {"context_len": 47}, 5),
        ({"contextLength": 47}, {"context_len": 47, "reserved_tokens": 2}, 3),
    ],
    ids=["gateway", "engine-budget", "engine-budget-reserved"],
)
async def test_a_later_reply_cut_by_the_context_truncates_the_episode(
    hub_with_gateway: tuple[Hub, GatewayClient], room: int
) -> None:
    """The agent's second call has room for fewer tokens than it asks for: the reply is cut
    at the room left and answered finish reason `length`, whether the gateway capped it or
    SGLang refused prompt + max_new_tokens and the gateway asked again for the room it
    named. The episode's sample holds both turns, the second one's tokens that fit, and is
    TRUNCATED, counted in the truncated samples, as a reply cut at max_new_tokens is."""
    hub, client = hub_with_gateway
    ctx, outcome = await two_call_episode(client)
    (sample,) = outcome.samples
    assert sample.status is Status.TRUNCATED
    # The first call's 17-token prompt and 7-token reply, the 18 tokens that bridge to the
    # second prompt (masked), and the second reply's tokens that fit, all sampled ones trained.
    assert len(sample.tokens) == 42 + room and sample.response_length == 25 + room
    assert sample.loss_mask == [1] * 7 + [0] * 18 + [1] * room
    assert sample.metadata["num_turns"] == 2
    assert outcome.merge is not None and outcome.merge.context_full == 0
    assert ctx.recorder.take().counters[("truncated_samples", ())] == 1
    text = exposition(hub.metrics)
    assert 'agentrl_gateway_requests_total{api="openai",code="200"} 2.0' in text


async def test_the_hub_freezes_its_heap_while_its_gateway_serves(tmp_path: Path) -> None:
    """The hub's process lives as long as its gateway: once it serves, what is loaded is
    left out of full collections (each walked it with the event loop stopped); stopping
    the hub gives it back to the collector."""
    engine = StubEngine(vocab_size=1000)
    engine_url = await engine.start()
    base = runtime_config().model_dump(by_alias=True, mode="json")
    port = free_port()
    base["gatewayUrl"] = f"http://127.0.0.1:{port}"
    base["spec"]["model"]["path"] = str(write_checkpoint(tmp_path / "ckpt"))
    base["spec"]["gateway"] = {"port": port}
    hub = Hub(RuntimeConfig.model_validate(base).to_json(), "127.0.0.1", 0, "127.0.0.1")
    try:
        assert gc.get_freeze_count() == 0
        await hub.start_gateway(engine_url)
        assert gc.get_freeze_count() > 10_000  # modules, tokenizer, renderer, aiohttp
    finally:
        await hub.stop()
        await engine.stop()
    assert gc.get_freeze_count() == 0
