"""The gateway's upstream: SGLang `/generate` on token ids, through slime's router.

Every call carries its own request id (`rid`). When a call is cancelled (client gone,
session closed) or times out, the rid is aborted on every worker the router lists, because
the router does not forward `/abort_request` (sglang #6531, slime PR #2340). Completions
are read from `meta_info.output_token_logprobs` exactly as slime reads them: the sampled ids
and their logprobs, never decoded and re-encoded.

An abort by rid that reaches SGLang before its request does is a no-op, and the request
then runs on. So at the end of every rollout batch `quiesce` makes the engines idle the way
slime's own rollout ends (`abort_servers_until_idle`): wait for the pending aborts, then
`abort_all` on every worker until no request of ours is in flight and every engine reports
nothing running or queued. A stray request at weight offload trips SGLang's "server is
idle" assertion and takes the scheduler down (slime's `abort_servers_until_idle` in
https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/backends/sglang_utils/server_control.py
exists for that reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from agentrl.bundle.gateway.http1 import Http1Pool, HttpError
from agentrl.bundle.gateway.sglang import (
    Completion,
    EngineError,
    SseEvents,
    StreamState,
    engine_requests,
    http_error,
    parse_generate_response,
    worker_urls,
)
from agentrl.bundle.gateway.token_view import as_list
from agentrl.bundle.session import QuiesceReport

log = logging.getLogger("agentrl.gateway.engine")
ROUTING_HEADER = "X-SMG-Routing-Key"  # the router's consistent-hashing key (as slime sets it)
LOAD_PATHS = ("/v1/loads?include=core", "/get_load")  # newer SGLang, then 0.4/early 0.5
QUIESCE_POLL_S = 1.0  # how often `quiesce` re-aborts and looks again (slime: 3 s)


def _headers(routing_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if routing_key is not None:
        headers[ROUTING_HEADER] = routing_key
    return headers


# A stream's consumer: the ids sampled so far (a list that only grows); it answers the event
# loop time before which it has no use for more (None: as soon as they come).
OnStreamTokens = Callable[[list[int]], Awaitable[float | None]]


ENCODE_SLICE = 1 << 16  # prompt ids encoded at once: about a millisecond of the event loop


async def generate_body(
    input_ids: Sequence[int], sampling_params: Mapping[str, Any], rid: str, *, stream: bool
) -> bytes:
    """The JSON body of one /generate call. A long prompt's ids are encoded a slice at a
    time, and the event loop serves other sessions between slices: a two-million-token
    prompt is tens of milliseconds of encoding, which as one call would stall every other
    session's turn for as long."""
    head = orjson.dumps(
        {"rid": rid, "return_logprob": True, "sampling_params": sampling_params, "stream": stream}
    )
    parts = []
    for start in range(0, len(input_ids), ENCODE_SLICE):
        if start:
            await asyncio.sleep(0)
        # Packed ids become a list only here, a slice at a time; "[1,2]" -> "1,2".
        parts.append(orjson.dumps(as_list(input_ids[start : start + ENCODE_SLICE]))[1:-1])
    return head[:-1] + b',"input_ids":[' + b",".join(parts) + b"]}"


