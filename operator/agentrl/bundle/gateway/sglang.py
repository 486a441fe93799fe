"""SGLang's `/generate` and router replies, parsed (pure; the protocol is SGLang 0.5's HTTP
server, https://github.com/sgl-project/sglang `python/sglang/srt/entrypoints/http_server.py`
and `managers/io_struct.py`, as summarised in docs/gateway.md).

Completions are read from `meta_info.output_token_logprobs` exactly as slime reads them:
the sampled ids and their logprobs, never decoded and re-encoded. Unknown `meta_info` keys
are ignored and everything but `id` and `finish_reason` may be absent.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson


class EngineError(Exception):
    """The engine or router failed a call (HTTP error, bad body, unreachable). `detail` is
    the engine's own message where it gave one (an error body, an error event, an abort's)."""

    def __init__(self, message: str, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


MAX_ERROR_BODY = 64 * 1024  # an error body longer than this is not read for its message


def http_error(status: int, raw: bytes) -> EngineError:
    """A `/generate` answered with an HTTP error; SGLang's body `{"error": {"message"}}`
    (`http_server._create_error_response`) gives the detail."""
    message: Any = None
    if len(raw) <= MAX_ERROR_BODY:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
    detail = message if isinstance(message, str) else None
    return EngineError(f"engine /generate: HTTP {status}: {raw[:300]!r}", status, detail)


# SGLang's refusals of a call for its length (0.5.13 and 0.5.15.post1, which slime runs
# without --allow-auto-truncate). The tokenizer manager's (`_validate_one_request`) count the
# prompt with the tokens speculative decoding reserves and name the model's context: the
# prompt at or over it, or prompt + max_new_tokens over it (the prompt fits: a smaller
# max_new_tokens is served). The scheduler's (`managers/utils.validate_input_length`) refuses
# a prompt at or over its `max_req_input_len`, which it names: `max_req_len - 5`, where
# `max_req_len` is the smaller of the context and the KV pool, minus one
# (`TpModelWorker.__init__`), so SCHEDULER_MARGIN tokens short of what a request may hold.
PROMPT_TOO_LONG = re.compile(
    r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)"
)
BUDGET_TOO_LONG = re.compile(
    r"exceeds the model's maximum context length of (\d+) tokens\. You requested a total of "
    r"\d+ tokens: (\d+) tokens from the input messages"
)
SCHEDULER_TOO_LONG = re.compile(
    r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)"
)
SCHEDULER_MARGIN = 6


@dataclass(frozen=True)
class LengthRefusal:
    """SGLang refused a call as too long. `context` is the most tokens a request may hold
    there: the model's context (`exact`, the tokenizer manager named it) or, from the
    scheduler's limit, the smaller of it and the engine's KV pool. `fits`: the prompt fits,
    only prompt + max_new_tokens did not; `input_tokens` is the prompt as the engine counted
    it (with the tokens it reserves for speculative decoding)."""

    context: int
    input_tokens: int
    exact: bool
    fits: bool


def length_refusal(error: EngineError) -> LengthRefusal | None:
    """What the engine's refusal (a 400) says about the call's length, else None."""
    if error.status != 400 or error.detail is None:
        return None
    if found := PROMPT_TOO_LONG.search(error.detail):
        return LengthRefusal(int(found[2]), int(found[1]), exact=True, fits=False)
    if found := BUDGET_TOO_LONG.search(error.detail):
        return LengthRefusal(int(found[1]), int(found[2]), exact=True, fits=True)
    if found := SCHEDULER_TOO_LONG.search(error.detail):
        limit = int(found[2]) + SCHEDULER_MARGIN
        return LengthRefusal(limit, int(found[1]), exact=False, fits=False)
    return None


@dataclass(frozen=True)
class Completion:
    ids: list[int]
    logprobs: list[float] | None  # None when the engine returned none
    finish_reason: str  # "stop", "length" or "abort"
    matched_stop: int | str | None  # the stop token id or string that ended it
    prompt_tokens: int
    weight_version: str | None
    rid: str | None = None  # meta_info.id: the request id the engine ran it under


def logprob_value(value: Any) -> float:
    """One sampled token's logprob. SGLang serialises a NaN or infinite logprob as JSON `null`;
    that (and anything else that is not a number) becomes NaN, so the turn is still recorded
    and the merge masks it out and counts it (`traces._usable`), never trains on it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


MAX_TOKEN_ID = 2**31 - 1  # no vocabulary comes near; ids travel as int32 to render workers


