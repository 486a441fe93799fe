"""The context budget: no model call is ever refused by the engine for its length.

The stub engines run SGLang's own length checks (`context_len`: input + max_new_tokens may
not exceed the context, the input may not fill it; a stream gets HTTP 200 and an error
event), so a gateway that forwarded the agent's `max_tokens` near the end of a long
conversation would see exactly what SGLang answers: 400, or an error event in a stream.
"""

from __future__ import annotations

import ast
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Union

import anthropic
import openai
import orjson
import pytest
from tests.support import upstream
from tests.support.down_hub import cache_snapshot, hub_env
from tests.support.down_hub import down_hub as hub_down
from tests.support.sglang_stub import StubEngine
from tests.support.shared import require

from agentrl.api.model_context import context_length_of
from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.gateway.context import checkpoint_context_length
from agentrl.bundle.gateway.sglang import (
    SCHEDULER_MARGIN,
    EngineError,
    LengthRefusal,
    StreamState,
    length_refusal,
)
from agentrl.bundle.gateway.turns import TurnRunner
from agentrl.bundle.traces import CONTEXT_FULL, Turn, merge_turns

from .gateway_helpers import MESSAGES, Cluster, metric, scripted, settings_for

BUDGET = 64  # the session's max_new_tokens (maxResponseLength), as the rollout sets it


def prompt_len(renderer: Any) -> int:
    return len(renderer.render_ids(MESSAGES, add_generation_prompt=True))


async def started(cluster: Cluster, checkpoint: Path, **overrides: Any) -> GatewayServer:
    server = GatewayServer(settings_for(cluster, checkpoint, **overrides), cluster.metrics)
    await server.start()
    return server


@pytest.fixture
async def near_full(
    cluster: Cluster, checkpoint: Path, renderer: Any
) -> AsyncIterator[tuple[GatewayServer, int]]:
    """A gateway and engines whose context leaves 5 tokens after MESSAGES' prompt."""
    context = prompt_len(renderer) + 5
    cluster.set(context_len=context)
    server = await started(cluster, checkpoint, context_length=context)
    yield server, context
    await server.stop()


@pytest.mark.parametrize("stream", [False, True])
async def test_max_new_tokens_is_capped_at_the_room_left_not_refused(
    near_full: tuple[GatewayServer, int], cluster: Cluster, renderer: Any, stream: bool
) -> None:
    gateway, context = near_full
    handle = await gateway.create_session(f"near-{stream}", {"max_new_tokens": BUDGET})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    if stream:
        chunks = [
            ch
            async for ch in await c.chat.completions.create(
                model="m", messages=MESSAGES, max_tokens=500, stream=True
            )  # type: ignore[call-overload]
        ]
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    else:
        out = await c.chat.completions.create(model="m", messages=MESSAGES, max_tokens=500)  # type: ignore[arg-type]
        assert out.choices[0].finish_reason in ("stop", "length")
    (sent,) = cluster.all_requests()
    assert sent["sampling_params"]["max_new_tokens"] == context - prompt_len(renderer) == 5
    (turn,) = await gateway.get_turns(handle.session_id)
    assert len(turn.prompt_ids) + len(turn.completion_ids) <= context


async def test_a_full_context_names_the_conversation_it_cut_not_the_last_caller(
    cluster: Cluster, checkpoint: Path, renderer: Any, tok: Any
) -> None:
    """Two sub-agents on one session: A calls, B calls, then A's next call (a long tool
    result) fills the context. Its CONTEXT_FULL turn carries A's conversation so far (A's
    turn's prompt + completion), so merging ends A's segment truncated, not B's, the last
    caller's."""
    context = prompt_len(renderer) + 20  # room for the short replies, not the tool result
    cluster.set(context_len=context, responder=scripted(tok, "42"))
    gateway = await started(cluster, checkpoint, context_length=context)
    try:
        handle = await gateway.create_session("subagents", {"max_new_tokens": BUDGET})
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
        a1 = await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        b = [{"role": "system", "content": "B"}, MESSAGES[1]]
        b1 = await c.chat.completions.create(model="m", messages=b)  # type: ignore[arg-type]
        assert a1.choices[0].finish_reason == b1.choices[0].finish_reason == "stop"
        reply = {"role": "assistant", "content": a1.choices[0].message.content}
        long = {"role": "user", "content": "a long tool result " * 20}
        a2 = await c.chat.completions.create(model="m", messages=[*MESSAGES, reply, long])  # type: ignore[arg-type]
        assert a2.choices[0].finish_reason == "length"
        turns = await gateway.get_turns(handle.session_id)
    finally:
        await gateway.stop()

    turn_a, turn_b, cut = turns
    assert cut.finish_reason == CONTEXT_FULL and list(cut.completion_ids) == []
    assert list(cut.prompt_ids) == [*turn_a.prompt_ids, *turn_a.completion_ids]
    segments = merge_turns([turn_a, turn_b, cut])
    assert [s.tokens[: len(turn_a.prompt_ids)] == list(turn_a.prompt_ids) for s in segments] == [
        True,
        False,
    ]
    assert [s.truncated for s in segments] == [True, False]


