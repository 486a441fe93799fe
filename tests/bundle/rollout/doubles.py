"""Doubles for the parts that cannot run here: the model gateway and a remote agent.

`FakeGateway` speaks the `GatewaySessions` protocol (duplicate ids refused, unknown ids
raise SessionError, close idempotent) and lets an agent record turns only with its
session's bearer token, as the real gateway does. `StubAgent` is an `AgentBackend` whose
behaviour is chosen by the row's metadata, and which records what it was sent and how
many episodes were live at once. `ChatAgent` talks to a real gateway over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.agents.base import AgentError, AgentRequest, AgentResult, PoolStats
from agentrl.bundle.session import ContextFullCalls, QuiesceReport, SessionError, SessionHandle
from agentrl.bundle.traces import Turn

if TYPE_CHECKING:
    from agentrl.bundle.rollout.runtime import RolloutRuntime


class FakeGateway:
    def __init__(self, fail_create: int = 0, fail_close: bool = False) -> None:
        self.open: dict[str, str] = {}  # sid -> token
        self.turns: dict[str, list[Turn]] = {}
        self.created: list[str] = []
        self._used: set[str] = set()
        self.closed: list[str] = []
        self.sampling: dict[str, Mapping[str, Any]] = {}
        self.max_open = 0
        self.fail_create = fail_create
        self.fail_close = fail_close
        self.quiesced: list[float] = []  # timeout of each quiesce_engines call
        self.open_at_quiesce: list[int] = []  # sessions still open at each call
        self.engines_idle = True  # what quiesce_engines reports

    async def create_session(
        self, session_id: str, sampling_params: Mapping[str, Any]
    ) -> SessionHandle:
        await asyncio.sleep(0)
        if self.fail_create:  # the first `fail_create` creations fail
            self.fail_create -= 1
            raise SessionError("gateway unavailable")
        if session_id in self._used:
            raise SessionError(f"session id {session_id!r} is already in use")
        self._used.add(session_id)
        token = secrets.token_urlsafe(16)
        self.open[session_id] = token
        self.turns[session_id] = []
        self.created.append(session_id)
        self.sampling[session_id] = dict(sampling_params)
        self.max_open = max(self.max_open, len(self.open))
        return SessionHandle(session_id, f"http://gw.test/sessions/{session_id}/v1", token)

    def record(self, session_id: str, token: str, turn: Turn) -> None:
        if self.open.get(session_id) != token:
            raise PermissionError("bad session token")
        self.turns[session_id].append(turn)

    async def get_turns(self, session_id: str) -> Sequence[Turn]:
        await asyncio.sleep(0)
        if session_id not in self.turns:
            raise SessionError(f"no session {session_id!r}")
        return list(self.turns[session_id])

    async def context_full(self, session_id: str) -> ContextFullCalls:
        return ContextFullCalls()

    async def close_session(self, session_id: str) -> None:
        if self.fail_close:
            raise SessionError("gateway unreachable")
        self.open.pop(session_id, None)
        self.closed.append(session_id)

    async def quiesce_engines(self, timeout_s: float) -> QuiesceReport:
        await asyncio.sleep(0)
        self.quiesced.append(timeout_s)
        self.open_at_quiesce.append(len(self.open))
        if self.engines_idle:
            return QuiesceReport(idle=True, in_flight=0, engine_requests=0, workers=2)
        return QuiesceReport(idle=False, in_flight=1, engine_requests=3, workers=2)


def simulated_clock() -> asyncio.AbstractEventLoop:
    """An event loop on looptime's simulated clock: sleeps cost no wall time, and time
    jumps to the next timer whenever every task waits (for the rollout's loop thread)."""
    import looptime

    loop_class = looptime.make_event_loop_class(asyncio.SelectorEventLoop)
    return loop_class(start=0.0)


def chain_turns(n: int, base: int = 100) -> list[Turn]:
    """n turns that each extend the previous prompt + completion (one merged sequence)."""
    prompt = [1, 2, 3]
    turns = []
    for i in range(n):
        completion = [base + 2 * i, base + 2 * i + 1]
        turns.append(Turn(list(prompt), completion, [-0.5, -0.25], "stop"))
        prompt = [*prompt, *completion, 7]  # the tool result / next header bridge
    return turns


Script = Callable[[AgentRequest, int], float]  # (request, attempt of its row) -> value


class StubAgent:
    """metadata["behavior"]: ok | fanout | error | hang | own_timeout | no_turns | bad_result
    | echo_payload | cancel_itself | aborted_retry | all_aborted | all_masked |
    masked_truncated (or a list of them, indexed by the attempt).

    own_timeout: a request of the backend to its agent times out on the backend's own clock
    (an aiohttp total timeout, 5 s) long before the episode deadline.
    cancel_itself: the backend raises `asyncio.CancelledError` although nobody cancelled the
    episode (what awaiting a thread-pool future that its executor's shutdown cancelled does).
    metadata["sleep"] / ["reward"]: a number, or a list indexed by the attempt (the how-many-th
    episode of the row `metadata["id"]` this is, counting episodes run again after a cut);
    `delay` / `reward` callables take precedence (the benchmark draws from distributions)."""

    def __init__(
        self,
        gateway: FakeGateway,
        yields: int = 3,
        delay: Script | None = None,
        reward: Script | None = None,
    ) -> None:
        self.gateway = gateway
        self.yields = yields  # scheduler turns each episode stays live (no wall clock)
        self.delay, self.reward = delay, reward
        self.requests: list[AgentRequest] = []
        self.live = 0
        self.max_live = 0
        self.cancelled: list[str] = []
        self.finished: list[str] = []
        self.closed = False
        self.attempts: dict[Any, int] = {}

    async def run(self, request: AgentRequest) -> AgentResult:
        self.requests.append(request)
        row = request.payload.get("id")
        attempt = self.attempts.get(row, 0)
        self.attempts[row] = attempt + 1
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        try:
            result = await self._act(request, attempt)
            self.finished.append(request.session_id)
            return result
        except asyncio.CancelledError:
            self.cancelled.append(request.session_id)
            raise
        finally:
            self.live -= 1

    @staticmethod
    def scripted(meta: Mapping[str, Any], key: str, attempt: int, default: float) -> float:
        value = meta.get(key, default)
        if isinstance(value, list):
            value = value[attempt % len(value)]
        return float(value)

    async def _act(self, request: AgentRequest, attempt: int) -> AgentResult:
        meta = request.payload
        info = meta["_rollout"]
        sid, token = info["session_id"], info["api_key"]
        behavior = meta.get("behavior", "ok")
        if isinstance(behavior, list):  # per attempt, like sleep and reward
            behavior = behavior[attempt % len(behavior)]
        for _ in range(self.yields):
            await asyncio.sleep(0)
        if self.delay:
            sleep = self.delay(request, attempt)
        else:
            sleep = self.scripted(meta, "sleep", attempt, 0)
        if sleep:
            await asyncio.sleep(sleep)
        if behavior == "hang":
            await asyncio.Event().wait()
        if behavior == "own_timeout":
            async with asyncio.timeout(5):
                await asyncio.Event().wait()
        if behavior == "cancel_itself":
            raise asyncio.CancelledError()
        if behavior == "error":
            raise AgentError("agent_error", "the agent crashed")
        if behavior == "bad_result":
            raise AgentError("bad_result", "rewards missing")
        if behavior == "echo_payload":  # a failure report quoting the payload, tokens and all
            raise AgentError("agent_error", f"the agent reported a failure: bad payload {meta}")
        if behavior == "ok":
            for turn in chain_turns(int(self.scripted(meta, "turns", attempt, 2))):
                self.gateway.record(sid, token, turn)
        if behavior == "fanout":  # two sub-agents asking the same prompt: two sequences
            for turn in (
                Turn([1, 2, 3], [40, 41], [-0.1, -0.2], "stop", weight_version="5"),
                Turn([1, 2, 3], [50], [-0.3], "length", weight_version="5"),
            ):
                self.gateway.record(sid, token, turn)
        if behavior == "aborted_retry":  # the engine aborted a call; the agent asked again
            for turn in (
                Turn([1, 2, 3], [40, 41], [-0.1, -0.2], "abort"),
                Turn([1, 2, 3], [50], [-0.3], "stop"),
            ):
                self.gateway.record(sid, token, turn)
        if behavior == "all_aborted":  # every call aborted: no completion reached the agent
            for turn in (
                Turn([1, 2, 3], [40], [-0.1], "abort"),
                Turn([1, 2, 3], [50], [-0.3], "abort"),
            ):
                self.gateway.record(sid, token, turn)
        if behavior == "all_masked":  # answered twice, neither with usable logprobs
            for turn in (
                Turn([1, 2, 3], [40], None, "stop"),
                Turn([1, 2, 3], [50], None, "stop"),
            ):
                self.gateway.record(sid, token, turn)
        if behavior == "masked_truncated":  # a length-cut answer without logprobs, then one
            for turn in (
                Turn([1, 2, 3], [40, 41], None, "length"),
                Turn([1, 2, 3], [50], [-0.3], "stop"),
            ):
                self.gateway.record(sid, token, turn)
        reward = (
            self.reward(request, attempt)
            if self.reward
            else self.scripted(meta, "reward", attempt, 1.0)
        )
        return AgentResult(reward=reward, document={})

    def pool_stats(self) -> PoolStats:
        return PoolStats(size=4, in_use=self.live)

    async def aclose(self) -> None:
        self.closed = True


def runtime_config(
    max_concurrent: int = 3,
    timeout: int = 30,
    eval_sets: Sequence[dict[str, Any]] = (),
    **grpo: Any,
) -> RuntimeConfig:
    """A valid runtime config with an HTTP agent (the stub stands in for it); `grpo` keys
    (wire names) override the GRPO block."""
    return RuntimeConfig.model_validate(
        {
            "experiment": "exp",
            "namespace": "ns",
            "bundleVersion": "test",
            "gatewayUrl": "http://gw.test",
            "spec": {
                "model": {
                    "path": "/models/qwen",
                    "type": "qwen2.5-0.5B",
                    "rendererFamily": "qwen3",
                },
                "data": {"train": "/data/train.jsonl", "eval": list(eval_sets)},
                "agent": {
                    "http": {"url": "http://agent.test/episodes", "timeoutSeconds": timeout},
                    "maxConcurrent": max_concurrent,
                },
                "grpo": {
                    "numRollouts": 2,
                    "rolloutBatchSize": 2,
                    "samplesPerPrompt": 2,
                    "maxResponseLength": 64,
                    **grpo,
                },
            },
        }
    )


class ChatAgent:
    """A remote agent in miniature: asks the row's `q` in `turns` OpenAI chat calls through
    its session's endpoint, each appending the reply and a follow-up (as a tool loop does)."""

    def __init__(self, turns: int = 1) -> None:
        self.turns = turns
        self.calls = 0
        self.http: aiohttp.ClientSession | None = None

    async def run(self, request: AgentRequest) -> AgentResult:
        info = request.payload["_rollout"]
        self.http = self.http or aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {info['api_key']}"}
        messages: list[dict[str, Any]] = [{"role": "user", "content": request.payload["q"]}]
        for _ in range(self.turns):
            self.calls += 1
            body = {"model": info["model_id"], "messages": messages, "max_tokens": 16}
            url = f"{info['base_url']}/chat/completions"
            async with self.http.post(url, json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                reply = (await resp.json())["choices"][0]["message"]
            messages += [
                {"role": "assistant", "content": reply.get("content") or ""},
                {"role": "user", "content": "and then?"},
            ]
        return AgentResult(reward=1.0, document={})

    def pool_stats(self) -> PoolStats:
        return PoolStats(size=2, in_use=0)

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.close()


class SlimeDataSource:
    """slime's default data source (`RolloutDataSourceWithBuffer`) in miniature, for the
    benchmark: `get_samples(n)` hands out groups handed back first (oldest first), then the
    next rows, cycling, as `n_samples` copies with slime's `group_index`/`index` numbering;
    `add_samples` takes groups back and checks their size as slime does. A test runs the same
    script of calls against slime's own class at both pinned commits and compares."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], n_samples: int) -> None:
        from agentrl.bundle.rollout.types import PlainSample

        self._sample = PlainSample
        self.rows, self.n_samples = list(rows), n_samples
        self.offset = self.group_index = self.index = 0
        self.buffer: list[list[Any]] = []

    def get_samples(self, n: int) -> list[list[Any]]:
        out = self.buffer[:n]
        del self.buffer[:n]
        while len(out) < n:
            row = self.rows[self.offset % len(self.rows)]
            self.offset += 1
            group = []
            for _ in range(self.n_samples):
                group.append(
                    self._sample(
                        prompt=row.get("prompt", ""),
                        metadata=dict(row.get("metadata") or {}),
                        group_index=self.group_index,
                        index=self.index,
                    )
                )
                self.index += 1
            self.group_index += 1
            out.append(group)
        return out

    def add_samples(self, groups: list[list[Any]]) -> None:
        if not groups:
            return
        for group in groups:
            assert len(group) == self.n_samples, f"{len(group)} != {self.n_samples}"
            self.buffer.append(group)


FAILING_FILTER = """
def fails_when_told(args, samples):
    if args.fail_filter:
        raise RuntimeError("the user's filter has a bug")
    return True
"""


def failing_filter(tmp_path: Path, monkeypatch: Any, module: str) -> str:
    """A user's dynamic sampling filter, importable as `module`, that raises when slime's args
    say `fail_filter` (a step that fails partway); its dotted path for the spec."""
    code = tmp_path / "extra_code"
    code.mkdir(exist_ok=True)
    (code / f"{module}.py").write_text(FAILING_FILTER)
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return f"{module}.fails_when_told"


@contextlib.contextmanager
def stub_runtime(gateway: FakeGateway, max_concurrent: int = 2) -> Iterator[RolloutRuntime]:
    """A rollout runtime whose episodes run a `StubAgent` against `gateway`, its metrics kept
    in process; its loop thread is closed on the way out."""
    # Imported here: the benchmarks and the upstream-site scripts import these doubles
    # without a runtime, and the metrics registry behind one costs half a second to import.
    from tests.support.metrics import LocalSink

    from agentrl.bundle.metrics import BundleMetrics
    from agentrl.bundle.rollout.batch import RolloutContext
    from agentrl.bundle.rollout.runtime import RolloutRuntime

    ctx = RolloutContext(gateway, StubAgent(gateway), asyncio.Semaphore(max_concurrent))

    async def build() -> RolloutContext:
        return ctx

    runtime = RolloutRuntime(build, LocalSink(BundleMetrics()))
    try:
        yield runtime
    finally:
        runtime._thread.close()
