"""Streaming costs linear time in the answer: engine chunks split and accumulated without
rebuilding anything per chunk, and the agent's deltas computed from new tokens only, while
staying exactly what the final parse says."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.sglang_stub import stub_logprob

from agentrl.bundle.gateway import GatewayServer
from agentrl.bundle.gateway.chat import ChatRequest, ModelOutput
from agentrl.bundle.gateway.engine import EngineClient
from agentrl.bundle.gateway.sglang import (
    Completion,
    EngineError,
    SseEvents,
    StreamState,
    parse_generate_response,
)
from agentrl.bundle.gateway.streaming import Detokenizer, Preview

from .gateway_helpers import MESSAGES, Cluster, scripted

# ---- SSE splitting ------------------------------------------------------------------------


def sse(events: list[bytes]) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in events)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"x").strip() or b"z"),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_sse_events_come_out_whole_however_the_bytes_are_cut(
    events: list[bytes], cuts: list[int]
) -> None:
    events = [e for e in events if not e.startswith(b":")]  # those are comments
    stream = b": keep-alive\n\n" + sse(events) + b"data: [DONE]\n\n"
    splitter, out, at = SseEvents(), [], 0
    for cut in sorted({min(c, len(stream)) for c in cuts} | {len(stream)}):
        out += splitter.feed(stream[at:cut])
        at = cut
    assert out == [*events, b"[DONE]"]


# ---- engine chunks --------------------------------------------------------------------------


def chunks(
    ids: list[int], interval: int, *, ids_incremental: bool, logprobs_incremental: bool
) -> list[bytes]:
    """An SGLang stream of `ids`, one chunk per `interval` tokens (its output streamer's rule),
    each field incremental or cumulative, the last chunk with a finish_reason."""
    out, sent, marks = [], 0, [n for n in range(1, len(ids) + 1) if n % interval == 1]
    for n in [*marks, len(ids)]:
        triples = [[-(i % 7) / 8.0, t, None] for i, t in enumerate(ids[:n])]
        meta: dict[str, Any] = {
            "id": "r",
            "finish_reason": {"type": "stop", "matched": ids[-1]} if n == len(ids) else None,
            "prompt_tokens": 3,
            "completion_tokens": n,
            "output_token_logprobs": triples[sent:] if logprobs_incremental else triples,
        }
        out.append(
            orjson.dumps(
                {"output_ids": ids[sent:n] if ids_incremental else ids[:n], "meta_info": meta}
            )
        )
        sent = n
    return out


@pytest.mark.parametrize(
    ("ids_incremental", "logprobs_incremental"),
    [(True, True), (False, False), (True, False)],
    ids=["incremental", "cumulative", "incremental ids, cumulative logprobs"],
)
@pytest.mark.parametrize("interval", [1, 3, 64])
def test_a_stream_gives_exactly_the_non_stream_completion(
    ids_incremental: bool, logprobs_incremental: bool, interval: int
) -> None:
    ids = [random.Random(interval).randrange(16, 900) for _ in range(300)]
    stream = chunks(
        ids, interval, ids_incremental=ids_incremental, logprobs_incremental=logprobs_incremental
    )
    state, seen = StreamState(clock=lambda: 0.0), []
    for data in stream:
        if state.add(data):
            seen.append(list(state.ids))
        if state.finished:
            break
    final = chunks(ids, len(ids) + 1, ids_incremental=False, logprobs_incremental=False)[-1]
    assert state.completion() == parse_generate_response(orjson.loads(final))
    assert all(ids[: len(s)] == s for s in seen)  # progress only ever extends


def test_a_cumulative_stream_is_read_a_logarithmic_number_of_times() -> None:
    """SGLang's default repeats every token in every chunk: reading each would be quadratic."""
    ids = list(range(16, 4016))
    state, reads = StreamState(clock=lambda: 0.0), 0
    original = state._take

    def counted(data: bytes) -> bool:
        nonlocal reads
        reads += 1
        return original(data)

    state._take = counted  # type: ignore[method-assign]
    for data in chunks(ids, 1, ids_incremental=False, logprobs_incremental=False):
        state.add(data)
    assert state.finished and state.completion().ids == ids
    assert reads <= 16  # 4,000 chunks: the first two, each doubling, the last


def test_a_stream_that_ends_early_or_breaks_is_an_engine_error() -> None:
    ids = list(range(16, 40))
    for stream in (
        chunks(ids, 1, ids_incremental=False, logprobs_incremental=False)[:-1],
        [b'{"error": {"message": "boom"}}'],
    ):
        state = StreamState(clock=lambda: 0.0)
        with pytest.raises(EngineError):
            for data in stream:
                state.add(data)
            state.completion()


# ---- deltas ---------------------------------------------------------------------------------
FRAGMENTS = [
    "The answer is 42. ",
    "Let me think step by step about it, ",
    "naïve café 東京 🙂 ",  # multi-byte characters, split across byte-level tokens
    "  spaced   out\n\n",
    "def main():\n    print('hello world')\n",
    "a < b and </thi",  # a tag spelled as text, in pieces
    "nk> continues ",
]


@settings(max_examples=60, deadline=None)
@given(
    answer=st.tuples(
        st.lists(st.sampled_from(FRAGMENTS), max_size=6),  # reasoning
        st.lists(st.sampled_from(FRAGMENTS), max_size=8),  # content
        st.booleans(),  # a tool call at the end
    ),
    step=st.integers(min_value=1, max_value=40),
)
def test_streamed_deltas_add_up_to_the_final_answer(
    tok: Any, renderer: Any, answer: tuple[list[str], list[str], bool], step: int
) -> None:
    reasoning, content, tool = answer
    text = f"<think>\n{''.join(reasoning)}\n</think>\n\n{''.join(content)}"
    if tool:
        text += '\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    ids = [*tok.encode(text), tok.convert_tokens_to_ids("<|im_end|>")]
    req = ChatRequest(MESSAGES, None, True, {}, True, "m")
    preview = Preview(renderer, tok, req, [1, 2, 3], renderer.get_stop_token_ids())
    got = {"reasoning": "", "content": ""}
    for n in range(step, len(ids) + step, step):
        for channel, delta in preview.update(ids[: min(n, len(ids))]):
            got[channel] += delta
    final = renderer.parse_response(ids, prompt_ids=[1, 2, 3])
    out = ModelOutput(final.content, final.reasoning_content)
    for channel, delta in preview.tracker.update(out.reasoning or "", out.content, final=True):
        got[channel] += delta
    assert got == {"reasoning": final.reasoning_content or "", "content": final.content}


def test_a_long_answer_is_parsed_whole_only_where_its_structure_changes(
    tok: Any, renderer: Any
) -> None:
    text = "<think>\n" + "weigh it up " * 400 + "\n</think>\n\n" + "the answer is 42 " * 1500
    ids = [*tok.encode(text), tok.convert_tokens_to_ids("<|im_end|>")]
    req = ChatRequest(MESSAGES, None, True, {}, True, "m")
    preview = Preview(renderer, tok, req, [1, 2, 3], renderer.get_stop_token_ids())
    parsed: list[int] = []
    original = preview._parse

    def counted(seen: list[int]) -> list[tuple[str, str]]:
        parsed.append(len(seen))
        return original(seen)

    preview._parse = counted  # type: ignore[method-assign]
    seen: list[int] = []
    for token in ids:  # one token per engine chunk
        seen.append(token)
        preview.update(seen)
    assert len(ids) > 8_000
    assert parsed == [1, 3605]  # the start and `</think>`: never once per chunk


@settings(max_examples=100, deadline=None)
@given(text=st.text(min_size=1, max_size=60), cuts=st.lists(st.integers(1, 80), max_size=10))
def test_incremental_decoding_gives_the_whole_text(tok: Any, text: str, cuts: list[int]) -> None:
    ids = tok.encode(text)
    detok, pieces = Detokenizer(tok), []
    for cut in [*sorted(cuts), len(ids)]:
        pieces.append(detok.feed(ids[: min(cut, len(ids))]))
    assert "".join(pieces) == tok.decode(ids) == detok.text


# ---- through the gateway ----------------------------------------------------------------------
async def stream_once(handle: Any) -> None:
    body = {"messages": MESSAGES, "stream": True}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            handle.base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {handle.token}"},
        ) as r,
    ):
        assert r.status == 200
        await r.read()