async def test_the_context_comes_from_config_json_when_the_spec_leaves_it_unset(
    cluster: Cluster, checkpoint: Path, renderer: Any, tmp_path: Path
) -> None:
    context = prompt_len(renderer) + 3
    ckpt = Path(shutil.copytree(checkpoint, tmp_path / "ckpt"))
    (ckpt / "config.json").write_text(json.dumps({"max_position_embeddings": context}))
    cluster.set(context_len=context)
    gateway = await started(cluster, ckpt)
    try:
        assert gateway.context_length == context
        handle = await gateway.create_session("cfg", {"max_new_tokens": BUDGET})
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
        await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        (sent,) = cluster.all_requests()
        assert sent["sampling_params"]["max_new_tokens"] == 3
    finally:
        await gateway.stop()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_that_fills_the_context_is_finish_reason_length_without_the_engine(
    cluster: Cluster, checkpoint: Path, renderer: Any, stream: bool
) -> None:
    """As slime's agent adapter answers it: finish reason `length`, no content, no engine
    call; nothing was sampled, so the trace holds each call as a `CONTEXT_FULL` turn with
    no ids (each began a conversation: it cut no earlier one)."""
    context = prompt_len(renderer)
    cluster.set(context_len=context)
    gateway = await started(cluster, checkpoint, context_length=context)
    try:
        handle = await gateway.create_session("full", {"max_new_tokens": BUDGET})
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
        if stream:
            chunks = [
                ch
                async for ch in await c.chat.completions.create(
                    model="m", messages=MESSAGES, stream=True
                )  # type: ignore[call-overload]
            ]
            assert chunks[-1].choices[0].finish_reason == "length"
            assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == ""
        else:
            out = await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
            assert out.choices[0].finish_reason == "length"
            assert out.choices[0].message.content == ""
            assert out.usage is not None and out.usage.completion_tokens == 0
        a = anthropic.AsyncAnthropic(
            base_url=handle.base_url.removesuffix("/v1"), auth_token=handle.token, max_retries=0
        )
        msg = await a.messages.create(
            model="m",
            max_tokens=BUDGET,
            system=MESSAGES[0]["content"],
            messages=[{"role": "user", "content": MESSAGES[1]["content"]}],
        )
        assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 0
        assert cluster.all_requests() == []
        assert await gateway.get_turns("full") == [Turn((), (), None, CONTEXT_FULL)] * 2
        assert metric(cluster, "agentrl_context_full_turns_total") == 2
        assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="200") == 1
    finally:
        await gateway.stop()


async def test_a_streamed_engine_refusal_reaches_the_client_as_the_engines_400(
    gateway: GatewayServer, cluster: Cluster
) -> None:
    """SGLang's tokenizer manager refuses a stream's input (here: ids past the model's
    vocabulary) after its HTTP server answered 200, as an error event; the agent gets the
    engine's message as a 400 its SDK raises (and does not retry), not a 502."""
    cluster.set(vocab_size=10)
    handle = await gateway.create_session("refused", {"max_new_tokens": BUDGET})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="Token id out of range"):
        async for _ in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[call-overload]
            pass
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="400") == 1
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="502") == 0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("check", ["scheduler", "tokenizer_manager"])
async def test_the_engines_refusal_of_a_long_prompt_is_a_full_context_in_the_trace(
    gateway: GatewayServer, cluster: Cluster, tok: Any, stream: bool, check: str
) -> None:
    """The agent's second call passes the gateway's check (here the gateway knows no
    context; with one, SGLang's scheduler still refuses a prompt a few tokens short of it)
    and SGLang refuses the prompt as too long: its scheduler (a 400 unstreamed, the last
    chunk of a stream) or its tokenizer manager (a 400, an error event in a stream). The
    agent got a 400 and nothing was traced, so the episode's sample came back COMPLETED
    where the same call a few tokens longer, found full by the gateway, made it TRUNCATED.
    It is now the gateway's own full context: finish reason `length`, nothing sampled, a
    CONTEXT_FULL turn naming the conversation it continued, counted."""
    cluster.set(responder=scripted(tok, "42"))
    sid = f"{check}-{stream}"
    handle = await gateway.create_session(sid, {"max_new_tokens": BUDGET})
    c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
    first = await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    (turn_a,) = await gateway.get_turns(sid)
    # The engine now takes prompts shorter than the conversation so far and its reply only.
    limit = len(turn_a.prompt_ids) + len(turn_a.completion_ids) + 1
    cluster.set(**{"max_req_input_len" if check == "scheduler" else "context_len": limit})
    reply = {"role": "assistant", "content": first.choices[0].message.content}
    long = [*MESSAGES, reply, {"role": "user", "content": "a long tool result " * 20}]
    if stream:
        chunks = [
            ch
            async for ch in await c.chat.completions.create(  # type: ignore[call-overload]
                model="m", messages=long, stream=True
            )
        ]
        assert chunks[-1].choices[0].finish_reason == "length"
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == ""
    else:
        out = await c.chat.completions.create(model="m", messages=long)  # type: ignore[arg-type]
        assert out.choices[0].finish_reason == "length" and out.choices[0].message.content == ""
        assert out.usage is not None and out.usage.completion_tokens == 0
    assert len(cluster.all_requests()) == 2  # the engine was asked, and refused it
    turns = await gateway.get_turns(sid)
    assert turns[0] == turn_a
    assert turns[1:] == [Turn([*turn_a.prompt_ids, *turn_a.completion_ids], (), None, CONTEXT_FULL)]
    (segment,) = merge_turns(turns)
    assert segment.truncated and segment.tokens == [*turn_a.prompt_ids, *turn_a.completion_ids]
    session = gateway.store.get(sid)
    # What a request may hold there: the context the tokenizer manager named, or the one
    # behind the scheduler's limit (SGLang's `max_req_len - 5`, `max_req_len` the context
    # minus one), not the limit itself, a few tokens under the context.
    assert session.context_full == 1
    assert session.context_length == (limit + 6 if check == "scheduler" else limit)
    # Which limit that was: the tokenizer manager names the context; the scheduler's limit,
    # the gateway knowing no context, may be the context or the KV pool.
    assert session.context_limit == (None if check == "scheduler" else "context")
    assert session.answers == {200: 2} and not session.refusals
    assert metric(cluster, "agentrl_context_full_turns_total") == 1
    assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="400") == 0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", ["no_context", "speculative"])
