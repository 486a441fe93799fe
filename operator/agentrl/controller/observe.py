"""Pure readings of what the cluster and the trainer show: stuck pods and training progress.

A RayJob sits in Initializing for ever when an image cannot be pulled or no node has the GPUs
(kuberay #1990, #2387); the pods say why, so we read their waiting and scheduling reasons.
Progress comes from the experiment's own Prometheus endpoint (DESIGN §5 metric names), parsed
here from the text format so the scraping side stays a plain GET.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Container waiting reasons that do not clear by waiting (or only after a user fixes something).
STUCK_WAITING_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff", "InvalidImageName",
     "CreateContainerConfigError", "CreateContainerError"}
)  # fmt: skip
MESSAGE_MAX = 300  # keep status and events short; the pod has the full text

TRAIN_SPLIT = "train"


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


def parse_progress(text: str) -> dict[str, float]:
    """Raw sums from a scrape: rollout, train/eval reward, episodes and failures (train)."""
    out: dict[str, float] = {}
    eval_rewards: list[float] = []
    episodes = failed = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if math.isnan(value):  # NaN: the gauge was never set
                continue
            split = labels.get("split")
            if name == "agentrl_rollout_step":
                out["rollout"] = value
            elif name == "agentrl_batch_reward_mean":
                if split == TRAIN_SPLIT:
                    out["trainReward"] = value
                else:
                    eval_rewards.append(value)
            elif name == "agentrl_episodes_total" and split == TRAIN_SPLIT:
                episodes += value
            elif name == "agentrl_failed_sessions_total" and split == TRAIN_SPLIT:
                failed += value
    if eval_rewards:
        out["evalReward"] = sum(eval_rewards) / len(eval_rewards)
    if episodes:
        out["episodes"], out["failed"] = episodes, failed
    return out


def progress_fields(
    raw: Mapping[str, float], previous: Mapping[str, float] | None, total_rollouts: int | None
) -> dict[str, Any]:
    """status.progress values from a scrape and the one before it.

    The failed-session ratio is over the episodes finished since the previous scrape (about
    the last rollout), or over the whole run when there is no usable previous scrape.
    """
    fields: dict[str, Any] = {}
    if "rollout" in raw:
        fields["rollout"] = int(raw["rollout"])
    if total_rollouts is not None:
        fields["totalRollouts"] = total_rollouts
    for key in ("trainReward", "evalReward"):
        if key in raw:
            fields[key] = round(raw[key], 6)
    episodes, failed = raw.get("episodes", 0.0), raw.get("failed", 0.0)
    if previous and episodes > previous.get("episodes", 0.0):
        episodes -= previous.get("episodes", 0.0)
        failed -= previous.get("failed", 0.0)
    if episodes > 0:
        fields["failedSessionRatio"] = round(max(0.0, failed) / episodes, 4)
    return fields
