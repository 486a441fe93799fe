"""Session state: who may call, what was recorded, and what is still running.

One session per episode. Its id is chosen by the rollout (unguessable), its bearer token
by the gateway; a reused id is refused even after close (two rollouts sharing state would
interleave into one trace), and a closed session refuses late requests. Each session has
one lock so its turns never interleave (select chain -> render -> generate -> record).
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.bundle.gateway.prompt import Chain
from agentrl.bundle.session import FullLimit, SessionError, secret_matches
from agentrl.bundle.traces import CONTEXT_FULL, Turn

SESSION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")  # the whole id: `fullmatch`, never `$`
MAX_TOMBSTONES = 200_000  # closed ids remembered to refuse reuse; old ones age out
REFUSAL_CHARS = 300  # of the last refusal's message a session keeps
Check = Callable[[Any], str | None]  # None, or what is wrong with the value


def _int(lo: int | None = None, hi: int | None = None) -> Check:
    def check(v: Any) -> str | None:
        ok = type(v) is int and (lo is None or v >= lo) and (hi is None or v <= hi)
        if ok:
            return None
        if lo is not None and lo == hi:
            return f"must be {lo}"
        bounds = " and ".join(
            b
            for b in (f">= {lo}" if lo is not None else "", f"<= {hi}" if hi is not None else "")
            if b
        )
        return f"must be an integer{' ' + bounds if bounds else ''}"

    return check


def _num(lo: float, hi: float, lo_open: bool = False) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
            return f"must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        if v < lo or v > hi or (lo_open and v == lo):
            return f"must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        return None

    return check


def _top_k(v: Any) -> str | None:
    ok = type(v) is int and (v == -1 or v >= 1)
    return None if ok else "must be -1 (the whole vocabulary) or an integer >= 1, as SGLang takes"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be a boolean"


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else "must be a string"


def _strs(v: Any) -> str | None:
    ok = isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))
    return None if ok else "must be a string or a list of strings"


def _ids(v: Any) -> str | None:
    ok = isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)
    return None if ok else "must be a list of token ids (non-negative integers)"


def _object(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be an object"


def _bias(v: Any) -> str | None:
    ok = isinstance(v, dict) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in v.values()
    )
    return None if ok else "must be an object of token id -> number"


INT64_MAX = 2**63 - 1
# SGLang's sampling_params (SamplingParams) and the types and ranges it accepts. Anything
# else is a typo the engine or the router would drop without a word, and a wrong type would
# fail every turn of the episode, so both are refused when the session is opened.
SAMPLING_PARAMS: dict[str, Check] = {
    "max_new_tokens": _int(1),
    "min_new_tokens": _int(0),
    "temperature": _num(0, 100),
    "top_p": _num(0, 1, lo_open=True),
    "top_k": _top_k,
    "min_p": _num(0, 1),
    "frequency_penalty": _num(-2, 2),
    "presence_penalty": _num(-2, 2),
    "repetition_penalty": _num(0, 2, lo_open=True),
    "stop": _strs,
    "stop_token_ids": _ids,
    "stop_regex": _strs,
    "ignore_eos": _bool,
    "skip_special_tokens": _bool,
    "spaces_between_special_tokens": _bool,
    "no_stop_trim": _bool,
    "json_schema": _str,
    "regex": _str,
    "ebnf": _str,
    "logit_bias": _bias,
    "sampling_seed": _int(-INT64_MAX - 1, INT64_MAX),
    "custom_params": _object,
    "stream_interval": _int(1),
    "n": _int(1, 1),
}
SAMPLING_KEYS = frozenset(SAMPLING_PARAMS)


def check_sampling_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The session's sampling params, checked; a null value means the engine's default."""
    unknown = sorted(str(k) for k in set(params) - SAMPLING_KEYS)
    if unknown:
        raise SessionError(
            f"sampling_params: unknown key(s) {', '.join(unknown)}; SGLang accepts "
            f"{', '.join(sorted(SAMPLING_KEYS))}"
        )
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        problem = SAMPLING_PARAMS[key](value)
        if problem is not None:
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            hint = ": open one session per sample" if key == "n" else ""
            raise SessionError(f"sampling_params.{key} {problem}, got {shown}{hint}")
        out[key] = value
    return out