async def test_an_engine_refusal_of_the_prompt_and_its_budget_is_asked_again_for_the_room(
    cluster: Cluster, checkpoint: Path, renderer: Any, stream: bool, case: str
) -> None:
    """SGLang refuses prompt + max_new_tokens over its context (the prompt fits) where the
    gateway could not cap the budget: it knew no context (neither the spec nor config.json
    gave one), or it knew it and the engine counts the tokens EAGLE reserves with the
    prompt. The agent got a 400 and nothing was traced, where with the context known (and
    with slime's adapter) the call is answered `length` with the tokens that fit. Now the
    call is asked again for the room the refusal names; the context it names is the
    gateway's from then on, so the next call is capped at once."""
    room, reserved = 2, 3 if case == "speculative" else 0
    context = prompt_len(renderer) + reserved + room
    cluster.set(context_len=context, reserved_tokens=reserved)
    known = {"context_length": context} if case == "speculative" else {}
    gateway = await started(cluster, checkpoint, **known)
    try:
        assert gateway.context_length == (context if known else None)
        for sid in ("first", "next"):
            handle = await gateway.create_session(f"{sid}-{stream}", {"max_new_tokens": BUDGET})
            c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
            if stream:
                chunks = [
                    ch
                    async for ch in await c.chat.completions.create(  # type: ignore[call-overload]
                        model="m", messages=MESSAGES, stream=True
                    )
                ]
                assert chunks[-1].choices[0].finish_reason == "length"
            else:
                out = await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
                assert out.choices[0].finish_reason == "length"
                assert out.usage is not None and out.usage.completion_tokens == room
            (turn,) = await gateway.get_turns(handle.session_id)
            assert len(turn.completion_ids) == room and turn.finish_reason == "length"
            assert len(turn.prompt_ids) == prompt_len(renderer)
        asked = {  # a session's calls go to one engine (the routing key), in order
            sid: [
                r["sampling_params"]["max_new_tokens"]
                for r in cluster.all_requests()
                if r["rid"].startswith(f"{sid}-{stream}-")
            ]
            for sid in ("first", "next")
        }
        # The first call: refused, then asked for the room; the next, capped at once.
        first = BUDGET if case == "no_context" else room + reserved
        assert asked == {"first": [first, room], "next": [room]}
        assert gateway.context_length == context
        assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="400") == 0
        assert metric(cluster, "agentrl_context_full_turns_total") == 0
    finally:
        await gateway.stop()


