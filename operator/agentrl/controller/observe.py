"""Pure readings of what the experiment's pods show: which are stuck, and why.

A RayJob sits in Initializing for ever when an image cannot be pulled or no node has the GPUs
(https://github.com/ray-project/kuberay/issues/1990, /issues/2387); the pods say why, so we
read their waiting and scheduling reasons. Training progress is read elsewhere (progress.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Container waiting reasons that do not clear by waiting (or only after a user fixes something).
STUCK_WAITING_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff", "InvalidImageName",
     "CreateContainerConfigError", "CreateContainerError"}
)  # fmt: skip
MESSAGE_MAX = 300  # keep status and events short; the pod has the full text


def pod_stuck(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) if the pod cannot make progress without help, else None."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or ():
        if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"):  # fmt: skip
            return "Unschedulable", _short(cond.get("message", ""))
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or ():
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason in STUCK_WAITING_REASONS:
                where = f"container {cs.get('name', '?')}"
                text = waiting.get("message", "")
                return reason, _short(f"{where}: {text}" if text else where)
    return None


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."