class DuplicateSession(SessionError):
    """The id was already used (open or closed)."""


class SessionClosed(SessionError):
    """The session was closed; late requests are refused."""


class UnknownSession(SessionError):
    """No session with that id."""


@dataclass
class Session:
    sid: str
    token: str = field(repr=False)
    sampling_params: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turns: list[Turn] = field(default_factory=list)
    chains: list[Chain] = field(default_factory=list)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)  # handlers running for it
    closed: bool = False
    n_requests: int = 0
    large: bool = False  # served a large request: memory to hand back when it closes
    # What the agent's calls on this session's URL were answered (HTTP status -> calls), why
    # its turns failed (error code, or the status where there is none -> turns) with the
    # last such message, and how many turns found the context full (answered `length`,
    # nothing sampled): whoever debugs an episode (the rehearsal) learns whether the agent
    # called at all, and what it was told.
    answers: dict[int, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)
    last_refusal: str = ""
    context_full: int = 0
    context_full_tokens: int = 0  # the longest prompt that found it full
    context_length: int = 0  # the context it filled
    context_limit: FullLimit | None = None  # which limit that was (None: unknown, or both)
    # Where in `turns` each of those calls came (how many turns were recorded before it),
    # with the prompt + completion ids of the turn it continued (empty: none): the trace
    # (`SessionStore.turns`) holds them as CONTEXT_FULL turns, in order.
    context_full_at: list[tuple[int, Sequence[int]]] = field(default_factory=list)

    def answered(self, status: int) -> None:
        self.answers[status] = self.answers.get(status, 0) + 1

    def refused(self, status: int, code: str | None, message: str) -> None:
        """A turn failed with this client-facing error."""
        key = code or str(status)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        self.last_refusal = message[:REFUSAL_CHARS]

    def check_token(self, presented: str | None) -> bool:
        return secret_matches(presented, self.token)


class SessionStore:
    def __init__(self) -> None:
        self._open: dict[str, Session] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def create(self, sid: str, sampling_params: Mapping[str, Any]) -> Session:
        if not SESSION_ID.fullmatch(sid):  # `^...$` let "abc\n" through
            raise SessionError(f"session id {sid!r} must match {SESSION_ID.pattern}")
        if sid in self._open or sid in self._closed:
            raise DuplicateSession(
                f"session id {sid!r} is already in use; session ids must be unique"
            )
        params = check_sampling_params(sampling_params)
        session = Session(sid=sid, token=secrets.token_urlsafe(32), sampling_params=params)
        self._open[sid] = session
        return session

    def get(self, sid: str) -> Session:
        session = self._open.get(sid)
        if session is not None:
            return session
        if sid in self._closed:
            raise SessionClosed(f"session {sid!r} is closed")
        raise UnknownSession(f"no session {sid!r}")

    def turns(self, sid: str) -> list[Turn]:
        """The session's trace: its sampled turns, and each call refused for a full context
        where it came, as a `CONTEXT_FULL` turn whose prompt ids are the conversation it
        continued (that turn's prompt + completion; none for a new conversation) and no
        completion: it ends that conversation's segment truncated."""
        session = self.get(sid)
        if not session.context_full_at:
            return list(session.turns)
        out: list[Turn] = []
        refused = iter(session.context_full_at)
        at = next(refused, None)
        for i, turn in enumerate(session.turns):
            while at is not None and at[0] <= i:
                out.append(Turn(at[1], (), None, CONTEXT_FULL))
                at = next(refused, None)
            out.append(turn)
        while at is not None:
            out.append(Turn(at[1], (), None, CONTEXT_FULL))
            at = next(refused, None)
        return out

    def close(self, sid: str) -> Session | None:
        """Close `sid` and cancel its running requests (which aborts them upstream); idempotent."""
        session = self._open.pop(sid, None)
        if session is None:
            return None
        session.closed = True
        for task in list(session.tasks):
            task.cancel()
        self._closed[sid] = None
        while len(self._closed) > MAX_TOMBSTONES:
            self._closed.popitem(last=False)
        return session

    def close_all(self) -> list[str]:
        """Close every open session; their ids."""
        closed = list(self._open)
        for sid in closed:
            self.close(sid)
        return closed