@pytest.mark.parametrize("pool", ["smaller", "larger"])
async def test_a_full_context_the_scheduler_finds_names_the_limit_it_met(
    cluster: Cluster, checkpoint: Path, renderer: Any, pool: str
) -> None:
    """SGLang's scheduler takes prompts under `min(context, KV pool) - 6`, so what its
    refusal says a request may hold is the context or the pool, whichever is smaller. Where
    the gateway knows the context, the one that bound is plain: less than the context, the
    pool. The session said neither, and the episode's failure named both fixes (raise the
    context, give engines more KV cache), one of which does nothing. It now names the limit
    (`ContextFullCalls.limit`)."""
    n = prompt_len(renderer)
    context = n + 3  # the gateway's check passes the prompt, and so does the tokenizer manager's
    holds = n - 1 if pool == "smaller" else context  # min(context, pool)
    cluster.set(context_len=context, max_req_input_len=holds - SCHEDULER_MARGIN)
    gateway = await started(cluster, checkpoint, context_length=context)
    try:
        handle = await gateway.create_session(f"full-{pool}", {"max_new_tokens": BUDGET})
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
        out = await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        assert out.choices[0].finish_reason == "length" and out.choices[0].message.content == ""
        full = await gateway.context_full(handle.session_id)
        assert (full.calls, full.prompt_tokens, full.context_length) == (1, n, holds)
        assert full.limit == ("kv_cache" if pool == "smaller" else "context")
    finally:
        await gateway.stop()


@pytest.mark.parametrize("first", ["context", "kv_cache"])
async def test_a_session_whose_full_calls_met_both_limits_names_neither_alone(
    cluster: Cluster, checkpoint: Path, renderer: Any, first: str
) -> None:
    """A session whose prompts met both limits, one over the context (the gateway's own
    check) and one over the smaller KV pool (SGLang's scheduler), needs both fixes: the
    limit the last call met named only its own (raising the context does nothing for the
    other prompt, or the KV cache for the first), so the session says it cannot tell."""
    n = prompt_len(renderer)
    context, holds = n + 3, n - 1  # the pool smaller than the context
    cluster.set(context_len=context, max_req_input_len=holds - SCHEDULER_MARGIN)
    long = [{**MESSAGES[0]}, {"role": "user", "content": MESSAGES[-1]["content"] + " x" * 20}]
    assert len(renderer.render_ids(long, add_generation_prompt=True)) >= context
    calls = {"context": long, "kv_cache": MESSAGES}
    gateway = await started(cluster, checkpoint, context_length=context)
    try:
        handle = await gateway.create_session(f"both-{first}", {"max_new_tokens": BUDGET})
        c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
        met = []
        for limit in (first, *(k for k in calls if k != first)):
            out = await c.chat.completions.create(model="m", messages=calls[limit])  # type: ignore[arg-type]
            assert out.choices[0].finish_reason == "length"
            met.append((await gateway.context_full(handle.session_id)).limit)
        assert met == [first, None]
        full = await gateway.context_full(handle.session_id)
        assert full.calls == 2 and full.prompt_tokens >= context
    finally:
        await gateway.stop()


async def test_the_tokens_the_engine_reserves_are_learned_once_and_left_out_of_every_budget(
    cluster: Cluster, checkpoint: Path, renderer: Any, tok: Any
) -> None:
    """Under EAGLE speculative decoding SGLang counts its reserved tokens with every prompt
    (`num_reserved_tokens`, checked against its own `_validate_one_request` above), which the
    gateway's cap at context - prompt left out: with the context known, every call near its
    end was refused once and asked again, one wasted engine round trip each. The first
    refusal names the input as the engine counted it; what it adds to the prompt sent is
    learned, and later calls are capped without it, or, where prompt + reserved fills the
    context, answered as the full context the engine would refuse, without asking it."""
    room, reserved = 2, 3
    n = prompt_len(renderer)
    context = n + reserved + room
    cluster.set(context_len=context, reserved_tokens=reserved)
    # A prompt the gateway passes (under the context) that fills it with the reserved tokens.
    longer = next(
        m
        for k in range(1, 40)
        if context - reserved
        <= len(
            renderer.render_ids(
                m := [{"role": "user", "content": MESSAGES[-1]["content"] + " x" * k}],
                add_generation_prompt=True,
            )
        )
        < context
    )
    gateway = await started(cluster, checkpoint, context_length=context)
    try:
        outs = {}
        for sid, messages in (("learn", MESSAGES), ("capped", MESSAGES), ("full", longer)):
            handle = await gateway.create_session(sid, {"max_new_tokens": BUDGET})
            c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
            outs[sid] = await c.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        asked = {
            sid: [
                r["sampling_params"]["max_new_tokens"]
                for r in cluster.all_requests()
                if r["rid"].startswith(f"{sid}-")
            ]
            for sid in outs
        }
        assert asked == {"learn": [room + reserved, room], "capped": [room], "full": []}
        assert outs["capped"].usage is not None and outs["capped"].usage.completion_tokens == room
        assert outs["full"].choices[0].finish_reason == "length"
        assert outs["full"].choices[0].message.content == ""
        full = await gateway.context_full("full")
        assert (full.calls, full.context_length, full.limit) == (1, context, "context")
        assert metric(cluster, "agentrl_context_full_turns_total") == 1
        assert metric(cluster, "agentrl_gateway_requests_total", api="openai", code="400") == 0
    finally:
        await gateway.stop()