def token_ids(values: Any) -> list[int]:
    """Sampled token ids as the engine reports them: integers, never coerced (a float or a
    boolean is an engine or router bug, and training on `int(5.7)` would be silent)."""
    # Type and range checked at C speed (`bool` is a type of its own here, never `int`).
    if not isinstance(values, list) or (
        values
        and (not set(map(type, values)) <= {int} or min(values) < 0 or max(values) > MAX_TOKEN_ID)
    ):
        raise EngineError(f"engine returned token ids that are not integers: {str(values)[:200]}")
    return values


def logprob_values(values: list[Any]) -> list[float]:
    """`logprob_value` of each, at C speed when they are all floats (the usual case)."""
    kinds = set(map(type, values))
    if kinds <= {float}:
        return values
    return [logprob_value(v) for v in values]


def from_triples(triples: Any) -> tuple[list[int], list[float]]:
    """The sampled ids and their logprobs from `output_token_logprobs` ([logprob, id, text]
    triples), as slime reads them; malformed triples are an engine error."""
    if not isinstance(triples, list) or (
        triples and (not set(map(type, triples)) <= {list} or min(map(len, triples)) < 2)
    ):
        raise EngineError(f"engine returned malformed output_token_logprobs: {str(triples)[:200]}")
    return token_ids([t[1] for t in triples]), logprob_values([t[0] for t in triples])


def parse_generate_response(body: Any) -> Completion:
    """A non-streaming `/generate` body (or the last stream chunk) as a `Completion`."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise EngineError(f"engine returned no meta_info: {str(body)[:200]}")
    meta = body["meta_info"]
    triples = meta.get("output_token_logprobs")
    sampled = from_triples(triples) if triples is not None else None
    output_ids = body.get("output_ids")
    return completion_of(meta, sampled, token_ids(output_ids) if output_ids is not None else None)


def completion_of(
    meta: dict[str, Any],
    sampled: tuple[list[int], list[float]] | None,
    output_ids: list[int] | None,
) -> Completion:
    """A `Completion` from a final `meta_info`, the ids and logprobs of its triples (None:
    the engine sent none) and its `output_ids` (None: absent), which must agree."""
    finish = meta.get("finish_reason") or {}
    refusal = engine_refusal(finish)
    if refusal is not None:
        raise refusal
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind not in ("stop", "length", "abort"):
        raise EngineError(f"engine returned an unknown finish_reason: {finish!r}")
    logprobs: list[float] | None
    if sampled is not None:
        ids, logprobs = sampled
        if output_ids is not None and output_ids != ids:
            raise EngineError("engine output_ids disagree with output_token_logprobs")
    else:  # an engine without logprobs, or an abort before prefill
        ids = output_ids or []
        logprobs = None if ids else []
    version = meta.get("weight_version")
    return Completion(
        ids=ids,
        logprobs=logprobs,
        finish_reason=kind,
        matched_stop=finish.get("matched") if kind == "stop" else None,
        prompt_tokens=int(meta.get("prompt_tokens") or 0),
        weight_version=version if isinstance(version, str) else None,
        rid=str(meta["id"]) if meta.get("id") is not None else None,
    )


# SGLang's tokenizer manager turns a scheduler's abort that carries an HTTP status into that
# error for an unstreamed call (400 `{"error": ...}`, or 503/500), but yields it as the last
# chunk of a stream, after its 200 went out (`_handle_abort_finish_reason`,
# https://github.com/sgl-project/sglang/blob/001067fffe33427bee0ed2f007fb7551a1d76b44/python/sglang/srt/managers/tokenizer_manager.py,
# the same in 0.5.13 and 0.5.15.post1). A prompt within 6 tokens of the context passes the
# tokenizer's check and is refused by the scheduler's (`max_req_len - 5`) as such a 400 abort,
# whose one output token was sampled after a stand-in one-token prompt; the queue being full
# or a timeout come as 503. Neither is a generation to record or to retry as an abort.
def engine_refusal(finish: Any) -> EngineError | None:
    """The error an abort `finish_reason` with an HTTP `status_code` stands for, else None."""
    if not isinstance(finish, dict) or finish.get("type") != "abort":
        return None
    code = finish.get("status_code")
    if type(code) is not int or not 400 <= code <= 599:
        return None  # an abort by request id, `abort_all` or a weight update: status_code null
    message = str(finish.get("message"))
    return EngineError(f"engine refused: {message[:300]}", code, message)


def stream_error(error: Any) -> EngineError:
    """An error event in a `/generate` stream. SGLang's HTTP server has already answered 200
    when its checks run, so a refusal (a ValueError: the input is too long, a bad sampling
    parameter) comes as `{"error": {"message", "type", "code": 400, "retryable"}}`: the
    status it names is kept, so the agent gets the engine's 400, not a gateway 502."""
    detail = error if isinstance(error, dict) else {"message": error}
    code = detail.get("code")
    status = code if type(code) is int and 400 <= code <= 599 else None
    message = str(detail.get("message", detail))
    return EngineError(f"engine stream error: {message[:300]}", status, message)


