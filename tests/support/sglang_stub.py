"""A stub SGLang engine and router speaking the real HTTP protocol (no GPU).

Follows SGLang 0.5's HTTP server (https://github.com/sgl-project/sglang, `http_server.py`,
`io_struct.GenerateReqInput`): `/generate` on `input_ids` (single and
batch, JSON and SSE, cumulative or incremental streaming) with `output_token_logprobs`
triples, `finish_reason` objects, `/abort_request` that finishes the targeted in-flight
calls with `abort` and records what it was asked to abort, plus the health/info/load
endpoints slime polls. Tokens and logprobs are deterministic functions of the prompt, so a
test can compare a gateway's trace with exactly what was sampled. `token_delay_s` is the
slow mode, `fail_next`/`fail_status` the failure mode, `null_logprobs` the way SGLang
serialises NaN/inf logprobs (JSON null), and `miss_rid_aborts` the race where an abort by
rid reaches the engine before its request does (a no-op there; only `abort_all` helps);
`miss_abort_all` makes `abort_all` miss too (requests still being tokenised slip through).
`gate`, when set, holds every generation until the event is set (requests stay in flight
for as long as a test needs). `context_len` turns on the tokenizer manager's context check
(`_validate_one_request` at 0.5.13 and 0.5.15.post1, no `--allow-auto-truncate`): an input
of `context_len` tokens or more, or input + `max_new_tokens` above it (the input counted
with `reserved_tokens`, SGLang's `num_reserved_tokens` under EAGLE), is refused with a
ValueError's message, which the HTTP server answers as 400 `{"error": {"message"}}`, or,
for a stream, as HTTP 200 with one `data: {"error": {..., "code": 400}}` event and `[DONE]`
(as are its other input checks a stream meets: ids past the vocabulary, a bad `top_p`).
`max_req_input_len` turns on the scheduler's own check behind it (`validate_input_length`,
`max_req_len - 5`, so a prompt a few tokens short of the context): a prompt of that many
tokens or more is aborted with status 400, which SGLang answers as the same 400 unstreamed,
and streamed as one last chunk whose `finish_reason` carries the status, after one token
sampled on a stand-in prompt with logprobs off (`set_finish_with_abort`).
Bodies of any size are accepted, as by SGLang's server. `GET /metrics` serves SGLang's own
families as `--enable-metrics` makes it (names, types and labels recorded from its source by
hack/record-sglang-metrics.py); `metrics_up = False` answers 503.
`StubRouter` lists workers like the Rust router and, like it, answers 404 to
`/abort_request`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from tests.support.sglang_router import StubRouter

# SGLang's metric families as its releases declare them (hack/record-sglang-metrics.py).
RECORDED_METRICS = Path(__file__).resolve().parent / "recorded" / "sglang-engine.prom"

__all__ = ["StubEngine", "StubRouter", "stub_logprob"]

Responder = Callable[[list[int], dict[str, Any]], list[int]]


def stub_logprob(token_id: int, position: int) -> float:
    """The stub's deterministic logprob of sampling `token_id` at `position`."""
    return -(((token_id * 31 + position * 7) % 997) + 1) / 1000.0


