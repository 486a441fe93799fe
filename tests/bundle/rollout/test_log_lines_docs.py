"""docs/rollout.md shows the rollout's two per-step log lines as the code prints them.

The groups line had gained `skipped=`, `excluded_episodes=` and `stale_restarted=` while the
docs still showed the older line; each documented line is rebuilt here from its own numbers
and must come out the same.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

from agentrl.bundle.rollout.batch import BatchStats
from agentrl.bundle.rollout.sampling import StepReport

ROLLOUT_MD = Path(__file__).resolve().parents[3] / "docs" / "rollout.md"


def _documented(kind: str) -> tuple[str, int, dict[str, str], dict[str, int]]:
    """The docs' `Rollout N <kind>: ...` line, its step, its key=value pairs and the
    parenthesised drop reasons."""
    lines = re.findall(rf"^\s*(Rollout (\d+) {kind}: .*?)\s*$", ROLLOUT_MD.read_text(), re.M)
    assert len(lines) == 1, f"docs/rollout.md shows {len(lines)} '{kind}' lines"
    line, step = lines[0]
    reasons = re.search(r"\(([^)]*)\)", line)
    counts = dict(re.findall(r"(\S+)=(\d+)", reasons.group(1))) if reasons else {}
    fields = dict(re.findall(r"(\w+)=([\d.]+)", re.sub(r"\([^)]*\)", "", line)))
    return line, int(step), fields, {k: int(v) for k, v in counts.items()}


def test_the_documented_groups_line_is_the_one_the_rollout_prints() -> None:
    line, step, f, reasons = _documented("groups")
    share = round(float(f["zero_variance_share"]) * 100)
    report = StepReport(
        kept=int(f["kept"]), filtered=int(f["filtered"]), backfilled=int(f["backfilled"]),
        skipped=int(f["skipped"]), aborted=int(f["aborted"]),
        carried_over=int(f["carried_over"]), unstarted=int(f["returned_unstarted"]),
        episodes_cut=int(f["episodes_cut"]), episodes_reused=int(f["episodes_reused"]),
        drop_reasons=Counter(reasons), zero_variance=share, finished=100,
        excluded=Counter({"timeout": int(f["excluded_episodes"])}),
        stale_restarted=int(f["stale_restarted"]),
    )  # fmt: skip
    assert report.summary(step) == line


def test_the_documented_batch_line_is_the_one_the_rollout_prints() -> None:
    line, step, _, _ = _documented("batch")
    f = dict(re.findall(r"(\w+)=(\d+)", line))  # "(succeeded=N failed=N)" are counts too
    stats = BatchStats(episodes=int(f["episodes"]), succeeded=int(f["succeeded"]),
                       failed=int(f["failed"]), sequences=int(f["sequences"]),
                       reward_mean=math.nan)  # fmt: skip
    assert stats.summary("Rollout", step) == line