@pytest.mark.parametrize(
    ("config", "length"),
    [
        ({"max_position_embeddings": 32768}, 32768),
        # The first key set, in SGLang's order, wins.
        ({"seq_length": 8192, "max_position_embeddings": 4096}, 8192),
        ({"max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0}}, 131072),
        # YaRN with its original length named, and llama3 scaling: the length as written.
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768},
            },
            131072,
        ),
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3"}}, 131072),
        # A multimodal checkpoint: the language model's sub-config.
        ({"text_config": {"max_position_embeddings": 262144}, "vision_config": {}}, 262144),
        ({"hidden_size": 896}, None),
        ({"max_position_embeddings": True}, None),
    ],
)
def test_context_length_from_config_follows_sglangs_rule(
    config: dict[str, Any], length: int | None
) -> None:
    assert context_length_of(config) == length


def sglang_get_context_length(version: str) -> Callable[[Any], int]:
    """SGLang's own `get_context_length` (and its key list), from the pinned release's source."""
    path = upstream.sglang_dir(version) / "sglang/srt/utils/hf_transformers/common.py"
    tree = ast.parse(require(path, f"SGLang {version}'s get_context_length").read_text("utf-8"))
    wanted = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name == "get_context_length")
        or (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "CONTEXT_LENGTH_KEYS" for t in node.targets)
        )
    ]
    assert len(wanted) == 2, f"SGLang {version} moved get_context_length or its keys"
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(wanted, []), str(path), "exec"), namespace)
    return namespace["get_context_length"]  # type: ignore[no-any-return]


def sglang_function(version: str, module: str, name: str, within: str | None = None) -> Any:
    """SGLang's own function `name` (a method of class `within`) from the pinned release's
    source, compiled alone: its names besides are given by the caller's namespace."""
    path = upstream.sglang_dir(version) / f"sglang/srt/{module}.py"
    tree = ast.parse(require(path, f"SGLang {version}'s {name}").read_text("utf-8"))
    body = tree.body
    if within is not None:
        (cls,) = [n for n in body if isinstance(n, ast.ClassDef) and n.name == within]
        body = cls.body
    found = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"SGLang {version} moved {name}"
    namespace: dict[str, Any] = {
        "Any": Any, "List": list, "Optional": Optional, "Union": Union, "Req": object,
        "GenerateReqInput": SimpleNamespace, "EmbeddingReqInput": type("Embedding", (), {}),
        "logger": logging.getLogger("sglang"),
    }  # fmt: skip
    exec(compile(ast.Module(found, []), str(path), "exec"), namespace)
    return namespace[name]


class Loose(SimpleNamespace):
    """Stands in for SGLang's objects: the attributes given, and another for any other."""

    def __getattr__(self, name: str) -> Any:
        return Loose()


