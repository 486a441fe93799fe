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
from dataclasses import dataclass
from typing import Any


class EngineError(Exception):
    """The engine or router failed a call (HTTP error, bad body, unreachable)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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
    if not isinstance(values, list) or not all(
        type(v) is int and 0 <= v <= MAX_TOKEN_ID for v in values
    ):
        raise EngineError(f"engine returned token ids that are not integers: {str(values)[:200]}")
    return values


def parse_generate_response(body: Any) -> Completion:
    """A non-streaming `/generate` body (or the last stream chunk) as a `Completion`."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise EngineError(f"engine returned no meta_info: {str(body)[:200]}")
    meta = body["meta_info"]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind not in ("stop", "length", "abort"):
        raise EngineError(f"engine returned an unknown finish_reason: {finish!r}")
    triples = meta.get("output_token_logprobs")
    output_ids = body.get("output_ids")
    if triples is not None:
        if not isinstance(triples, list) or not all(
            isinstance(t, list) and len(t) >= 2 for t in triples
        ):
            raise EngineError(
                f"engine returned malformed output_token_logprobs: {str(triples)[:200]}"
            )
        ids = token_ids([t[1] for t in triples])
        logprobs: list[float] | None = [logprob_value(t[0]) for t in triples]
        if output_ids is not None and list(output_ids) != ids:
            raise EngineError("engine output_ids disagree with output_token_logprobs")
    else:  # an engine without logprobs, or an abort before prefill
        ids = token_ids(output_ids or [])
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


def stream_error(error: Any) -> EngineError:
    """An error event in a `/generate` stream. SGLang's HTTP server has already answered 200
    when its checks run, so a refusal (a ValueError: the input is too long, a bad sampling
    parameter) comes as `{"error": {"message", "type", "code": 400, "retryable"}}`: the
    status it names is kept, so the agent gets the engine's 400, not a gateway 502."""
    detail = error if isinstance(error, dict) else {"message": error}
    code = detail.get("code")
    status = code if type(code) is int and 400 <= code <= 599 else None
    return EngineError(f"engine stream error: {str(detail.get('message', detail))[:300]}", status)


class StreamState:
    """Accumulates `/generate` stream chunks, cumulative (SGLang's default) or incremental
    (`--incremental-streaming-output`), told apart per field by `meta_info.completion_tokens`."""

    def __init__(self) -> None:
        self.triples: list[Any] = []
        self.ids: list[int] = []
        self.last: dict[str, Any] | None = None

    @staticmethod
    def _merge(have: list[Any], part: list[Any], total: int) -> list[Any]:
        if len(part) == total:  # cumulative: the chunk repeats everything so far
            return list(part)
        if len(have) + len(part) == total:  # incremental: only the new part
            return have + list(part)
        raise EngineError(f"engine stream: {len(part)} new items do not add up to {total} tokens")

    def add(self, chunk: Any) -> bool:
        """Take one chunk; True once the generation finished."""
        if isinstance(chunk, dict) and "error" in chunk:
            raise stream_error(chunk["error"])
        meta = chunk.get("meta_info") if isinstance(chunk, dict) else None
        if not isinstance(meta, dict):
            raise EngineError(f"engine stream chunk without meta_info: {str(chunk)[:200]}")
        total = int(meta.get("completion_tokens") or 0)
        if meta.get("output_token_logprobs") is not None:
            self.triples = self._merge(self.triples, meta["output_token_logprobs"], total)
        if chunk.get("output_ids") is not None:
            self.ids = self._merge(self.ids, chunk["output_ids"], total)
        self.last = chunk
        return meta.get("finish_reason") is not None

    def token_ids(self) -> list[int]:
        """The ids so far (for streaming progress; the final completion is checked)."""
        if not self.triples:
            return list(self.ids)
        return [
            t[1] for t in self.triples if isinstance(t, list) and len(t) >= 2 and type(t[1]) is int
        ]

    def completion(self) -> Completion:
        if self.last is None:
            raise EngineError("engine stream ended without a chunk")
        meta = {**self.last["meta_info"], "output_token_logprobs": self.triples or None}
        if not self.triples:
            meta.pop("output_token_logprobs")
        return parse_generate_response({"output_ids": self.ids or None, "meta_info": meta})


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