@pytest.mark.parametrize("incremental", [False, True])
async def test_the_engine_streams_in_chunks_of_stream_interval_tokens(
    gateway: GatewayServer, cluster: Cluster, tok: Any, incremental: bool
) -> None:
    cluster.set(responder=scripted(tok, "word " * 300), incremental_stream=incremental)
    await stream_once(await gateway.create_session("interval-default", {}))
    await stream_once(await gateway.create_session("interval-own", {"stream_interval": 5}))
    default, own = cluster.all_requests()
    assert default["sampling_params"]["stream_interval"] == gateway.settings.stream_interval
    assert own["sampling_params"]["stream_interval"] == 5  # the session's own wins
    for sid, sent in (("interval-default", default), ("interval-own", own)):
        (turn,) = await gateway.get_turns(sid)
        assert list(turn.completion_ids) == cluster.sampled(sent["rid"])  # exact, however chunked


def test_the_stub_streams_like_sglang_every_stream_interval_tokens() -> None:
    """SGLang's output streamer: a chunk at tokens 1, 1 + k, 1 + 2k, ... and at the end."""
    assert [n for n in range(1, 12) if sglang_rule(n, 4)] == [1, 5, 9]
    assert [n for n in range(1, 4) if sglang_rule(n, 1)] == [1, 2, 3]