def sglang_scheduler_limit(version: str, context: int, pool: int) -> int:
    """The scheduler's `max_req_input_len` as SGLang `version` derives it for a model
    `context` and a KV pool of `pool` tokens: `TpModelWorker.get_worker_info()`'s sixth
    item (what the scheduler unpacks), with the assignments `__init__` makes to it first."""
    path = upstream.sglang_dir(version) / "sglang/srt/managers/tp_worker.py"
    tree = ast.parse(require(path, f"SGLang {version}'s TpModelWorker").read_text("utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TpModelWorker"]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    limits = ("max_req_len", "max_req_input_len")
    assigned = [
        n
        for n in ast.walk(methods["__init__"])
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr in limits for t in n.targets)
    ]
    init = ast.FunctionDef(
        name="init",
        args=methods["get_worker_info"].args,
        body=[*assigned, ast.Pass()],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    module = ast.fix_missing_locations(ast.Module([init, methods["get_worker_info"]], []))
    namespace: dict[str, Any] = {}
    exec(compile(module, str(path), "exec"), namespace)
    worker = Loose(
        model_config=Loose(context_len=context),
        model_runner=Loose(max_token_pool_size=pool),
    )
    namespace["init"](worker)
    limit: int = namespace["get_worker_info"](worker)[5]
    return limit


@pytest.mark.parametrize("version", upstream.sglang_pin()["versions"])  # type: ignore[arg-type]
@pytest.mark.parametrize("pool", [1000, 30])
def test_the_schedulers_limit_names_what_a_request_may_hold_less_six(
    version: str, pool: int
) -> None:
    """SGLang's scheduler refuses prompts at or over its `max_req_input_len`, derived from
    the context and the KV pool by its own code here: six tokens under the smaller of them.
    So the gateway takes its refusal as a full context of the limit + 6 (the context where
    the pool is larger), not of the limit, a few tokens under the context."""
    context = 40
    limit = sglang_scheduler_limit(version, context, pool)
    assert limit + SCHEDULER_MARGIN == min(context, pool)
    message = sglang_refusal(version, context, limit, limit, 1)
    assert message is not None and "maximum allowed length" in message
    refusal = length_refusal(EngineError("refused", 400, message))
    assert refusal is not None and refusal.context == min(context, pool) and not refusal.exact


def sglang_refusal(
    version: str, context: int, max_req_input_len: int, n: int, new: int, *, reserved: int = 0
) -> str | None:
    """What SGLang `version` answers a prompt of `n` tokens asking for `new`: its tokenizer
    manager's ValueError, else its scheduler's abort message, else None (served); without
    --allow-auto-truncate, as slime launches it, and `reserved` tokens counted with the
    input (its `num_reserved_tokens`: none, or EAGLE's draft tokens)."""
    check = sglang_function(
        version, "managers/tokenizer_manager", "_validate_one_request", "TokenizerManager"
    )
    server_args = SimpleNamespace(
        allow_auto_truncate=False,
        enable_return_hidden_states=False,
        enable_custom_logit_processor=False,
    )
    manager = SimpleNamespace(
        context_len=context,
        num_reserved_tokens=reserved,
        server_args=server_args,
        validate_total_tokens=True,
        _validate_token_ids_logprob=lambda o: None,
    )
    obj = SimpleNamespace(
        sampling_params={"max_new_tokens": new},
        return_hidden_states=False,
        custom_logit_processor=None,
    )
    try:
        check(manager, obj, list(range(n)))
    except ValueError as exc:
        return str(exc)
    validate = sglang_function(version, "managers/utils", "validate_input_length")
    req = SimpleNamespace(origin_input_ids=list(range(n)))
    message: str | None = validate(req, max_req_input_len, False)
    return message


@pytest.mark.parametrize("version", upstream.sglang_pin()["versions"])  # type: ignore[arg-type]
@pytest.mark.parametrize("reserved", [0, 3, 8])  # 8: more than the scheduler's margin
def test_the_stand_in_refuses_long_prompts_as_sglang_and_the_gateway_knows_which(
    version: str, reserved: int
) -> None:
    """SGLang's own length checks (its tokenizer manager's and its scheduler's, from each
    pinned release's source) against the stand-in engine the gateway tests run on: the same
    prompts refused, with the same messages. Of those, the gateway takes the refusals of
    the prompt alone as a full context (`length_refusal`, what a request may hold there),
    and the one of prompt + max_new_tokens over the context as the room it names: asked
    again for that many new tokens, SGLang serves the call."""
    context = 40
    limit = sglang_scheduler_limit(version, context, 1000)  # the KV pool larger
    stub = StubEngine(
        vocab_size=100, context_len=context, max_req_input_len=limit, reserved_tokens=reserved
    )
    seen: set[tuple[int, bool]] = set()
    for n in range(limit - 3, context + 3):
        for new in (1, 4, 8):
            theirs = sglang_refusal(version, context, limit, n, new, reserved=reserved)
            body = {"input_ids": list(range(n)), "sampling_params": {"max_new_tokens": new}}
            ours = stub._context_refusal(body)
            if ours is None:
                scheduler = stub._scheduler_refusal(body)
                ours = None if scheduler is None else scheduler["message"]
            assert ours == theirs, (n, new)
            if theirs is None:
                continue
            refusal = length_refusal(EngineError("refused", 400, theirs))
            assert refusal is not None, theirs
            seen.add((refusal.context, refusal.fits))
            if n + reserved >= context:  # the tokenizer manager: the prompt fills the context
                assert (refusal.context, refusal.exact, refusal.fits) == (context, True, False)
            elif refusal.fits:  # the budget: asked for the room named, SGLang serves it
                assert refusal.input_tokens == n + reserved
                room = refusal.context - refusal.input_tokens
                assert 0 < room < new
                again = sglang_refusal(version, context, limit, n, room, reserved=reserved)
                if n < limit:
                    assert again is None
                else:  # or its scheduler refuses the prompt: a full context, as above
                    second = length_refusal(EngineError("refused", 400, str(again)))
                    assert second is not None and not second.fits
            else:  # the scheduler
                assert n >= limit and refusal.context == limit + SCHEDULER_MARGIN == context
    assert {fits for _, fits in seen} == {True, False}  # each kind of refusal met


@pytest.mark.parametrize("version", upstream.sglang_pin()["versions"])  # type: ignore[arg-type]
@pytest.mark.parametrize(("reserved", "pool"), [(3, 1000), (8, 1000), (3, 30)])
def test_the_reserved_tokens_learned_from_sglangs_refusal_leave_budgets_it_serves(
    version: str, reserved: int, pool: int
) -> None:
    """SGLang's own checks (each pinned release's tokenizer manager and scheduler, EAGLE
    reserving `reserved` tokens, its KV pool larger or smaller than the context) against
    the gateway's `TurnRunner`: it learns the reserved count from the tokenizer manager's
    first refusal, whichever of its two messages, never from the scheduler's (which counts
    the prompt alone) nor downwards; from then on every budget it sends is one SGLang
    serves (or its scheduler refuses the prompt itself, a full context either way), and a
    prompt it answers as a full context without asking is one SGLang's tokenizer manager
    refuses as such. Capped at context - prompt, as before, it refused them near the end."""
    context = 40
    limit = sglang_scheduler_limit(version, context, pool)
    runner = TurnRunner(
        SimpleNamespace(renderer=SimpleNamespace(get_stop_token_ids=list)),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        1.0,
        context_length=context,
    )
    req = SimpleNamespace(sampling={})
    session = SimpleNamespace(sampling_params={"max_new_tokens": 64})

    def budget(n: int) -> int:
        return int(runner.sampling_params(req, session, n)["max_new_tokens"])  # type: ignore[arg-type]

    def refusal(n: int, new: int) -> LengthRefusal | None:
        message = sglang_refusal(version, context, limit, n, new, reserved=reserved)
        return None if message is None else length_refusal(EngineError("x", 400, message))

    n0 = min(limit, context - reserved) - 2  # the prompt fits both checks, its budget not
    before = refusal(n0, budget(n0))
    assert before is not None and before.exact and before.fits  # the old cap, refused
    # The scheduler's refusal counts the prompt alone (here past the tokenizer manager's
    # check without reserved tokens, which the scheduler's never counts), not exact.
    message = sglang_refusal(version, context, limit, limit, 1)
    scheduler = length_refusal(EngineError("x", 400, str(message)))
    assert scheduler is not None and not scheduler.exact
    assert scheduler.input_tokens == limit  # why it is never learned from
    assert runner.reserved_tokens == 0
    runner.learn_reserved(before.input_tokens - n0)
    assert runner.reserved_tokens == reserved
    for n in (context - reserved, context):  # the prompt-too-long message names the same
        full = refusal(n, 1)
        assert full is not None and full.exact and not full.fits
        runner.learn_reserved(full.input_tokens - n)
    runner.learn_reserved(reserved - 5)  # a smaller count (another prompt) lowers nothing
    assert runner.reserved_tokens == reserved
    for n in range(min(limit, context - reserved) - 4, context + 2):
        theirs = refusal(n, 1)
        if runner.fills_with_reserved(n):
            assert theirs is not None and theirs.exact and not theirs.fits, n
            continue
        assert budget(n) >= 1
        served = refusal(n, budget(n))
        assert served is None or (not served.exact and not served.fits), n
        assert (served is None) == (n < limit), n
        assert served is None or runner._limit_met(served.context, served.exact) == (
            "kv_cache" if pool < context else "context"
        )


QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}


