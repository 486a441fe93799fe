"""The rehearsal's own checks: mistakes training would not count as failed sessions.

A failed episode carries the reason the failed-session metric counts it under
(`agentrl_failed_sessions_total{reason}`: `bad_result` for a reward sent as a string,
`no_turns` for an agent that never called its `base_url`, ...). Three mistakes fail no
episode in training, which then trains on them without a word; a rehearsal fails the
episode and names them:

- `context_exceeded`: the conversation outgrew the model's context: a model call found the
  prompt filling it (the gateway answers finish reason `length` with no content, as slime's
  agent adapter does), a turn was cut at its edge, or the engine refused one for it.
- `tool_call_parse_failed`: the model wrote a tool call the gateway's parser
  (`spec.model.rendererFamily`, `toolCallParser`) could not read, so the agent got it as
  text. Each completion is parsed again with the gateway's own renderer and
  `output_from_parsed` (what the agent was answered), and with every tool-call parser the
  `renderers` package knows, to see markup the gateway's parser did not look for at all.
- `callback_unreachable`: an HTTP agent's result came by the status poll, the backstop,
  because its callback never arrived (in the cluster: every episode waits
  `pollIntervalSeconds` longer, or times out where the agent keeps no result to poll).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentrl.bundle.gateway.chat import CONTEXT_LENGTH_EXCEEDED, output_from_parsed
from agentrl.bundle.rehearse.observe import Seen
from agentrl.bundle.traces import Turn

CONTEXT: Final = "context_exceeded"
TOOL_CALLS: Final = "tool_call_parse_failed"
CALLBACK: Final = "callback_unreachable"
CHECKS: Final = (CONTEXT, TOOL_CALLS, CALLBACK)
RAW_CHARS: Final = 80  # of a tool call's text quoted in a finding
_NAME: Final = re.compile(r"[A-Za-z_][\w.-]{0,127}")  # what a function name looks like


@dataclass(frozen=True)
class Finding:
    check: str  # one of CHECKS
    message: str


def context_findings(seen: Seen, context_length: int | None) -> Iterator[Finding]:
    """The conversation outgrew the model's context, however the gateway met it."""
    where = f"the model's context ({context_length} tokens)" if context_length else "the context"
    if seen.context_full:
        yield Finding(
            CONTEXT,
            f"{seen.context_full} model call(s) found the prompt filling {where}: answered with "
            "finish reason length and no content, nothing sampled or trained",
        )
        return
    refused = seen.refusals.get(CONTEXT_LENGTH_EXCEEDED, 0)
    if refused:
        yield Finding(
            CONTEXT, f"{refused} model call(s) refused for the context: {seen.last_refusal}"
        )
        return
    if context_length is None:
        return
    for i, turn in enumerate(seen.turns, 1):
        used = len(turn.prompt_ids) + len(turn.completion_ids)
        if turn.finish_reason == "length" and used >= context_length:
            yield Finding(
                CONTEXT,
                f"turn {i} was cut at the edge of {where}: the conversation outgrew it",
            )
            return


@dataclass(frozen=True)
class ToolCallCheck:
    """Parses completions as the gateway does, and with every parser `renderers` knows."""

    renderer: Any  # the gateway's renderer
    tokenizer: Any
    where: str  # how the gateway parses, for the message ("rendererFamily qwen3, ...")

    def failures(self, turns: Sequence[Turn]) -> tuple[int, list[Finding]]:
        """(tool calls the agent got as text, findings); one finding per episode at most."""
        count, first = 0, ""
        for i, turn in enumerate(turns, 1):
            if turn.finish_reason == "length":
                continue  # cut short: its markup is incomplete by the cut's doing, not the parser's
            n, what = self._turn(turn)
            if n and not first:
                first = f"turn {i}: {what}"
            count += n
        if not count:
            return 0, []
        message = (
            f"{count} tool call(s) reached the agent as text; {first}. The gateway parses with "
            f"{self.where}: does it match the model's tool-call format?"
        )
        return count, [Finding(TOOL_CALLS, message)]

    def _turn(self, turn: Turn) -> tuple[int, str]:
        try:
            parsed = self.renderer.parse_response(
                list(turn.completion_ids), prompt_ids=list(turn.prompt_ids)
            )
        except Exception as exc:  # the gateway answers such a completion as plain text
            return 1, f"the parser failed on the completion ({type(exc).__name__})"
        _, calls = output_from_parsed(parsed, parse_tools=True)
        attempts = parsed.tool_calls
        if len(attempts) > len(calls):
            bad = next(c for c in attempts if getattr(c.status, "value", c.status) != "ok")
            status = getattr(bad.status, "value", bad.status)
            return len(attempts) - len(calls), f"{status}: {_quote(bad.raw)}"
        if attempts:
            return 0, ""
        other = self._other_parser(turn)
        if other is None:
            return 0, ""
        name, raw = other
        return 1, f"the completion holds a tool call in the '{name}' format: {_quote(raw)}"

    def _other_parser(self, turn: Turn) -> tuple[str, str] | None:
        """A parser that finds tool-call markup the gateway's parser did not look for: the
        one that reads a call with a function's name, else any that sees markup at all."""
        from renderers.parsers import TOOL_PARSERS, get_tool_parser

        ids = list(turn.completion_ids)
        found: list[tuple[bool, str, str]] = []
        for name in sorted(TOOL_PARSERS):
            try:
                _, calls = get_tool_parser(name, self.tokenizer).extract(ids)
            except Exception:  # a parser for another model's vocabulary: not this format
                continue
            if calls:
                named = all(_NAME.fullmatch(str(c.name or "")) for c in calls)
                found.append((not named, name, calls[0].raw))
        if not found:
            return None
        _, name, raw = min(found)
        return name, raw


def callback_findings(seen: Seen, callback_url: str | None) -> Iterator[Finding]:
    if seen.via == "poll":
        yield Finding(
            CALLBACK,
            f"the result came by the status poll: the agent's callback to {callback_url} never "
            "arrived (the agent cannot reach that URL: whatever routes the gateway's /sessions/ "
            "to it must route /agentrl/callback/ too; or it does not post its result)",
        )


def _quote(raw: str) -> str:
    text = " ".join(str(raw).split())
    return repr(text if len(text) <= RAW_CHARS else text[: RAW_CHARS - 3] + "...")
