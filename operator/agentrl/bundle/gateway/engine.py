"""The gateway's upstream: SGLang `/generate` on token ids, through slime's router.

Every call carries its own request id (`rid`). When a call is cancelled (client gone,
session closed) or times out, the rid is aborted on every worker the router lists, because
the router does not forward `/abort_request` (sglang #6531, slime PR #2340). Completions
are read from `meta_info.output_token_logprobs` exactly as slime reads them: the sampled ids
and their logprobs, never decoded and re-encoded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

log = logging.getLogger("agentrl.gateway.engine")


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
        ids = [int(t[1]) for t in triples]
        logprobs: list[float] | None = [float(t[0]) for t in triples]
        if output_ids is not None and list(output_ids) != ids:
            raise EngineError("engine output_ids disagree with output_token_logprobs")
    else:  # an engine without logprobs, or an abort before prefill
        ids = [int(i) for i in output_ids or []]
        logprobs = None if ids else []
    version = meta.get("weight_version")
    return Completion(
        ids=ids,
        logprobs=logprobs,
        finish_reason=kind,
        matched_stop=finish.get("matched") if kind == "stop" else None,
        prompt_tokens=int(meta.get("prompt_tokens") or 0),
        weight_version=version if isinstance(version, str) else None,
    )


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
            raise EngineError(f"engine stream error: {chunk['error']}")
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
        return [int(t[1]) for t in self.triples] if self.triples else list(self.ids)

    def completion(self) -> Completion:
        if self.last is None:
            raise EngineError("engine stream ended without a chunk")
        meta = {**self.last["meta_info"], "output_token_logprobs": self.triples or None}
        if not self.triples:
            meta.pop("output_token_logprobs")
        return parse_generate_response({"output_ids": self.ids or None, "meta_info": meta})


def worker_urls(body: Any) -> list[str]:
    """Worker URLs from a router's `GET /workers` (or legacy `/list_workers`) reply."""
    if isinstance(body, dict) and isinstance(body.get("workers"), list):
        return [
            str(w["url"]).rstrip("/")
            for w in body["workers"]
            if isinstance(w, dict) and w.get("url")
        ]
    if isinstance(body, dict) and isinstance(body.get("urls"), list):
        return [str(u).rstrip("/") for u in body["urls"]]
    return []


class EngineClient:
    """Calls `/generate` through the router and aborts by rid on every worker."""

    def __init__(self, router_url: str, http: aiohttp.ClientSession) -> None:
        self._router = router_url.rstrip("/")
        self._http = http
        self._aborts: set[asyncio.Task[None]] = set()

    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        rid: str,
        timeout_s: float,
    ) -> Completion:
        """One generation; cancelled or timed-out calls are aborted on every worker."""
        payload = orjson.dumps(
            {
                "rid": rid,
                "input_ids": input_ids,
                "return_logprob": True,
                "sampling_params": sampling_params,
                "stream": False,
            }
        )
        try:
            async with asyncio.timeout(timeout_s):
                return await self._post_generate(payload)
        except (asyncio.CancelledError, TimeoutError):
            self.abort_in_background(rid)
            raise

    async def generate_stream(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        rid: str,
        timeout_s: float,
        on_tokens: Callable[[list[int]], Awaitable[None]],
    ) -> Completion:
        """Like `generate`, streaming: `on_tokens` sees the ids sampled so far after each chunk."""
        payload = orjson.dumps(
            {
                "rid": rid,
                "input_ids": input_ids,
                "return_logprob": True,
                "sampling_params": sampling_params,
                "stream": True,
            }
        )
        try:
            async with asyncio.timeout(timeout_s):
                return await self._post_stream(payload, on_tokens)
        except (asyncio.CancelledError, TimeoutError):
            self.abort_in_background(rid)
            raise

    async def _post_stream(
        self, payload: bytes, on_tokens: Callable[[list[int]], Awaitable[None]]
    ) -> Completion:
        state, buffer = StreamState(), b""
        headers = {"Content-Type": "application/json"}
        try:
            async with self._http.post(
                self._router + "/generate", data=payload, headers=headers
            ) as resp:
                if resp.status != 200:
                    raw = await resp.read()
                    raise EngineError(
                        f"engine /generate: HTTP {resp.status}: {raw[:300]!r}", resp.status
                    )
                async for piece in resp.content.iter_any():  # no line-length limit
                    buffer += piece
                    *events, buffer = buffer.split(b"\n\n")
                    if await self._take(events, state, on_tokens):
                        return state.completion()
        except aiohttp.ClientError as exc:
            raise EngineError(f"engine /generate stream broke: {exc}") from exc
        raise EngineError("engine stream ended before a finish_reason")

    @staticmethod
    async def _take(
        events: list[bytes], state: StreamState, on_tokens: Callable[[list[int]], Awaitable[None]]
    ) -> bool:
        for event in events:
            data = event.strip().removeprefix(b"data:").strip()
            if not data or data.startswith(b":") or data == b"[DONE]":
                continue
            try:
                finished = state.add(orjson.loads(data))
            except orjson.JSONDecodeError as exc:
                raise EngineError(f"engine stream: invalid JSON {data[:200]!r}") from exc
            if finished:
                return True
            await on_tokens(state.token_ids())
        return False

    async def _post_generate(self, payload: bytes) -> Completion:
        headers = {"Content-Type": "application/json"}
        try:
            async with self._http.post(
                self._router + "/generate", data=payload, headers=headers
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise EngineError(
                        f"engine /generate: HTTP {resp.status}: {raw[:300]!r}", resp.status
                    )
        except aiohttp.ClientError as exc:
            raise EngineError(f"engine /generate unreachable: {exc}") from exc
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"engine /generate returned invalid JSON: {raw[:200]!r}") from exc
        return parse_generate_response(body)

    def abort_in_background(self, rid: str) -> None:
        """Abort `rid` everywhere without blocking the caller (it may be being cancelled)."""
        task = asyncio.get_running_loop().create_task(self._abort_logged(rid))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def _abort_logged(self, rid: str) -> None:
        accepted = await self.abort(rid)
        if accepted:
            log.debug("gateway: aborted %s on %d worker(s)", rid, len(accepted))
        else:  # the engine may keep generating for nobody until max_new_tokens
            log.warning("gateway: abort of %s reached no worker", rid)

    async def abort(self, rid: str) -> list[str]:
        """POST /abort_request {rid} to every worker; returns the workers that accepted it."""
        workers = await self.workers()
        if not workers:  # no router in front: the URL is an engine itself
            workers = [self._router]
        results = await asyncio.gather(*(self._abort_one(w, rid) for w in workers))
        return [w for w, ok in zip(workers, results, strict=True) if ok]

    async def workers(self) -> list[str]:
        for path in ("/workers", "/list_workers"):
            try:
                async with self._http.get(self._router + path) as resp:
                    if resp.status == 200:
                        return worker_urls(orjson.loads(await resp.read()))
            except (aiohttp.ClientError, orjson.JSONDecodeError) as exc:
                log.warning("gateway: listing workers via %s failed: %s", path, exc)
        return []

    async def _abort_one(self, worker: str, rid: str) -> bool:
        try:
            async with self._http.post(worker + "/abort_request", json={"rid": rid}) as resp:
                return resp.status == 200
        except aiohttp.ClientError as exc:
            log.warning("gateway: abort of %s on %s failed: %s", rid, worker, exc)
            return False

    async def drain_aborts(self) -> None:
        """Wait for pending aborts (at shutdown, so none is lost)."""
        if self._aborts:
            await asyncio.gather(*self._aborts, return_exceptions=True)