class SseEvents:
    """Splits a server-sent-events byte stream into each event's `data` (comments and empty
    events dropped), in time linear in the bytes: every byte is searched once and copied once,
    however the events are cut into reads (a cumulative stream's chunks grow to megabytes)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # bytes before this hold no separator

    def _separator(self, start: int) -> int:
        """Where the next event from `start` ends (a blank line), or -1. Searches for one
        newline, which memchr finds at memory speed (a two-byte pattern is searched several
        times slower), and JSON data holds none."""
        buf = self._buf
        at = buf.find(b"\n", max(start, self._scan))
        while at >= 0:
            if at + 1 >= len(buf):
                self._scan = at  # the next byte decides
                return -1
            if buf[at + 1] == 10:
                return at
            at = buf.find(b"\n", at + 2)
        self._scan = len(buf)
        return -1

    def feed(self, piece: bytes) -> list[bytes]:
        buf = self._buf
        buf += piece
        out: list[bytes] = []
        pos = 0  # the current event's first byte
        while (at := self._separator(pos)) >= 0:
            start = pos
            while start < at and buf[start] in b" \t\r\n":
                start += 1
            if buf.startswith(b"data:", start):
                start += 5
                while start < at and buf[start] in b" \t":
                    start += 1
            end = at
            while end > start and buf[end - 1] in b" \t\r":
                end -= 1
            if end > start and buf[start] != 58:  # 58 is ":": an SSE comment
                with memoryview(buf) as view:
                    out.append(bytes(view[start:end]))
            pos = at + 2
        if pos:
            del buf[:pos]  # once per read: what is left is the next event's beginning
            self._scan = max(0, self._scan - pos)
        return out


# A cumulative chunk that is not the last says so in these bytes (orjson, as SGLang writes
# JSON, puts no space there; inside a JSON string the quotes would be escaped). A chunk
# without them is parsed, so another spelling is slower, never wrong.
UNFINISHED = b'"finish_reason":null'
COMPLETION_TOKENS = b'"completion_tokens":'
REFRESH_EVERY_S = 0.5  # cumulative: re-read the ids once they doubled, or this long after


class StreamState:
    """Accumulates `/generate` stream chunks in time linear in the tokens, whichever way the
    engine streams. Incremental chunks (`--incremental-streaming-output`) carry only the new
    tokens: they are checked and appended to flat lists of ids and logprobs (no object per
    token is kept, so the garbage collector has nothing new to walk). Cumulative chunks
    (SGLang's default) repeat everything so far: once every field is known to be cumulative,
    a chunk is kept unparsed and only the newest one is read, when it is the last one and,
    for progress, once the completion doubled or every `REFRESH_EVERY_S` (the wire itself is
    quadratic there). Each field's mode is told apart by `meta_info.completion_tokens`,
    per chunk, as some builds stream `output_ids` incrementally and the logprobs
    cumulatively."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.ids: list[int] = []  # sampled ids so far, for progress; only ever grows
        self.last: dict[str, Any] | None = None
        self.finished = False
        self._sampled: tuple[list[int], list[float]] | None = None  # ids, logprobs of triples
        self._output_ids: list[int] | None = None
        self._cumulative: set[str] = set()  # fields seen repeating everything
        self._incremental: set[str] = set()
        self._raw: bytes | None = None  # the newest cumulative chunk, not yet parsed
        self._clock = clock
        self._read_at = 0.0

    @property
    def incremental(self) -> bool:
        """Every field seen so far carries only the new part (unknown after one chunk)."""
        return bool(self._incremental) and not self._cumulative

    @property
    def lazy(self) -> bool:
        """Every field repeats everything: only the newest chunk matters."""
        return bool(self._cumulative) and not self._incremental

    def _mode(self, name: str, have: int, part: int, total: int) -> bool:
        """True if a field's chunk repeats everything (cumulative), False if it carries
        only the new part; the two agree on a first chunk."""
        if part == total:
            if have:
                self._cumulative.add(name)
            return True
        if have + part == total:
            self._incremental.add(name)
            return False
        raise EngineError(f"engine stream: {part} new items do not add up to {total} tokens")

    def add(self, data: bytes) -> bool:
        """Take one chunk (its JSON); True when `ids` grew. A cumulative chunk is parsed only
        when it is the last one or the progress is due (`REFRESH_*`)."""
        if self.lazy and UNFINISHED in data:
            self._raw = data
            if not self._due(data):
                return False
        return self._take(data)

    def _due(self, data: bytes) -> bool:
        at = data.find(COMPLETION_TOKENS)
        digits = data[at + len(COMPLETION_TOKENS) : at + len(COMPLETION_TOKENS) + 12]
        end = next((i for i, c in enumerate(digits) if not 48 <= c <= 57), len(digits))
        total = int(digits[:end]) if at >= 0 and end else 0
        have = len(self.ids)
        if total >= 2 * have:  # reads cost the whole answer each: doubling bounds them
            return True
        return self._clock() - self._read_at >= REFRESH_EVERY_S and total > have

    def _take(self, data: bytes) -> bool:
        self._raw = None
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"engine stream: invalid JSON {data[:200]!r}") from exc
        if isinstance(chunk, dict) and "error" in chunk:
            raise stream_error(chunk["error"])
        meta = chunk.get("meta_info") if isinstance(chunk, dict) else None
        if not isinstance(meta, dict):
            raise EngineError(f"engine stream chunk without meta_info: {str(chunk)[:200]}")
        finish = meta.get("finish_reason")
        refusal = engine_refusal(finish)
        if refusal is not None:
            raise refusal
        aborted = isinstance(finish, dict) and finish.get("type") == "abort"
        total = int(meta.get("completion_tokens") or 0)
        before = len(self.ids)
        triples = meta.get("output_token_logprobs")
        if triples is not None:
            ids, logprobs = from_triples(triples)
            have = self._sampled
            repeated = self._mode("logprobs", len(have[0]) if have else 0, len(ids), total)
            if repeated or not have:
                self._sampled = ids, logprobs
            else:
                have[0].extend(ids)
                have[1].extend(logprobs)
        output_ids = chunk.get("output_ids")
        if output_ids is not None:
            output_ids = token_ids(output_ids)
            have_ids = self._output_ids
            try:
                repeated = self._mode("output_ids", len(have_ids or ()), len(output_ids), total)
            except EngineError:
                # A stream aborted while its request waited in the engine's queue (retracted
                # there for memory) ends on an echo carrying only the last id, beside every
                # logprob triple so far (`_handle_abort_req`,
                # https://github.com/sgl-project/sglang/blob/001067fffe33427bee0ed2f007fb7551a1d76b44/python/sglang/srt/managers/tokenizer_manager.py):
                # its triples hold the ids, as slime reads them.
                if not aborted or triples is None:
                    raise
                self._output_ids = None
            else:
                if repeated or not have_ids:
                    self._output_ids = output_ids
                else:
                    have_ids.extend(output_ids)
        known = self._sampled[0] if self._sampled is not None else self._output_ids or []
        self.ids.extend(known[len(self.ids) :])  # for progress: the new ids only
        self.last = chunk
        self.finished = meta.get("finish_reason") is not None
        self._read_at = self._clock()
        return len(self.ids) > before

    def completion(self) -> Completion:
        """The finished generation (an engine error if the stream ended before that)."""
        if self._raw is not None:  # the stream ended on an unparsed cumulative chunk
            self._take(self._raw)
        if self.last is None or not self.finished:
            raise EngineError("engine stream ended before a finish_reason")
        return completion_of(self.last["meta_info"], self._sampled, self._output_ids)


