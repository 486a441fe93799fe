"""docs/rollout.md says through which terms of slime's policy loss a group without signal
trains, and cites the lines of slime it relies on: each line is checked here, at each pinned
commit, to hold the code the docs quote.

A skipped group (too few task outcomes, no filter) and a zero-variance group kept without a
filter reach slime with their task outcomes' loss masks set and advantage 0 (what slime's
trainer makes of them: tests/bundle/rollout/test_train_data_upstream.py). Their time counts
as trained; the docs must say that it trains only through the KL and entropy terms (and a
shifted advantage under `--normalize-advantages` or `--use-opd`), and a reader must be able to
find the code that says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.support.shared import UPSTREAM, require
from tests.support.upstream import slime_rows

ROLLOUT_MD = Path(__file__).resolve().parents[3] / "docs" / "rollout.md"
HEADING = "**Groups without signal train only through the terms that ignore the advantage.**"
# What the paragraph states, by file: the code each claim rests on.
QUOTED = {
    "loss.py": (
        "returns = get_grpo_returns(rewards, kl)",  # GRPO: the sample's reward on every token
        "if args.normalize_advantages:",
        "distributed_masked_whiten(",  # over the tokens whose loss mask is set
        "advantages[i] = adv - args.opd_kl_coef * reverse_kl",  # --use-opd
        "loss = pg_loss - args.entropy_coef * entropy_loss",
        "kl_loss = sum_of_sample_mean(kl)",
        "loss = loss + args.kl_loss_coef * kl_loss",
        "/ step_global_batch_size",  # every sample of the step weighs in the scale
    ),
    "ppo_utils.py": (
        "pg_losses1 = -ratio * advantages",
        "pg_losses2 = -ratio.clamp(1 - eps_clip, 1 + eps_clip_high) * advantages",
        "returns.append(torch.ones_like(kl[i]) * rewards[i])",
    ),
}
FILES = {"loss.py": "backends/megatron_utils/loss.py", "ppo_utils.py": "utils/ppo_utils.py"}


def _paragraph() -> str:
    text = ROLLOUT_MD.read_text()
    assert HEADING in text, "docs/rollout.md no longer says what groups without signal train"
    return text[text.index(HEADING) :].split("\n\n", 1)[0]


def _cited(commit: str, name: str) -> list[range]:
    """The line ranges the paragraph's link to `name` at `commit` names in its text."""
    links = re.findall(rf"\[{commit} {re.escape(name)} ([L\d\- ]+)\]\(([^)]+)\)", _paragraph())
    assert len(links) == 1, f"one link to {name} at {commit}: {links}"
    label, url = links[0]
    assert f"/{FILES[name]}#" in url and "/blob/" in url and commit in url
    spans = []
    for part in label.split():
        first, _, last = part.partition("-")
        spans.append(range(int(first[1:]), int((last or first)[1:]) + 1))
    return spans


def test_the_paragraph_names_every_term_and_the_flags_that_switch_them() -> None:
    text = " ".join(_paragraph().split())
    for term in (
        "klLossCoef",
        "--entropy-coef",
        "--normalize-advantages",
        "--use-opd",
        "`identity`",
    ):
        assert term in text
    assert "counts as trained, not in `agentrl_discarded_episode_seconds_total`" in text


@pytest.mark.parametrize("commit", slime_rows())
@pytest.mark.parametrize("name", list(QUOTED))
def test_each_cited_line_holds_the_code_the_docs_rely_on(commit: str, name: str) -> None:
    source = require(UPSTREAM / "slime" / commit / "slime" / FILES[name], f"slime at {commit}")
    lines = source.read_text().splitlines()
    spans = _cited(commit, name)
    for code in QUOTED[name]:
        at = [n for n, line in enumerate(lines, 1) if code in line]
        assert at, f"{code!r} is no longer in slime's {name} at {commit}"
        assert any(n in span for n in at for span in spans), (
            f"{code!r} is at line(s) {at} of {name} at {commit}; the docs cite {spans}"
        )