@pytest.mark.parametrize("version", upstream.sglang_pin()["versions"])  # type: ignore[arg-type]
@pytest.mark.parametrize(
    "config",
    [
        {**QWEN2, "max_position_embeddings": 32768},
        {**QWEN2, "max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0}},
        # YaRN without its original length: transformers 5 fills it in, so no factor.
        {
            **QWEN2,
            "max_position_embeddings": 32768,
            "rope_scaling": {"type": "yarn", "factor": 4.0},
        },
        {
            **QWEN2,
            "max_position_embeddings": 32768,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
        },
        {
            **QWEN2,
            "max_position_embeddings": 131072,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
            },
        },
        {
            **QWEN2,
            "max_position_embeddings": 32768,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        },
        # As a checkpoint saved by transformers 5 writes its scaling.
        {
            **QWEN2,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
        },
        {
            "model_type": "llama",
            "max_position_embeddings": 131072,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
    ],
)
def test_the_context_is_what_sglang_derives_from_the_config_transformers_loads(
    version: str, config: dict[str, Any], tmp_path: Path
) -> None:
    """SGLang reads the context from the config as transformers builds it (both releases pin
    transformers 5, which rewrites rope scaling first); the gateway's cap and the launcher's
    check must come to the same number from the same config.json."""
    transformers = pytest.importorskip("transformers")
    get_context_length = sglang_get_context_length(version)
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    loaded = transformers.AutoConfig.from_pretrained(str(tmp_path))
    assert context_length_of(config) == get_context_length(loaded)


def hub_cache(monkeypatch: pytest.MonkeyPatch, root: Path, repo: str, files: Path) -> None:
    """A Hugging Face cache under `root` holding `files` as the snapshot of `repo`, in the
    layout huggingface_hub itself reads (refs/main names the snapshot), used offline."""
    import huggingface_hub.constants

    snapshot = root / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    shutil.copytree(files, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    # huggingface_hub reads these once, at import; set for this process and its children.
    for name, value in (("HF_HUB_CACHE", str(root)), ("HF_HUB_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_an_unreadable_config_leaves_the_context_unknown_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert checkpoint_context_length(str(tmp_path)) is None
    (tmp_path / "config.json").write_text("{not json")
    assert checkpoint_context_length(str(tmp_path)) is None
    (tmp_path / "empty").mkdir()
    hub_cache(monkeypatch, tmp_path / "hub", "Qwen/Qwen3-8B", tmp_path / "empty")
    assert checkpoint_context_length("Qwen/Qwen3-4B") is None  # a hub id nobody has
    assert sum("not capped" in r.getMessage() for r in caplog.records) == 3


@pytest.fixture(params=[503, 429])
def down_hub(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[str]]]:
    """A hub that is down (503), or rate-limits (429): huggingface_hub retries both."""
    with hub_down(request.param) as hub:
        yield hub


@pytest.mark.parametrize("offline", [False, True])
@pytest.mark.parametrize("cached", [False, True])
def test_a_hub_that_does_not_answer_is_asked_once_then_the_cache_is_read(
    down_hub: tuple[str, list[str]], tmp_path: Path, offline: bool, cached: bool
) -> None:
    """huggingface_hub's own hf_hub_download, with the hub down and config.json not cached,
    asked again with backoff (at 2.4.0: 6 requests and some 23 seconds) before the gateway
    fell back to "unknown, not capped", and every gateway start waited for it. Now the hub is
    asked once, and not at all with HF_HUB_OFFLINE; the cache answers either way. In a fresh
    process: huggingface_hub reads its endpoint and offline switch at import."""
    url, seen = down_hub
    repo, cache = "Qwen/Qwen3-8B", tmp_path / "hub"
    if cached:
        snapshot = cache_snapshot(cache, repo)
        (snapshot / "config.json").write_text('{"max_position_embeddings": 40960}')
    env = hub_env(url, tmp_path / "home", cache, offline)
    code = (
        "from agentrl.bundle.gateway.context import checkpoint_context_length as c; "
        f"print(c({repo!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.split()[-1] == ("40960" if cached else "None"), done.stderr
    asked = [s for s in seen if repo in s]  # not the library's own calls (2.4.0's at import)
    assert asked == ([] if offline else [f"HEAD /{repo}/resolve/main/config.json"])


async def test_a_hub_id_s_context_comes_from_its_config_json_as_sglang_s_does(
    cluster: Cluster, checkpoint: Path, renderer: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """SGLang derives a hub id's context from the config.json it downloads; the gateway,
    given the hub id as the pods give it, knew none and capped nothing, so a conversation
    that left less room than the session's max_new_tokens was refused by the engine (400)
    in training, while `agentrl rehearse --model-dir` (a local copy, config.json included)
    capped it and passed. Both now read the same file."""
    context = prompt_len(renderer) + 3
    files = Path(shutil.copytree(checkpoint, tmp_path / "files"))
    (files / "config.json").write_text(json.dumps({"max_position_embeddings": context}))
    hub_cache(monkeypatch, tmp_path / "hub", "Qwen/Qwen3-8B", files)
    assert checkpoint_context_length("Qwen/Qwen3-8B") == context
    cluster.set(context_len=context)
    for where in ("Qwen/Qwen3-8B", str(files)):  # the pods', and the rehearsal's local copy
        gateway = await started(cluster, Path(where))
        try:
            assert gateway.context_length == context
            handle = await gateway.create_session(f"cfg{len(where)}", {"max_new_tokens": BUDGET})
            c = openai.AsyncOpenAI(base_url=handle.base_url, api_key=handle.token, max_retries=0)
            out = await c.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
            assert out.choices[0].finish_reason in ("stop", "length")
        finally:
            await gateway.stop()
    sent = [r["sampling_params"]["max_new_tokens"] for r in cluster.all_requests()]
    assert sent == [3, 3]


@pytest.mark.parametrize(
    ("event", "status"),
    [
        # SGLang's own event for a refused stream (http_server.py, 0.5.13 and 0.5.15.post1).
        ({"message": "too long", "type": "invalid_request_error", "code": 400}, 400),
        ({"message": "boom", "code": 500}, 500),
        ({"message": "no code"}, None),
        ({"message": "odd", "code": "400"}, None),  # not an integer: no status invented
        ("a bare string", None),
    ],
)
def test_a_stream_error_event_keeps_the_status_it_names(event: Any, status: int | None) -> None:
    with pytest.raises(EngineError) as err:
        StreamState().add(orjson.dumps({"error": event}))  # one chunk's JSON, as it streams
    assert err.value.status == status and "engine stream error" in str(err.value)