class EngineClient:
    """Calls `/generate` through the router and aborts by rid on every worker."""

    def __init__(self, router_url: str, http: aiohttp.ClientSession) -> None:
        self._router = router_url.rstrip("/")
        self._http = http
        # Unstreamed generations (one per agent turn) take the lean client, over plain HTTP;
        # it keeps as many idle connections as aiohttp's pool would.
        limit = getattr(http.connector, "limit", 0) or 100
        self._lean = Http1Pool(self._router, limit) if self._router.startswith("http:") else None
        self._aborts: set[asyncio.Task[None]] = set()
        self._rid_warned = False
        self._running: set[str] = set()  # rids of engine calls in progress
        self._idle = asyncio.Event()
        self._idle.set()
        self._loads_warned = False

    @property
    def in_flight(self) -> int:
        """Engine calls in progress (a cancelled call leaves only after its abort is queued)."""
        return len(self._running)

    @contextlib.contextmanager
    def _tracked(self, rid: str) -> Iterator[None]:
        self._running.add(rid)
        self._idle.clear()
        try:
            yield
        finally:
            self._running.discard(rid)
            if not self._running:
                self._idle.set()

    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        rid: str,
        timeout_s: float,
        routing_key: str | None = None,
    ) -> Completion:
        """One generation; cancelled or timed-out calls are aborted on every worker.
        `routing_key` (the session) keeps a session on one worker under the router's
        consistent-hashing policy, so each turn reuses the previous turns' prefix cache."""
        payload = await generate_body(input_ids, sampling_params, rid, stream=False)
        with self._tracked(rid):
            try:
                async with asyncio.timeout(timeout_s):
                    return self._check_rid(await self._post_generate(payload, routing_key), rid)
            except EngineError:
                raise  # the engine failed or refused it: nothing left running there
            except BaseException:  # cancelled, timed out, or the caller failed mid-stream
                self.abort_in_background(rid)
                raise

    async def generate_stream(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        rid: str,
        timeout_s: float,
        *,
        on_tokens: OnStreamTokens,
        routing_key: str | None = None,
    ) -> Completion:
        """Like `generate`, streaming: `on_tokens` sees the ids sampled so far after each read
        of the stream, and answers when it next wants more (see `OnStreamTokens`)."""
        payload = await generate_body(input_ids, sampling_params, rid, stream=True)
        with self._tracked(rid):
            try:
                async with asyncio.timeout(timeout_s):
                    done = await self._post_stream(payload, on_tokens, routing_key)
                    return self._check_rid(done, rid)
            except EngineError:
                raise  # the engine failed or refused it: nothing left running there
            except BaseException:  # cancelled, timed out, or the caller failed mid-stream
                self.abort_in_background(rid)
                raise

    async def _post_stream(
        self,
        payload: bytes,
        on_tokens: OnStreamTokens,
        routing_key: str | None,
    ) -> Completion:
        state = StreamState()
        headers = _headers(routing_key)
        loop = asyncio.get_running_loop()
        try:
            async with self._http.post(
                self._router + "/generate", data=payload, headers=headers
            ) as resp:
                if resp.status != 200:
                    raise http_error(resp.status, await resp.read())
                events = SseEvents()
                ended: asyncio.Future[None] = loop.create_future()  # the answer is all here

                def at_end() -> None:
                    if not ended.done():
                        ended.set_result(None)

                resp.content.on_eof(at_end)
                async for piece in resp.content.iter_any():  # no line-length limit
                    grew, done = False, False
                    for data in events.feed(piece):
                        if data == b"[DONE]":
                            done = True
                            break
                        grew = state.add(data) or grew
                        if state.finished:
                            break
                    if state.finished:
                        await resp.content.read()  # the trailing [DONE]: keeps the connection
                        return state.completion()
                    wanted_at = await on_tokens(state.ids) if grew else None  # once per read
                    if done:
                        break
                    # Chunks that come before the consumer wants them wait in the connection's
                    # buffer and are taken in one read: a wake-up per flush, not per chunk.
                    # The end of the answer is read as soon as it comes. Only for chunks
                    # known to be incremental: cumulative ones soon outgrow the buffer, and
                    # the stalls cost more than the wake-ups (only the newest is parsed).
                    pause = wanted_at - loop.time() if wanted_at is not None else 0.0
                    if pause > 0 and not ended.done() and state.incremental:
                        await asyncio.wait({ended}, timeout=pause)
        except aiohttp.ClientError as exc:
            raise EngineError(f"engine /generate stream broke: {exc}") from exc
        return state.completion()  # an unread last chunk is read here

    async def _post_generate(self, payload: bytes, routing_key: str | None) -> Completion:
        headers = _headers(routing_key)
        try:
            if self._lean is not None:
                status, raw = await self._lean.post("/generate", payload, headers)
            else:
                async with self._http.post(
                    self._router + "/generate", data=payload, headers=headers
                ) as resp:
                    status, raw = resp.status, await resp.read()
        except (aiohttp.ClientError, HttpError) as exc:
            raise EngineError(f"engine /generate unreachable: {exc}") from exc
        if status != 200:
            raise http_error(status, raw)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"engine /generate returned invalid JSON: {raw[:200]!r}") from exc
        return parse_generate_response(body)

    def _check_rid(self, done: Completion, rid: str) -> Completion:
        """Aborts go by rid: warn (once) if something between us and the engine dropped it."""
        if done.rid is not None and done.rid != rid and not self._rid_warned:
            self._rid_warned = True
            log.warning(
                "gateway: the engine ran request %s as %s: the router does not forward `rid`, "
                "so cancelled requests cannot be aborted by id",
                rid,
                done.rid,
            )
        return done

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
        workers = await self.engines()
        results = await asyncio.gather(*(self._abort_one(w, {"rid": rid}) for w in workers))
        return [w for w, ok in zip(workers, results, strict=True) if ok]

    async def engines(self) -> list[str]:
        """The engines behind the router (the URL itself when no router is in front)."""
        return await self.workers() or [self._router]

    async def workers(self) -> list[str]:
        for path in ("/workers", "/list_workers"):
            try:
                async with self._http.get(self._router + path) as resp:
                    if resp.status == 200:
                        return worker_urls(orjson.loads(await resp.read()))
            except (aiohttp.ClientError, orjson.JSONDecodeError) as exc:
                log.warning("gateway: listing workers via %s failed: %s", path, exc)
        return []

    async def _abort_one(self, worker: str, body: dict[str, Any]) -> bool:
        try:
            async with self._http.post(worker + "/abort_request", json=body) as resp:
                return resp.status == 200
        except aiohttp.ClientError as exc:
            what = body.get("rid") or "all requests"
            log.warning("gateway: abort of %s on %s failed: %s", what, worker, exc)
            return False

    def close(self) -> None:
        """Close the lean client's kept connections (aiohttp's are its session's)."""
        if self._lean is not None:
            self._lean.close()

    async def drain_aborts(self) -> None:
        """Wait for pending aborts (at shutdown and batch end, so none is lost or late)."""
        while self._aborts:
            await asyncio.gather(*self._aborts, return_exceptions=True)

    async def quiesce(self, timeout_s: float, poll_s: float = QUIESCE_POLL_S) -> QuiesceReport:
        """Batch end: abort everything on every engine until nothing of ours runs there.

        Only for when no episode is live (the rollout calls it after a batch, and slime
        never runs two batches at once): `abort_all` aborts every request on the engine.
        Loops like slime's `abort_servers_until_idle`, because an abort that reaches an
        engine before its request does is a no-op; bounded by `timeout_s`."""
        last = QuiesceReport(idle=False, in_flight=self.in_flight, engine_requests=None, workers=0)
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    await self.drain_aborts()  # cancelled calls abort by rid first
                    workers = await self.engines()
                    await asyncio.gather(
                        *(self._abort_one(w, {"abort_all": True}) for w in workers)
                    )
                    loads = await asyncio.gather(*(self._engine_load(w) for w in workers))
                    known = [n for n in loads if n is not None]
                    running = sum(known) if known else None
                    last = QuiesceReport(
                        idle=not self._running and not running,
                        in_flight=self.in_flight,
                        engine_requests=running,
                        workers=len(workers),
                    )
                    if last.idle and not self._aborts:
                        return last
                    # Aborted calls come back at once: wait for ours, and while an engine
                    # still reports work, wait out the poll before aborting again.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(poll_s):
                            await self._idle.wait()
                            if running:
                                await asyncio.sleep(poll_s)
        except TimeoutError:
            return QuiesceReport(False, self.in_flight, last.engine_requests, last.workers)

    async def _engine_load(self, worker: str) -> int | None:
        """Requests running or queued on one engine; None if it does not say."""
        for path in LOAD_PATHS:
            try:
                async with self._http.get(worker + path) as resp:
                    if resp.status == 200:
                        found = engine_requests(orjson.loads(await resp.read()))
                        if found is not None:
                            return found
            except (aiohttp.ClientError, orjson.JSONDecodeError) as exc:
                log.debug("gateway: load of %s via %s failed: %s", worker, path, exc)
        if not self._loads_warned:
            self._loads_warned = True
            log.warning(
                "gateway: %s reports no load (%s); batch ends wait only for the gateway's own "
                "engine calls after aborting everything",
                worker,
                " or ".join(LOAD_PATHS),
            )
        return None