def engine_requests(body: Any) -> int | None:
    """Requests an engine is running or queueing, from its `GET /v1/loads` (or older
    `/get_load`) reply; None if the reply says nothing recognisable. Reads the fields slime
    reads (`num_reqs`, `num_total_reqs`, `total_reqs`, or running + waiting), summed over
    the data-parallel ranks, whether they come as a bare list or under `loads`."""
    items = body.get("loads") if isinstance(body, dict) else body
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        items = [body]
    total, seen = 0, False
    for item in items:
        if not isinstance(item, dict):
            continue
        for key in ("num_reqs", "num_total_reqs", "total_reqs"):
            if isinstance(item.get(key), int):
                total += item[key]
                seen = True
                break
        else:
            parts = [item.get(k) for k in ("num_running_reqs", "num_waiting_reqs")]
            if any(isinstance(p, int) for p in parts):
                total += sum(p for p in parts if isinstance(p, int))
                seen = True
    return total if seen else None


def worker_urls(body: Any) -> list[str]:
    """Engine base URLs from a router's `GET /workers` (or legacy `/list_workers`) reply.

    A DP-aware router lists one entry per data-parallel rank as `http://h:p@rank`; the engine
    is `http://h:p` and one abort there reaches every rank, so the suffix goes and duplicates
    collapse."""
    urls: list[Any] = []
    if isinstance(body, dict) and isinstance(body.get("workers"), list):
        urls = [w.get("url") for w in body["workers"] if isinstance(w, dict)]
    elif isinstance(body, dict) and isinstance(body.get("urls"), list):
        urls = body["urls"]
    out: dict[str, None] = {}
    for url in urls:
        if isinstance(url, str) and url:
            out[re.sub(r"@\d+$", "", url.rstrip("/"))] = None
    return list(out)
