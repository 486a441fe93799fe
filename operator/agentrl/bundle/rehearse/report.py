"""A rehearsal's result: per episode, per group, the network path and one episode up close.

Plain data, built by `run` and printed by the CLI as text (one screen for a handful of
episodes) or as one JSON object (`-o json`, the same fields). The exit status follows
`validate`'s convention: 0 every episode finished with a numeric reward and passed the
rehearsal's checks, 1 something failed (named per episode), 2 the rehearsal could not run
(bad usage or a bad spec: `RehearsalError`, raised before any episode starts).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentrl.api.constants import REHEARSE_FAILED, REHEARSE_OK, REHEARSE_USAGE
from agentrl.bundle.rehearse.checks import Finding

EXIT_OK, EXIT_FAILED, EXIT_USAGE = REHEARSE_OK, REHEARSE_FAILED, REHEARSE_USAGE
SID_CHARS: Final = 12  # of a session id in the text tables
SPAN_CHARS: Final = 72  # of a token span's text in the episode view


class RehearsalError(Exception):
    """The rehearsal cannot start: wrong command line, a spec it cannot run, no engine.
    The message names what to fix; the CLI prints it and exits 2."""


def json_type(value: Any) -> str:
    """The JSON type of a value as the agent sent it (agents are written in any language)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_value(value: Any) -> Any:
    """The value with each non-finite number as the token the agent wrote ("NaN",
    "Infinity", "-Infinity"), a string: Python's json module would print the bare token,
    which strict parsers (orjson, JSON.parse, Go's encoding/json) refuse, so one agent's
    NaN reward would leave the whole `-o json` report and report.json unreadable."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value


@dataclass
class EpisodeReport:
    session_id: str
    group: int
    index: int
    reason: str | None  # what agentrl_failed_sessions_total{reason} would count; None: success
    message: str  # the failure's message, as the rollout logs it
    findings: list[Finding]  # the rehearsal's own checks that failed
    reward: float  # as trained (a failed episode's is 0)
    received: tuple[Any, str] | None  # the reward as the agent sent it, and its JSON type
    turns: int
    prompt_tokens: int  # of the first turn
    completion_tokens: int  # sampled, over all turns
    sequences: int  # merged samples (0 when the episode failed)
    trained_tokens: int
    masked_tokens: int
    truncated: bool
    tool_call_failures: int
    seconds: float
    base_url: str  # `_rollout.base_url`
    calls: int  # requests to it the gateway answered
    answers: dict[int, int]  # HTTP status -> calls
    via: str  # how the result arrived ("" when none did)
    callback_url: str | None  # HTTP agents: where the result was to be posted

    @property
    def ok(self) -> bool:
        return self.reason is None and not self.findings

    @property
    def named(self) -> str:
        """The one name for what went wrong: the metric's reason, else the first check's."""
        if self.reason is not None:
            return self.reason
        return self.findings[0].check if self.findings else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "group": self.group,
            "index": self.index,
            "status": "ok" if self.ok else "failed",
            "reason": self.reason,
            "message": self.message,
            "checks": [{"name": f.check, "message": f.message} for f in self.findings],
            "reward": self.reward,
            "reward_received": None
            if self.received is None
            else {"value": json_value(self.received[0]), "type": self.received[1]},
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "sequences": self.sequences,
            "trained_tokens": self.trained_tokens,
            "masked_tokens": self.masked_tokens,
            "truncated": self.truncated,
            "tool_call_parse_failures": self.tool_call_failures,
            "seconds": round(self.seconds, 3),
            "base_url": self.base_url,
            "model_calls": self.calls,
            "model_call_answers": {str(k): v for k, v in sorted(self.answers.items())},
            "result_via": self.via or None,
            "callback_url": self.callback_url,
        }


@dataclass
class GroupReport:
    group: int
    rewards: list[float]  # every episode's, as trained (a failed one's is 0)
    counted: int  # episodes in the group's statistics (failedEpisodes: exclude leaves failures out)
    std: float | None  # of the counted rewards, sample std (n - 1) as slime; None below two
    zero_variance: bool
    filter: str | None  # spec.grpo.dynamicSamplingFilter (None: none, or an eval split)
    verdict: str | None = None  # kept | dropped | skipped (too few valid, no filter); None: eval
    drop_reason: str | None = None
    error: str | None = None  # the filter could not be loaded, or failed on the group

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "rewards": self.rewards,
            "counted": self.counted,
            "std": self.std,
            "zero_variance": self.zero_variance,
            "dynamic_sampling": {
                "filter": self.filter,
                "verdict": self.verdict,
                "reason": self.drop_reason,
                "error": self.error,
            },
        }

    def describe(self) -> str:
        if self.error:
            return f"filter failed: {self.error}"
        if self.verdict is None:
            return "eval: never filtered"
        if self.verdict == "skipped":
            return "SKIPPED: too few valid episodes; trains with no advantage"
        if self.verdict == "dropped":
            return f"DROPPED by dynamic sampling ({self.drop_reason or 'filtered'})"
        if self.filter is None:
            return "kept (no filter)" + (": zero variance, trains nothing" * self.zero_variance)
        return f"kept by {self.filter}"


@dataclass
class Span:
    kind: str  # prompt | trained | masked
    tokens: int
    text: str


@dataclass
class EpisodeView:
    """One episode up close: its turns, and its first sequence as trained and masked spans."""

    session_id: str
    turns: list[tuple[int, int, str]]  # (prompt tokens, completion tokens, finish reason)
    sequences: int
    spans: list[Span]

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "turns": [
                {"prompt_tokens": p, "completion_tokens": c, "finish_reason": f}
                for p, c, f in self.turns
            ],
            "sequences": self.sequences,
            "first_sequence": [
                {"kind": s.kind, "tokens": s.tokens, "text": s.text} for s in self.spans
            ],
        }


@dataclass
class Report:
    experiment: str  # namespace/name
    split: str
    engine: str
    engine_model: str
    gateway: str
    agent: str  # "http <url>" or "agentCore <runtime ARN>"
    episodes: list[EpisodeReport]
    groups: list[GroupReport]
    seconds: float
    samples_path: str
    log_path: str
    view: EpisodeView | None = None
    notes: list[str] = field(default_factory=list)
    # The gateway URL agents are handed in the pods and where it comes from; None: unknown.
    # Never called by a rehearsal, whose agents call `gateway` on this machine.
    pods_gateway: tuple[str, str] | None = None
    # spec.agent.http.url where --agent-url replaced it: the pods' rollout calls it instead.
    pods_agent: str | None = None

    @property
    def failed(self) -> list[EpisodeReport]:
        return [e for e in self.episodes if not e.ok]

    @property
    def exit_code(self) -> int:
        broken = any(g.error for g in self.groups)  # the spec's own filter fails
        return EXIT_FAILED if self.failed or broken or not self.episodes else EXIT_OK

    def network(self) -> dict[str, Any]:
        """The network path: what agents were handed, and whether they used it."""
        eps = self.episodes
        out: dict[str, Any] = {
            "base_url": _pattern(eps[0].base_url, eps[0].session_id) if eps else None,
            "episodes_calling_base_url": sum(e.calls > 0 for e in eps),
            "episodes": len(eps),
        }
        urls = [e for e in eps if e.callback_url]
        if urls:
            via = Counter(e.via or "none" for e in urls)
            out["callback_url"] = _pattern(urls[0].callback_url or "", urls[0].session_id)
            out["results_via"] = dict(sorted(via.items()))
        pods = self.in_pods(out)
        if pods is not None:
            out["in_pods"] = pods
        if self.pods_agent is not None:
            # Not rehearsed either: this rehearsal's episodes went to --agent-url.
            out["pods_agent_url"] = self.pods_agent
        return out

    def in_pods(self, net: dict[str, Any]) -> dict[str, Any] | None:
        """The URLs agents are handed in the pods, where they differ from the rehearsal's:
        the same paths under the pods' gateway URL. Not rehearsed: no agent called them."""
        if self.pods_gateway is None:
            return None
        url, origin = self.pods_gateway
        here = self.gateway.rstrip("/")
        if url == here:
            return None  # --gateway-url is the pods' URL: the agents called it

        def there(pattern: str | None) -> str | None:
            if pattern is None or not pattern.startswith(here):
                return None
            return url + pattern[len(here) :]

        out = {"gateway": url, "from": origin, "rehearsed": False}
        out["base_url"] = there(net.get("base_url"))
        if "callback_url" in net:
            out["callback_url"] = there(net["callback_url"])
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "split": self.split,
            "engine": {"url": self.engine, "model": self.engine_model},
            "gateway": self.gateway,
            "agent": self.agent,
            "episodes": [e.to_json() for e in self.episodes],
            "groups": [g.to_json() for g in self.groups],
            "network": self.network(),
            "episode_view": self.view.to_json() if self.view else None,
            "samples": self.samples_path,
            "log": self.log_path,
            "seconds": round(self.seconds, 3),
            "notes": self.notes,
            "failed": len(self.failed),
            "exit_code": self.exit_code,
        }

    def text(self) -> str:
        return "\n".join(_text_lines(self)) + "\n"


