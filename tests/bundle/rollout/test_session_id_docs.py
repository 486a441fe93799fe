"""The session id an agent receives is described as it is made.

Agents (and whoever reads the AgentCore or S3 side) see the id as `_rollout.session_id`,
the runtime session id and a segment of the result key; the docs said 43 URL-safe
characters (`secrets.token_urlsafe(32)`), which the rollout no longer makes.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentrl.bundle.rollout.episode import new_session_id

REPO = Path(__file__).resolve().parents[3]


def test_the_docs_describe_the_session_id_the_rollout_makes() -> None:
    sid = new_session_id()
    assert re.fullmatch(r"[0-9a-f]{48}", sid)
    described = f"{len(sid)} lowercase hex characters"
    for page in ("docs/agents.md", "docs/rollout.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        assert described in text, page
        assert "token_urlsafe(32)" not in text and "43 URL-safe" not in text, page
