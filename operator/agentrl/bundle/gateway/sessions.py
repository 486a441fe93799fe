"""Session state: who may call, what was recorded, and what is still running.

One session per episode. Its id is chosen by the rollout (unguessable), its bearer token
by the gateway; a reused id is refused even after close (two rollouts sharing state would
interleave into one trace), and a closed session refuses late requests. Each session has
one lock so its turns never interleave (select chain -> render -> generate -> record).
"""

from __future__ import annotations

import asyncio
import hmac
import re
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrl.bundle.gateway.prompt import Chain
from agentrl.bundle.session import SessionError
from agentrl.bundle.traces import Turn

SESSION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MAX_TOMBSTONES = 200_000  # closed ids remembered to refuse reuse; old ones age out
# SGLang's sampling_params (SamplingParams); anything else is a typo the engine or the router
# would drop without a word, so it is refused when the session is opened.
SAMPLING_KEYS = frozenset(
    [
        "max_new_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "stop",
        "stop_token_ids",
        "stop_regex",
        "min_new_tokens",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "json_schema",
        "regex",
        "ebnf",
        "logit_bias",
        "sampling_seed",
        "custom_params",
        "stream_interval",
        "n",
    ]
)


def check_sampling_params(params: Mapping[str, Any]) -> None:
    unknown = sorted(set(params) - SAMPLING_KEYS)
    if unknown:
        raise SessionError(
            f"sampling_params: unknown key(s) {', '.join(unknown)}; SGLang accepts "
            f"{', '.join(sorted(SAMPLING_KEYS))}"
        )
    if params.get("n", 1) != 1:
        raise SessionError("sampling_params.n must be 1: open one session per sample")


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

    def check_token(self, presented: str | None) -> bool:
        """Constant-time comparison, so the token cannot be guessed byte by byte."""
        return presented is not None and hmac.compare_digest(
            presented.encode(), self.token.encode()
        )


class SessionStore:
    def __init__(self) -> None:
        self._open: dict[str, Session] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def create(self, sid: str, sampling_params: Mapping[str, Any]) -> Session:
        if not SESSION_ID.match(sid):
            raise SessionError(f"session id {sid!r} must match {SESSION_ID.pattern}")
        if sid in self._open or sid in self._closed:
            raise DuplicateSession(
                f"session id {sid!r} is already in use; session ids must be unique"
            )
        check_sampling_params(sampling_params)
        session = Session(
            sid=sid, token=secrets.token_urlsafe(32), sampling_params=dict(sampling_params)
        )
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
        return list(self.get(sid).turns)

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

    def close_all(self) -> None:
        for sid in list(self._open):
            self.close(sid)