def sglang_rule(n: int, interval: int) -> bool:
    from tests.support.sglang_stub import _streams

    return _streams(n, {"stream_interval": interval}, 1)


# ---- reading the engine stream no more often than the consumer wants it -------------------


SAMPLED = list(range(100, 400))


async def _an_hour_between_reads(
    cluster: Cluster, incremental: bool, rid: str
) -> tuple[list[int], Completion]:
    """A stream of one chunk per token (spread over about 0.3 s: a read per chunk unless they
    wait), to a consumer that wants no more tokens for an hour: (the token counts it was
    called with, the answer). Checks the answer exact, every id and logprob."""
    cluster.set(
        responder=lambda prompt, params: SAMPLED,
        incremental_stream=incremental,
        token_delay_s=0.001,
    )
    calls: list[int] = []

    async def on_tokens(ids: list[int]) -> float:
        calls.append(len(ids))
        return asyncio.get_running_loop().time() + 3600.0

    async with aiohttp.ClientSession() as http:
        client = EngineClient(cluster.router.url, http)
        async with asyncio.timeout(60):  # a hang guard: the hour must not be waited out
            done = await client.generate_stream(
                [1, 2, 3],
                {"max_new_tokens": len(SAMPLED), "stream_interval": 1},
                rid,
                600.0,
                on_tokens=on_tokens,
            )
    assert done.ids == SAMPLED == cluster.sampled(rid)
    assert done.logprobs == [stub_logprob(t, i) for i, t in enumerate(SAMPLED)]
    return calls, done


async def test_engine_chunks_wait_until_the_consumer_wants_them_and_the_end_comes_at_once(
    cluster: Cluster,
) -> None:
    """A consumer that wants no more tokens for an hour is called at most twice (one chunk
    does not yet show the stream incremental): the chunks sampled meanwhile wait in the
    connection, and the end of the answer is read as soon as it comes (the hour is never
    waited out)."""
    calls, done = await _an_hour_between_reads(cluster, True, "paced-1")
    assert len(calls) <= 2, f"the consumer was called after {calls[:10]} tokens"
    assert done.finish_reason == "length"


async def test_cumulative_engine_chunks_are_read_as_they_come(cluster: Cluster) -> None:
    """Cumulative chunks (each repeats the answer so far) are not left waiting for the
    consumer: waiting, they outgrow the connection's buffer. The answer stays exact."""
    calls, _ = await _an_hour_between_reads(cluster, False, "cumulative-1")
    assert len(calls) > 1  # read on as the chunks came, over about 0.3 s