@dataclass
class StubEngine:
    vocab_size: int = 1000
    responder: Responder | None = None  # prompt ids, sampling params -> ids to "sample"
    first_free_id: int = 16  # the default responder never samples ids below this (specials)
    token_delay_s: float = 0.0  # slow mode: sleep per generated token
    fail_next: int = 0  # failure mode: this many next /generate calls fail
    fail_status: int = 500
    incremental_stream: bool = False
    stream_interval: int = 1  # the server's --stream-interval; a request's sampling param wins
    null_logprobs: bool = False  # every output logprob comes back as null (NaN/inf in SGLang)
    miss_rid_aborts: bool = False  # aborts by rid find nothing (they "arrived too early")
    miss_abort_all: bool = False  # abort_all finds nothing either
    decode: Callable[[list[int]], str] | None = None  # the tokenizer, for `stop` strings
    gate: asyncio.Event | None = None  # generations wait for it (None: never held)
    context_len: int | None = None  # the engine's context (None: no check)
    max_req_input_len: int | None = None  # the scheduler's input limit (None: no check)
    reserved_tokens: int = 0  # counted with each input (speculative decoding's draft tokens)
    requests: list[dict[str, Any]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)  # rids asked to abort ("*" = abort_all)
    sampled: dict[str, list[int]] = field(default_factory=dict)  # rid -> ids returned
    _live: dict[str, asyncio.Event] = field(default_factory=dict)
    _out: dict[str, list[int]] = field(default_factory=dict)  # rid -> ids sampled so far
    # What GET /metrics serves (SGLang's own families, recorded from its source), while up.
    metrics_text: str = field(default_factory=RECORDED_METRICS.read_text)
    metrics_up: bool = True
    _runner: web.AppRunner | None = None
    url: str = ""

    def default_tokens(self, prompt: Sequence[int], params: dict[str, Any]) -> list[int]:
        rng = random.Random(hash(tuple(prompt)))
        n = rng.randint(3, 12)
        ids = [rng.randrange(self.first_free_id, self.vocab_size) for _ in range(n)]
        stops = params.get("stop_token_ids") or []
        return ids + ([int(stops[0])] if stops else [])

    def _stop_string(self, out: list[int], stop: Any) -> str | None:
        """SGLang matches stop strings on the decoded tail (it needs the tokenizer: `decode`)."""
        if not stop or self.decode is None:
            return None
        text = self.decode(out)
        return next((s for s in ([stop] if isinstance(stop, str) else stop) if s in text), None)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)  # uvicorn sets no body limit
        app.router.add_post("/generate", self._generate)
        app.router.add_put("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort)
        for path in ("/health", "/health_generate"):
            app.router.add_get(path, lambda _: web.Response(text=""))
        app.router.add_get(
            "/get_model_info",
            lambda _: _json(
                {"model_path": "stub", "is_generation": True, "weight_version": "default"}
            ),
        )
        app.router.add_get("/get_server_info", lambda _: _json({"version": "stub"}))
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get(
            "/v1/loads",
            lambda _: _json(
                {"loads": [{"num_running_reqs": len(self._live), "num_waiting_reqs": 0}]}
            ),
        )
        app.router.add_route("*", "/flush_cache", self._flush)
        app.router.add_post("/v1/chat/completions", self._openai_chat)  # for OpenAI-style proxies
        app.router.add_get(
            "/v1/models",
            lambda _: _json({"object": "list", "data": [{"id": "stub", "object": "model"}]}),
        )
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.url = f"http://{host}:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        if not self.metrics_up:
            return web.Response(status=503)
        return web.Response(text=self.metrics_text, content_type="text/plain")

    # ---- /generate ----------------------------------------------------------------
    def _validate(self, body: Any) -> str | None:
        if (
            not isinstance(body, dict)
            or sum(k in body for k in ("text", "input_ids", "input_embeds")) != 1
        ):
            return "Either text, input_ids or input_embeds should be provided."
        ids = body.get("input_ids")
        if not ids:
            return "input_ids cannot be empty."
        flat = ids if isinstance(ids[0], int) else list(itertools.chain.from_iterable(ids))
        # min/max in C: a prompt of millions of ids must not stall the stub's event loop
        # (it serves every session, like the engine's own front end).
        if min(flat) < 0 or max(flat) >= self.vocab_size:
            return f"Token id out of range (vocab size {self.vocab_size})."
        top_p = (body.get("sampling_params") or {}).get("top_p")
        if top_p is not None and not 0 < top_p <= 1:
            return "top_p must be in (0, 1]"
        return None

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _json(
                {
                    "object": "error",
                    "message": "invalid JSON",
                    "type": "Bad Request",
                    "param": None,
                    "code": 400,
                },
                400,
            )
        self.requests.append(body)
        if self.fail_next > 0:
            self.fail_next -= 1
            return _json(
                {"object": "error", "message": "stub engine failure", "code": self.fail_status},
                self.fail_status,
            )
        error = self._validate(body)
        if error is None and body.get("rid") in self._live:
            error = "Duplicate request ID detected"
        if error is not None and isinstance(body, dict) and body.get("stream"):
            # SGLang's tokenizer manager raises these inside the stream: 200, an error event.
            return await self._stream_error(request, error)
        if error is not None:
            return _json({"error": {"message": error}}, 400)
        if not isinstance(body["input_ids"][0], int):
            return await self._batch(body)
        refusal = self._context_refusal(body)
        if refusal is not None and body.get("stream"):
            return await self._stream_error(request, refusal)
        if refusal is not None:
            return _json({"error": {"message": refusal}}, 400)
        refusal = self._scheduler_refusal(body)
        if refusal is not None and body.get("stream"):
            return await self._stream_abort(request, body, refusal)
        if refusal is not None:
            return _json({"error": {"message": refusal["message"]}}, 400)
        if body.get("stream"):
            return await self._stream(request, body)
        return _json(await self._run(body["input_ids"], body, body.get("rid") or "anon", None))

    def _context_refusal(self, body: dict[str, Any]) -> str | None:
        """SGLang's tokenizer-manager length checks, with its messages."""
        if self.context_len is None:
            return None
        n = len(body["input_ids"]) + self.reserved_tokens
        if n >= self.context_len:
            return (
                f"The input ({n} tokens) is longer than the model's context length "
                f"({self.context_len} tokens)."
            )
        new = (body.get("sampling_params") or {}).get("max_new_tokens")
        if new is not None and new + n > self.context_len:
            return (
                "Requested token count exceeds the model's maximum context length of "
                f"{self.context_len} tokens. You requested a total of {new + n} tokens: {n} "
                f"tokens from the input messages and {new} tokens for the completion. Please "
                "reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        return None

    def _scheduler_refusal(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The scheduler's input check, as the abort `finish_reason` it sets."""
        n = len(body["input_ids"])
        if self.max_req_input_len is None or n < self.max_req_input_len:
            return None
        return {
            "type": "abort",
            "message": f"Input length ({n} tokens) exceeds the maximum allowed length "
            f"({self.max_req_input_len} tokens). Use a shorter input or enable "
            "--allow-auto-truncate.",
            "status_code": 400,
            "err_type": "BadRequestError",
        }

    async def _stream_abort(
        self, request: web.Request, body: dict[str, Any], finish: dict[str, Any]
    ) -> web.StreamResponse:
        """A stream the scheduler aborted with a status: one chunk, then `[DONE]`."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        meta = {
            "id": body.get("rid") or "anon",
            "finish_reason": finish,
            "prompt_tokens": 1,  # the stand-in prompt
            "completion_tokens": 1,
            "output_token_logprobs": [],  # turned off with the stand-in
        }
        chunk = {"text": "", "output_ids": [self.first_free_id], "meta_info": meta}
        await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _stream_error(self, request: web.Request, message: str) -> web.StreamResponse:
        """A stream refused by validation: the headers (200) went out before the check ran."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        error = {
            "message": message,
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
        await resp.write(b"data: " + orjson.dumps({"error": error}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _batch(self, body: dict[str, Any]) -> web.Response:
        rid = body.get("rid") or "anon"
        rids = (
            rid if isinstance(rid, list) else [f"{rid}_{i}" for i in range(len(body["input_ids"]))]
        )
        outs = await asyncio.gather(
            *(self._run(ids, body, r, None) for ids, r in zip(body["input_ids"], rids, strict=True))
        )
        return _json(outs)

    async def _run(
        self, prompt: list[int], body: dict[str, Any], rid: str, emit: Any
    ) -> dict[str, Any]:
        params = body.get("sampling_params") or {}
        wanted = (self.responder or self.default_tokens)(list(prompt), params)
        budget = int(params.get("max_new_tokens") or 128)
        abort = self._live[rid] = asyncio.Event()
        out: list[int] = []
        self._out[rid] = out
        try:
            if self.gate is not None:
                await self.gate.wait()
            finish = await self._sample(
                wanted, budget, params, abort, out, emit=emit, rid=rid, body=body, prompt=prompt
            )
        finally:
            self._live.pop(rid, None)
            self._out.pop(rid, None)
        self.sampled[rid] = out
        return self._body(prompt, out, rid, finish, body)

    async def _sample(
        self,
        wanted: list[int],
        budget: int,
        params: dict[str, Any],
        abort: asyncio.Event,
        out: list[int],
        *,
        emit: Any,
        rid: str,
        body: dict[str, Any],
        prompt: list[int],
    ) -> dict[str, Any]:
        """Append "sampled" ids to `out` one by one; the finish_reason SGLang would report."""
        stops = set(params.get("stop_token_ids") or [])
        for tid in wanted[:budget]:
            if self.token_delay_s:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(abort.wait(), self.token_delay_s)
            if abort.is_set():
                return {
                    "type": "abort",
                    "message": "Aborted",
                    "status_code": None,
                    "err_type": None,
                }
            out.append(tid)
            if emit is not None and _streams(len(out), params, self.stream_interval):
                await emit(None)
            if tid in stops:
                return {"type": "stop", "matched": tid}
            matched = self._stop_string(out, params.get("stop"))
            if matched is not None:
                return {"type": "stop", "matched": matched}
        if len(wanted) >= budget:
            return {"type": "length", "length": budget}
        return {"type": "stop", "matched": None}

    def _body(
        self, prompt: list[int], out: list[int], rid: str, finish: Any, req: dict[str, Any]
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "weight_version": "default",
        }
        if req.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [None if self.null_logprobs else stub_logprob(t, i), t, None]
                for i, t in enumerate(out)
            ]
            meta["input_token_logprobs"] = [[None, prompt[0], None]]
        if finish is not None:
            meta["e2e_latency"] = 0.0
        return {"text": "".join(f"<{t}>" for t in out), "output_ids": list(out), "meta_info": meta}

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        rid = body.get("rid") or "anon"
        chunks = _Chunks(body, rid, self.incremental_stream, self.null_logprobs)

        async def emit(_: Any) -> None:
            await resp.write(chunks.next(self.sampled_so_far(rid)))

        final = await self._run(body["input_ids"], body, rid, emit)
        # The last chunk carries finish_reason (cumulative: it equals the non-stream body).
        await resp.write(chunks.last(final))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def sampled_so_far(self, rid: str) -> list[int]:
        return self._out[rid]

    async def _abort(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read() or b"{}")
        if body.get("abort_all"):
            self.aborted.append("*")
            targets = [] if self.miss_abort_all else list(self._live)
        else:
            rid = str(body.get("rid", ""))
            self.aborted.append(rid)
            targets = [rid] if rid in self._live and not self.miss_rid_aborts else []
        for rid in targets:
            self._live[rid].set()
        return web.Response(status=200)

    async def _flush(self, _: web.Request) -> web.Response:
        if self._live:
            return web.Response(status=400, text="requests are running")
        return web.Response(text="Cache flushed.")

    async def _openai_chat(self, request: web.Request) -> web.Response:
        """A fixed vLLM-style chat completion (64 prompt / 16 completion tokens)."""
        body = orjson.loads(await request.read())
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": "ok " * 16},
            "finish_reason": "stop",
        }
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [{"token": "ok", "logprob": -0.1, "bytes": None, "top_logprobs": []}]
                * 16
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = list(range(100, 116))
        out = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "stub"),
            "choices": [choice],
            "usage": {"prompt_tokens": 64, "completion_tokens": 16, "total_tokens": 80},
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = list(range(64))
        return _json(out)


def _streams(n: int, params: dict[str, Any], default: int) -> bool:
    """Whether SGLang sends a chunk after the n-th token (its output streamer's rule: every
    `stream_interval` tokens, counted from the first; the request's value wins)."""
    interval = params.get("stream_interval") or default
    return n % interval == 1 if interval > 1 else True


class _Chunks:
    """SSE chunks of one streamed generation, built in time linear in what each carries: an
    incremental chunk serialises only its new tokens; a cumulative one repeats everything
    (as SGLang does) from bytes kept serialised, never re-encoding earlier tokens."""

    def __init__(self, body: dict[str, Any], rid: str, incremental: bool, null_lp: bool) -> None:
        self.rid, self.incremental, self.null_lp = rid, incremental, null_lp
        self.prompt_tokens = len(body["input_ids"])
        self.logprobs = bool(body.get("return_logprob"))
        self.first = body["input_ids"][0]
        self.done = 0  # tokens serialised so far
        self.ids = bytearray()  # "1,2,3" of every token so far (cumulative chunks)
        self.triples = bytearray()
        self.text = bytearray()

    def _pieces(self, out: list[int]) -> tuple[bytes, bytes, bytes]:
        new = out[self.done :]
        ids = ",".join(map(str, new)).encode()
        triples = b",".join(
            orjson.dumps([None if self.null_lp else stub_logprob(t, self.done + i), t, None])
            for i, t in enumerate(new)
        )
        text = "".join(f"<{t}>" for t in new).encode()
        self.done = len(out)
        if self.incremental:
            return ids, triples, text
        self.ids += (b"," if self.ids and ids else b"") + ids
        self.triples += (b"," if self.triples and triples else b"") + triples
        self.text += text
        return bytes(self.ids), bytes(self.triples), bytes(self.text)

    def next(self, out: list[int]) -> bytes:
        ids, triples, text = self._pieces(out)
        meta = (
            b'{"id":' + orjson.dumps(self.rid) + b',"finish_reason":null,"prompt_tokens":'
            + str(self.prompt_tokens).encode() + b',"completion_tokens":'
            + str(len(out)).encode() + b',"cached_tokens":0,"weight_version":"default"'
        )  # fmt: skip
        if self.logprobs:
            meta += b',"output_token_logprobs":[' + triples + b"]"
            meta += b',"input_token_logprobs":[[null,' + str(self.first).encode() + b",null]]"
        return (
            b'data: {"text":"' + text + b'","output_ids":[' + ids + b'],"meta_info":' + meta
            + b"}}\n\n"
        )  # fmt: skip

    def last(self, final: dict[str, Any]) -> bytes:
        if self.incremental:
            n = self.done
            final = {**final, "output_ids": final["output_ids"][n:], "text": final["text"]}
            final["text"] = "".join(f"<{t}>" for t in final["output_ids"])
            meta = final["meta_info"] = dict(final["meta_info"])
            if "output_token_logprobs" in meta:
                meta["output_token_logprobs"] = meta["output_token_logprobs"][n:]
        return b"data: " + orjson.dumps(final) + b"\n\n"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
