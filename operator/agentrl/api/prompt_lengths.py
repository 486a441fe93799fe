"""Which train rows slime's Dataset drops for a long prompt, one rule for the two places
that apply it.

With `--rollout-max-prompt-len` (or `--rollout-max-context-len`) in extraArgs, slime's
Dataset counts every train prompt's tokens when the job starts and drops the rows over the
limit. The launcher's preflight in the pods says which, counting with transformers as slime
does; `agentrl rehearse` leaves the same rows out, counting with the gateway's tokenizer.
Both judge with `judge_prompts`, so they agree on every row, the odd ones included, and
both list the rows with `listed_rows` (a prompt that is not text in the words of
`not_text_problem`), so they name the same rows.

slime's `filter_long_prompt` (slime/utils/data.py, the same at both supported commits):
https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/utils/data.py#L81-L127
https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/utils/data.py#L87-L139
- the first prompt not text: nothing is filtered (a warning in its log);
- else every prompt goes to the tokenizer in one batch (`add_special_tokens=False`), which
  takes a text, or a list of two texts as a text pair (counted as both together), and
  raises a TypeError on anything else: a list of messages, an object, a number, null. The
  job stops there, with the SGLang engines already up;
- a row counted over the limit is dropped, and only the count is logged (info).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentrl.api.data_rows import LISTED_ROWS

Count = Callable[[list[str]], list[int]]
"""Token counts of texts as slime counts them: the checkpoint's tokenizer, no special tokens."""

NOT_TEXT_WHY: Final = (
    "slime's Dataset counts every train prompt's tokens with the tokenizer when the first "
    "prompt is text, and the tokenizer takes only a text (or a list of two texts, a pair): "
    "the job would stop with a TypeError when it loads the file"
)
NOT_TEXT_FIX: Final = (
    "make every prompt text, or start the file with a non-text prompt (slime then counts "
    "none), or remove the prompt length flag"
)
ALL_DROPPED_FIX: Final = "raise or remove the flag"


def _texts(prompt: Any) -> list[str] | None:
    """The texts the tokenizer counts for one prompt in slime's batch, or None when it
    refuses the prompt."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and len(prompt) == 2 and all(isinstance(p, str) for p in prompt):
        return list(prompt)  # the tokenizer's text pair: both texts' tokens, back to back
    return None


@dataclass(frozen=True)
class PromptVerdict:
    """What slime's Dataset does with a train file's prompts under a prompt length."""

    rows: int
    """Rows judged (every row's prompt, in file order)."""
    long: tuple[tuple[int, int], ...]
    """(position among the rows, tokens) of each row slime drops."""
    not_text: tuple[tuple[int, str], ...]
    """(position, type name) of each prompt slime's tokenizer refuses (the job stops)."""

    @property
    def dropped(self) -> frozenset[int]:
        return frozenset(i for i, _ in self.long)

    @property
    def all_dropped(self) -> bool:
        return not self.not_text and len(self.long) == self.rows


def judge_prompts(prompts: Sequence[Any], most: int, count: Count) -> PromptVerdict | None:
    """slime's verdict on a train file's prompts (in file order) under a limit of `most`
    tokens, or None when it filters nothing (no rows, or a first prompt that is not text).
    `count` sees only texts; a prompt it could not be given is in `not_text`, not counted."""
    if not prompts or not isinstance(prompts[0], str):
        return None
    texts: list[str] = []
    spans: list[tuple[int, int, int]] = []  # (position, first text, text count)
    not_text: list[tuple[int, str]] = []
    for i, prompt in enumerate(prompts):
        parts = _texts(prompt)
        if parts is None:
            not_text.append((i, type(prompt).__name__))
            continue
        spans.append((i, len(texts), len(parts)))
        texts += parts
    counts = count(texts) if texts else []
    long = []
    for i, start, n in spans:
        tokens = sum(counts[start : start + n])
        if tokens > most:
            long.append((i, tokens))
    return PromptVerdict(len(prompts), tuple(long), tuple(not_text))


def listed_rows(lines: Sequence[int], found: Iterable[tuple[int, Any]]) -> str:
    """`N (what)` for the first LISTED_ROWS of `found` ((position among the rows, what)),
    each by its line number in `lines` (the rows' line numbers, in file order: blank lines
    are no rows), then how many more."""
    found = list(found)
    listed = ", ".join(f"{lines[i]} ({what})" for i, what in found[:LISTED_ROWS])
    more = f" and {len(found) - LISTED_ROWS} more" if len(found) > LISTED_ROWS else ""
    return listed + more


def not_text_problem(
    path: str, lines: Sequence[int], not_text: Iterable[tuple[int, str]], flag: str
) -> str:
    """The refusal of spec.data.train's file `path` (rows at `lines`) for the prompts slime's
    tokenizer cannot count (`PromptVerdict.not_text`) under extraArgs' `flag`."""
    return (
        f"spec.data.train: {path} has prompts that are not text at lines "
        f"{listed_rows(lines, not_text)}, and spec.runtime.extraArgs: {flag} is set: "
        f"{NOT_TEXT_WHY}; {NOT_TEXT_FIX}"
    )
