"""Why an episode ended without a task outcome: every failure reason, and its class, in one home.

GRPO turns a group's rewards into advantages, so a reward that does not describe what the
policy did shifts every sibling's advantage. Two classes keep that apart:

- a **task outcome** is an agent that finished and reported a reward (0 included): the policy
  acted and was judged, so the episode counts in its group's mean and std;
- an **infrastructure failure** is every other end: the engine, the transport, a deadline,
  throttling, a crashed agent or a broken contract. The reward 0 a failed episode carries is
  a stand-in, not a judgement, so under `spec.grpo.failedEpisodes: exclude` (the default) it
  is left out of its group's statistics and gets no gradient.

Every reason the metrics (`agentrl_failed_sessions_total{reason}`,
`agentrl_excluded_episodes_total{reason}`) and the failure log lines use is defined here,
with its category; the class of an episode follows from whether it has one. A test checks
that every reason the code raises is in `REASONS` and that docs/rollout.md lists them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from agentrl.api import constants


class FailureClass(StrEnum):
    TASK_OUTCOME = "task_outcome"
    INFRASTRUCTURE = "infrastructure"


class Category(StrEnum):
    """What broke, for the infrastructure failures (the issue's six, plus our own bugs)."""

    ENGINE = "engine"
    TRANSPORT = "transport"
    TIMEOUT = "timeout"
    THROTTLING = "throttling"
    AGENT_CRASH = "agent_crash"
    CONTRACT = "contract_violation"
    INTERNAL = "internal"


@dataclass(frozen=True)
class Reason:
    label: str  # the metric label value and the log line's `reason=`
    category: Category
    meaning: str  # one line for docs/rollout.md


# The labels (rollout, agent backends and the batch use these names, nothing else); their
# home is agentrl.api.constants, where the operator reads them too.
TIMEOUT: Final = constants.FAILURE_TIMEOUT
AGENT_ERROR: Final = constants.FAILURE_AGENT_ERROR
THROTTLED: Final = constants.FAILURE_THROTTLED
BAD_RESULT: Final = constants.FAILURE_BAD_RESULT
RESULT_UNREADABLE: Final = constants.FAILURE_RESULT_UNREADABLE
GATEWAY_ERROR: Final = constants.FAILURE_GATEWAY_ERROR
NO_TURNS: Final = constants.FAILURE_NO_TURNS
EMPTY_MERGE: Final = constants.FAILURE_EMPTY_MERGE
INTERNAL: Final = constants.FAILURE_INTERNAL
CANCELLED: Final = constants.FAILURE_CANCELLED

REASONS: Final[Mapping[str, Reason]] = {
    r.label: r
    for r in (
        Reason(
            TIMEOUT,
            Category.TIMEOUT,
            "no result within the agent's timeoutSeconds (the episode deadline)",
        ),
        Reason(
            AGENT_ERROR,
            Category.AGENT_CRASH,
            "the agent crashed or reported a failure, refused the episode, or a request to it "
            "failed or timed out on the backend's own clock",
        ),
        Reason(
            THROTTLED,
            Category.THROTTLING,
            "the agent service refused every attempt to start the episode (throttled, a "
            "conflicting operation on the runtime session, or an account quota used up)",
        ),
        Reason(
            BAD_RESULT,
            Category.CONTRACT,
            "the result document holds no usable reward (missing, not a number, not finite)",
        ),
        Reason(
            RESULT_UNREADABLE,
            Category.TRANSPORT,
            "the result could not be read (S3 refused or failed)",
        ),
        Reason(
            GATEWAY_ERROR,
            Category.ENGINE,
            "the model gateway refused or lost the session",
        ),
        Reason(
            NO_TURNS,
            Category.CONTRACT,
            "the agent reported a reward without a completion from the model: it never called "
            "the model through its session, the engine aborted every call it made (each "
            "answered 503), or every prompt it sent filled the model's context (the message "
            "then says which, with the sizes)",
        ),
        Reason(
            EMPTY_MERGE,
            Category.ENGINE,
            "the agent's model calls sampled no token that could be trained",
        ),
        Reason(
            INTERNAL,
            Category.INTERNAL,
            "a bug in agentrl's rollout, or its agent backend ending an episode in a cancellation "
            "nobody asked for (logged with its traceback)",
        ),
        Reason(
            CANCELLED,
            Category.INTERNAL,
            "the whole batch was cancelled (slime interrupted the rollout)",
        ),
    )
}

# The sample metadata key that carries an infrastructure failure's reason to the reward
# post-process (which slime runs in another process, on the samples alone).
SAMPLE_KEY: Final = "episode_error"


def failure_class(reason: str | None) -> FailureClass:
    """A task outcome has no failure reason; every reason is an infrastructure failure,
    known or not (a reward nobody reported describes nothing the policy did)."""
    return FailureClass.TASK_OUTCOME if reason is None else FailureClass.INFRASTRUCTURE


def category(reason: str) -> Category:
    known = REASONS.get(reason)
    return known.category if known is not None else Category.INTERNAL


def sample_failure(sample: Any) -> str | None:
    """The infrastructure failure a sample stands in for, None for a task outcome's sample."""
    metadata = getattr(sample, "metadata", None)
    if not isinstance(metadata, Mapping):
        return None
    reason = metadata.get(SAMPLE_KEY)
    return str(reason) if reason else None