def _pattern(url: str, sid: str) -> str:
    return url.replace(sid, "<session id>") if sid else url


def _text_lines(r: Report) -> list[str]:
    lines = [
        f"agentrl rehearse {r.experiment} ({r.split}): {len(r.episodes)} episode(s) in "
        f"{len(r.groups)} group(s), {r.seconds:.1f}s",
        f"  engine  {r.engine} (serving {r.engine_model or 'an unnamed model'})",
        f"  gateway {r.gateway}   agent {r.agent}",
        "",
        "EPISODES",
    ]
    header = ("SESSION", "GRP", "STATUS", "REASON", "REWARD (AS SENT)", "TURNS", "PROMPT",
              "COMPL", "TRAIN/MASK", "TRUNC", "TOOLERR", "WALL")  # fmt: skip
    rows = [header]
    for e in r.episodes:
        sent = "-" if e.received is None else f"{_short(repr(e.received[0]), 10)} ({e.received[1]})"
        rows.append((
            e.session_id[:SID_CHARS], str(e.group), "ok" if e.ok else "FAILED", e.named or "-",
            f"{e.reward:g} <- {sent}", str(e.turns), str(e.prompt_tokens),
            str(e.completion_tokens), f"{e.trained_tokens}/{e.masked_tokens}",
            "yes" if e.truncated else "no", str(e.tool_call_failures), f"{e.seconds:.1f}s",
        ))  # fmt: skip
    lines += _table(rows)
    failed = r.failed
    if failed:
        lines += ["", "FAILURES"]
        for e in failed:
            if e.reason is not None:
                lines.append(f"  {e.session_id[:SID_CHARS]} {e.reason}: {e.message}")
            lines += [f"  {e.session_id[:SID_CHARS]} {f.check}: {f.message}" for f in e.findings]
    lines += ["", "GROUPS"]
    grows = [("GROUP", "REWARDS", "STD", "DYNAMIC SAMPLING")]
    for g in r.groups:
        std = "-" if g.std is None else f"{g.std:.3f}"
        grows.append((str(g.group), " ".join(f"{x:g}" for x in g.rewards), std, g.describe()))
    lines += _table(grows)
    net = r.network()
    lines += ["", "NETWORK"]
    lines.append(
        f"  base_url {net['base_url']}: called in {net['episodes_calling_base_url']} of "
        f"{net['episodes']} episode(s)"
    )
    if "callback_url" in net:
        via = ", ".join(f"{k} {v}" for k, v in net["results_via"].items())
        lines.append(f"  callback {net['callback_url']}: results via {via}")
    pods = net.get("in_pods")
    if pods is not None:
        lines.append(f"  in the pods agents are handed {pods['gateway']} instead ({pods['from']})")
        lines += [f"    {k} {pods[k]}" for k in ("base_url", "callback_url") if pods.get(k)]
        lines.append(
            "    not rehearsed: this rehearsal's agents called the gateway on this machine"
        )
    if "pods_agent_url" in net:
        lines.append(
            f"  agent: in the pods the rollout sends episodes to {net['pods_agent_url']} "
            "(spec.agent.http.url) instead of --agent-url: not rehearsed"
        )
    if r.view is not None:
        lines += ["", *_view_lines(r.view)]
    lines += ["", *[f"note: {n}" for n in r.notes]] if r.notes else []
    lines.append(f"samples: {r.samples_path}   log: {r.log_path}")
    verdict = (
        "every episode finished with a numeric reward"
        if not failed
        else f"{len(failed)} of {len(r.episodes)} episode(s) failed ("
        + ", ".join(f"{k} x{v}" for k, v in sorted(Counter(e.named for e in failed).items()))
        + ")"
    )
    lines.append(f"result: {verdict}; exit status {r.exit_code}")
    return lines


def _view_lines(v: EpisodeView) -> list[str]:
    lines = [f"EPISODE {v.session_id} up close: {len(v.turns)} turn(s), {v.sequences} sequence(s)"]
    for i, (p, c, f) in enumerate(v.turns, 1):
        lines.append(f"  turn {i}: prompt {p} tokens, completion {c} tokens, finish {f}")
    if v.spans:
        lines.append("  first sequence ([trained] tokens carry the loss; [masked] do not):")
        lines += [f"    [{s.kind} {s.tokens}] {_short(s.text, SPAN_CHARS)}" for s in v.spans]
    return lines


def _short(text: str, limit: int) -> str:
    flat = text.replace("\n", "\u23ce")
    if len(flat) <= limit:
        return flat
    head = limit * 2 // 3
    return flat[:head] + "\u2026" + flat[-(limit - head - 1) :]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip
