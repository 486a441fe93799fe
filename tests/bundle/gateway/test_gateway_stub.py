"""The stub engine and router speak SGLang's protocol; the gateway's engine client reads it
the way slime does. Both sides are checked against the protocol reference, so a stub that
drifted from SGLang would fail here rather than hide gateway bugs."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import aiohttp
import orjson
import pytest
from tests.support.sglang_stub import StubRouter, stub_logprob

from agentrl.bundle.gateway.engine import EngineClient
from agentrl.bundle.gateway.sglang import (
    EngineError,
    StreamState,
    engine_requests,
    parse_generate_response,
    worker_urls,
)

from .gateway_helpers import Cluster, until


async def post(url: str, body: Any) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as r:
        return r.status, await r.read()


async def test_generate_returns_logprob_triples_and_caps_at_max_new_tokens(
    cluster: Cluster,
) -> None:
    e = cluster.engines[0]
    e.responder = lambda prompt, params: list(range(20, 40))
    status, raw = await post(
        e.url + "/generate",
        {
            "rid": "r1",
            "input_ids": [1, 2, 3],
            "return_logprob": True,
            "sampling_params": {"max_new_tokens": 5},
        },
    )
    body = orjson.loads(raw)
    assert status == 200 and body["output_ids"] == [20, 21, 22, 23, 24]
    meta = body["meta_info"]
    assert (
        meta["finish_reason"] == {"type": "length", "length": 5} and meta["completion_tokens"] == 5
    )
    assert meta["output_token_logprobs"] == [
        [stub_logprob(t, i), t, None] for i, t in enumerate(body["output_ids"])
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input_ids": []}, "input_ids cannot be empty."),
        ({"sampling_params": {}}, "Either text, input_ids or input_embeds should be provided."),
        ({"input_ids": [10**9]}, "Token id out of range"),
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, "top_p must be in (0, 1]"),
    ],
)
async def test_generate_rejects_bad_requests_like_sglang(
    cluster: Cluster, body: dict[str, Any], message: str
) -> None:
    status, raw = await post(cluster.engines[0].url + "/generate", body)
    assert status == 400 and orjson.loads(raw)["error"]["message"].startswith(message)


@pytest.mark.parametrize("incremental", [False, True])
async def test_stream_is_cumulative_by_default_and_incremental_on_request(
    cluster: Cluster, incremental: bool
) -> None:
    e = cluster.engines[0]
    e.incremental_stream = incremental
    e.responder = lambda prompt, params: [20, 21, 22]
    _, raw = await post(
        e.url + "/generate", {"input_ids": [1], "stream": True, "return_logprob": True}
    )
    events = [line.removeprefix(b"data: ") for line in raw.split(b"\n\n") if line]
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(x) for x in events[:-1]]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "stop"
    if incremental:
        assert [i for c in chunks for i in c["output_ids"]] == [20, 21, 22]
    else:
        assert [c["output_ids"] for c in chunks] == [[20], [20, 21], [20, 21, 22], [20, 21, 22]]


async def test_batch_returns_an_array_in_order(cluster: Cluster) -> None:
    _, raw = await post(
        cluster.engines[0].url + "/generate", {"input_ids": [[1, 2], [3]], "rid": "b"}
    )
    out = orjson.loads(raw)
    assert [o["meta_info"]["id"] for o in out] == ["b_0", "b_1"] and [
        o["meta_info"]["prompt_tokens"] for o in out
    ] == [2, 1]


async def test_abort_finishes_in_flight_requests_and_router_does_not_forward_it(
    cluster: Cluster,
) -> None:
    e = cluster.engines[0]
    e.token_delay_s = 0.2
    call = asyncio.create_task(
        post(e.url + "/generate", {"rid": "slow", "input_ids": [1], "return_logprob": True})
    )
    await until(lambda: "slow" in e._live, "the request is running")
    assert await post(cluster.router.url + "/abort_request", {"rid": "slow"}) == (
        404,
        b"404: Not Found",
    )
    assert await post(e.url + "/abort_request", {"rid": "unknown"}) == (200, b"")
    assert await post(e.url + "/abort_request", {"rid": "slow"}) == (200, b"")
    body = orjson.loads((await call)[1])
    assert body["meta_info"]["finish_reason"]["type"] == "abort" and e.aborted == [
        "unknown",
        "slow",
    ]


async def test_engine_client_aborts_through_the_router_worker_list(cluster: Cluster) -> None:
    async with aiohttp.ClientSession() as http:
        client = EngineClient(cluster.router.url, http)
        assert await client.workers() == [e.url for e in cluster.engines]
        assert await client.abort("r-9") == [e.url for e in cluster.engines]
    assert all(e.aborted == ["r-9"] for e in cluster.engines)


def test_completion_parsing_follows_slime() -> None:
    body = {
        "output_ids": [5, 6],
        "meta_info": {
            "id": "x",
            "finish_reason": {"type": "stop", "matched": 6},
            "output_token_logprobs": [[-0.5, 5, None], [-0.25, 6, None]],
            "weight_version": "step-3",
            "some_new_key": 1,
        },
    }
    done = parse_generate_response(body)
    assert (
        done.ids,
        done.logprobs,
        done.finish_reason,
        done.matched_stop,
        done.weight_version,
    ) == ([5, 6], [-0.5, -0.25], "stop", 6, "step-3")
    thin = {
        "text": "",
        "meta_info": {
            "id": "x",
            "finish_reason": {"type": "abort", "message": "Abort before prefill"},
            "prompt_tokens": 0,
            "completion_tokens": 0,
        },
    }
    assert (
        parse_generate_response(thin).ids == []
        and parse_generate_response(thin).finish_reason == "abort"
    )
    no_logprobs = {
        "output_ids": [7],
        "meta_info": {"id": "x", "finish_reason": {"type": "length", "length": 1}},
    }
    assert parse_generate_response(no_logprobs).logprobs is None  # never invented
    with pytest.raises(EngineError, match="disagree"):
        parse_generate_response({**body, "output_ids": [5, 7]})
    with pytest.raises(EngineError, match="finish_reason"):
        parse_generate_response({"meta_info": {"finish_reason": None}})


@pytest.mark.parametrize(
    "meta",
    [
        {"output_token_logprobs": [[-0.5, 5.0, None]]},  # int(5.7) would be silent
        {"output_token_logprobs": [[-0.5, 5.7, None]]},
        {"output_token_logprobs": [[-0.5, True, None]]},
        {"output_token_logprobs": [[-0.5, -1, None]]},
        {"output_token_logprobs": [[-0.5, 2**40, None]]},
        {"output_token_logprobs": [[-0.5, "5", None]]},
        {"output_token_logprobs": [5]},
        {"output_token_logprobs": "x"},
    ],
)
def test_token_ids_the_engine_reports_are_integers_never_coerced(meta: dict[str, Any]) -> None:
    body = {"meta_info": {"id": "x", "finish_reason": {"type": "length", "length": 1}, **meta}}
    with pytest.raises(EngineError, match=r"token ids|output_token_logprobs"):
        parse_generate_response(body)
    with pytest.raises(EngineError, match="token ids"):
        parse_generate_response(
            {"output_ids": [1.5], "meta_info": body["meta_info"] | {"output_token_logprobs": None}}
        )


def test_null_logprobs_are_nan_not_a_crash() -> None:
    """SGLang serialises a NaN/inf logprob as JSON null: still a turn, masked by the merge."""
    body = {
        "output_ids": [5, 6, 7],
        "meta_info": {
            "id": "x",
            "finish_reason": {"type": "stop", "matched": 7},
            "output_token_logprobs": [[None, 5, None], [-0.5, 6, None], ["x", 7, None]],
        },
    }
    done = parse_generate_response(body)
    assert done.ids == [5, 6, 7] and done.logprobs is not None
    assert math.isnan(done.logprobs[0]) and done.logprobs[1] == -0.5
    assert math.isnan(done.logprobs[2])


TRIPLES = [[-0.1, 11, None], [-0.2, 12, None], [-0.3, 13, None]]


def chunk(ids: list[int], finish: Any, triples: Any, total: int, **meta: Any) -> bytes:
    """One `/generate` stream chunk's JSON, with the keys SGLang's tokenizer manager sets."""
    info = {"id": "r", "finish_reason": finish, "weight_version": "default", **meta}
    if triples is not None:
        info["output_token_logprobs"] = triples
    return orjson.dumps(
        {"text": "", "output_ids": ids, "meta_info": info | {"completion_tokens": total}}
    )


@pytest.mark.parametrize("incremental", [False, True])
def test_a_stream_aborted_in_the_engines_queue_keeps_every_sampled_token(
    incremental: bool,
) -> None:
    """A request retracted to SGLang's waiting queue keeps its output; aborted there (by rid,
    `abort_all`, a weight update), its stream ends on `_handle_abort_req`'s echo: only the
    last id in `output_ids`, every triple so far, no prompt_tokens. Before, the parser
    failed it ("1 new items do not add up to 3 tokens"): a 502 and no recorded turn."""
    state = StreamState()
    if incremental:
        state.add(chunk([11, 12], None, TRIPLES[:2], 2, prompt_tokens=4))
        state.add(chunk([13], None, TRIPLES[2:], 3, prompt_tokens=4))
    else:
        state.add(chunk([11, 12, 13], None, TRIPLES, 3, prompt_tokens=4))
    echo = {"type": "abort", "message": "Abort in waiting queue"}
    state.add(chunk([13], echo, TRIPLES, 3, e2e_latency=1.5))
    done = state.completion()
    assert (done.ids, done.logprobs, done.finish_reason) == (
        [11, 12, 13],
        [-0.1, -0.2, -0.3],
        "abort",
    )
    broken = StreamState()  # anything else that does not add up is still an engine error
    broken.add(chunk([11, 12, 13], None, TRIPLES, 3))
    with pytest.raises(EngineError, match="do not add up"):
        broken.add(chunk([13], {"type": "stop", "matched": 13}, TRIPLES, 3))


SCHEDULER_REFUSAL = {
    "type": "abort",
    "message": "Input length (32762 tokens) exceeds the maximum allowed length (32762 tokens). "
    "Use a shorter input or enable --allow-auto-truncate.",
    "status_code": 400,
    "err_type": "BadRequestError",
}


@pytest.mark.parametrize(
    ("finish", "triples", "status"),
    [
        # The scheduler's refusal (`set_finish_with_abort`): one token sampled after a
        # stand-in prompt, and the logprobs turned off ([] beside logprob requests, else none).
        (SCHEDULER_REFUSAL, [], 400),
        (SCHEDULER_REFUSAL, None, 400),
        ({"type": "abort", "message": "The request queue is full.", "status_code": 503}, [], 503),
        (
            {"type": "abort", "message": "Out of memory", "status_code": 500, "err_type": None},
            [],
            500,
        ),
    ],
)
def test_a_streamed_abort_with_a_status_is_the_engines_error_not_a_turn(
    finish: dict[str, Any], triples: Any, status: int
) -> None:
    """SGLang answers these with that HTTP status unstreamed, and streams them as the last
    chunk (`_handle_abort_finish_reason`). Before, the stream was a 502 ("0 new items do
    not add up to 1 tokens") or, without triples, an aborted turn recorded with the token
    sampled after the stand-in prompt and answered 503 "retry"."""
    ids = [7] if finish is SCHEDULER_REFUSAL else []
    with pytest.raises(EngineError, match="engine refused") as err:
        StreamState().add(chunk(ids, finish, triples, len(ids)))
    assert err.value.status == status
    body = {"output_ids": ids, "meta_info": {"id": "r", "finish_reason": finish}}
    with pytest.raises(EngineError, match="engine refused"):
        parse_generate_response(body)
    plain = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    assert parse_generate_response(body | {"meta_info": {"finish_reason": plain}}).ids == ids


def test_engine_loads_are_read_like_slime_reads_them() -> None:
    assert engine_requests({"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 1}]}) == 3
    assert engine_requests({"loads": [{"num_reqs": 1}, {"num_total_reqs": 4}]}) == 5
    assert engine_requests([{"num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 9}]) == 0
    assert engine_requests({"total_reqs": 2}) == 2
    # A router's per-worker `load` numbers are not request counts: unknown, not idle.
    assert engine_requests({"loads": [{"worker": "http://h:1", "load": 0}]}) is None
    assert engine_requests("nope") is None


def test_worker_lists_new_and_legacy() -> None:
    assert worker_urls({"workers": [{"id": "a", "url": "http://h:1/"}, {"id": "b"}]}) == [
        "http://h:1"
    ]
    assert worker_urls({"urls": ["http://h:2"]}) == ["http://h:2"]
    assert worker_urls({"nope": 1}) == []
    dp = {"workers": [{"url": "http://h:1@0"}, {"url": "http://h:1@1"}, {"url": "http://g:2"}]}
    assert worker_urls(dp) == ["http://h:1", "http://g:2"]  # DP ranks: one engine, one abort


async def test_a_router_that_drops_the_rid_is_reported_once(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    router = StubRouter([e.url for e in cluster.engines], drop_fields=frozenset({"rid"}))
    await router.start()
    try:
        async with aiohttp.ClientSession() as http:
            client = EngineClient(router.url, http)
            for i in range(2):
                await client.generate([1, 2], {"max_new_tokens": 4}, f"mine-{i}", 30)
    finally:
        await router.stop()
    warnings = [r for r in caplog.records if "does not forward `rid`" in r.getMessage()]
    assert len(warnings) == 1
