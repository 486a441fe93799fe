"""Every Prometheus metric the bundle exports, defined once.

Names are fixed (docs/monitoring.md lists them): the Grafana dashboard, the alert rules
and the operator's progress scrape (`kubectl get rlx`) read them. Each process builds its
own `BundleMetrics` on its own registry, so tests and several gateways in one process
never collide.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentrl.api.constants import (
    ABORT_REASONS,
    CALLBACK_OUTCOMES,
    DISCARD_REASONS,
    GATEWAY_APIS,
    GATEWAY_CODE_OTHER,
    GATEWAY_CODES,
    GROUP_OUTCOMES,
    METRIC_BATCH_REWARD_MEAN,
    METRIC_EPISODES_TOTAL,
    METRIC_FAILED_SESSIONS_TOTAL,
    METRIC_PREFLIGHT_INFO,
    METRIC_ROLLOUT_STEP,
    OUTCOME_FAILED,
    OUTCOME_SUCCEEDED,
    SPLIT_EVAL,
    SPLIT_TRAIN,
    TRACE_BREAK_REASONS,
)
from agentrl.bundle.failures import REASONS

PREFIX = "agentrl_"

# Rewards are usually in [0, 1] but agents may return any float.
REWARD_BUCKETS = (-1.0, -0.5, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0)
# Gateway request latency: from a few ms (short completions) to minutes (long reasoning).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Agent episodes and rollout steps: seconds (a tool call) to hours (a long coding task).
EPISODE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
STEP_BUCKETS = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800)
# Weight updates between sampling an episode and training it (carried-over episodes are older).
POLICY_LAG_BUCKETS = (0, 1, 2, 3, 4, 8)
# Powers of two up to 64k tokens: response lengths span short answers to long agent traces.
RESPONSE_TOKEN_BUCKETS = tuple(2**i for i in range(4, 17))


class _RolloutStepGauge(Gauge):
    """`agentrl_rollout_step`, which also times the run's pace: the wall time from one train
    rollout's end to the next, spread over the steps it moved, goes into `paced`. The rollout
    ships its metrics when the rollout call returns, so the moment the gauge is set is the
    moment the step's generation ended; the time to the next one holds everything slime does
    per step (Megatron's train step, the weight update, checkpoint saves, eval passes), which
    `agentrl_rollout_step_seconds` (the rollout call alone) leaves out."""

    def __init__(
        self,
        name: str,
        documentation: str,
        *,
        registry: CollectorRegistry,
        paced: Histogram,
        clock: Callable[[], float],
    ) -> None:
        self._paced, self._clock = paced, clock
        self._last: tuple[float, float] | None = None  # (step, when it was set)
        super().__init__(name, documentation, registry=registry)

    def set(self, value: float) -> None:
        super().set(value)
        now = self._clock()
        if math.isnan(value):
            self._last = None
            return
        if self._last is not None:
            step, at = self._last
            if value == step:
                return  # the same step again: the clock runs from its first report
            if value > step:
                # The first move after the hub starts has no earlier end to time from (it
                # would hold the model load or the resume), so only later moves count.
                moved = int(value - step)
                for _ in range(moved):
                    self._paced.observe((now - at) / moved)
        self._last = (value, now)


class BundleMetrics:
    """The bundle's metric families on one registry. `clock` (monotonic seconds) times the
    run's pace, `agentrl_rollout_step_interval_seconds`."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.preflight = Gauge(
            METRIC_PREFLIGHT_INFO,
            "The launcher's gang preflight: 1 with its result (passed or failed), the check "
            "that failed first (Passed when none) and the one-line message.",
            ["result", "reason", "message"],
            registry=r,
        )
        self.rollout_step_interval_seconds = Histogram(
            PREFIX + "rollout_step_interval_seconds",
            "Wall time from one train rollout's end to the next, per step: the run's pace "
            "(generation, training, weight update, checkpoints, eval passes).",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.rollout_step = _RolloutStepGauge(
            METRIC_ROLLOUT_STEP,
            "Id of the last train rollout finished (counted from 0); NaN before the first.",
            registry=r,
            paced=self.rollout_step_interval_seconds,
            clock=clock,
        )
        # NaN, not prometheus_client's 0, until rollout 0 finishes: that sets 0, and a change
        # AgentRLProgressStalled must see (changes() counts NaN -> 0, not 0 -> 0); the
        # operator's progress skips NaN instead of showing rollout 1 done before any is.
        self.rollout_step.set(math.nan)
        self.batch_reward_mean = Gauge(
            METRIC_BATCH_REWARD_MEAN,
            "Mean raw episode reward of the last batch.",
            ["split"],
            registry=r,
        )
        self.episode_reward = Histogram(
            PREFIX + "episode_reward",
            "Raw reward per episode that ended in a reported reward (a task outcome).",
            ["split"],
            buckets=REWARD_BUCKETS,
            registry=r,
        )
        self.episodes = Counter(
            METRIC_EPISODES_TOTAL,  # prometheus_client keeps one `_total` suffix
            "Episodes finished, by outcome (succeeded or failed).",
            ["split", "outcome"],
            registry=r,
        )
        self.failed_sessions = Counter(
            METRIC_FAILED_SESSIONS_TOTAL,
            "Episodes that failed, by reason (timeout, agent_error, no_turns, ...).",
            ["split", "reason"],
            registry=r,
        )
        self.sessions_in_flight = Gauge(
            PREFIX + "sessions_in_flight", "Live episodes.", ["split"], registry=r
        )
        self.connection_pool_size = Gauge(
            PREFIX + "connection_pool_size",
            "Configured size of the agent backend's connection pool.",
            registry=r,
        )
        self.connection_pool_in_use = Gauge(
            PREFIX + "connection_pool_in_use",
            "Connections of the agent backend's pool checked out right now.",
            registry=r,
        )
        self.connection_pool_discarded = Counter(
            PREFIX + "connection_pool_discarded",
            'Connections dropped because the pool was full ("Connection pool is full").',
            registry=r,
        )
        self.gateway_requests = Counter(
            PREFIX + "gateway_requests",
            "Gateway requests by API (openai, anthropic) and HTTP status code.",
            ["api", "code"],
            registry=r,
        )
        self.gateway_request_seconds = Histogram(
            PREFIX + "gateway_request_seconds",
            "Gateway request latency, end to end.",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gateway_callbacks = Counter(
            PREFIX + "gateway_callbacks",
            "HTTP agents' result callbacks the gateway received, by outcome: delivered to the "
            "rollout's listener, refused by it, or not delivered (unknown_session, too_large, "
            "no_listener, unreachable, listener_error, stopping).",
            ["outcome"],
            registry=r,
        )
        self.generated_tokens = Counter(
            PREFIX + "generated_tokens",
            "Completion tokens sampled through the gateway.",
            registry=r,
        )
        self.context_full_turns = Counter(
            PREFIX + "context_full_turns",
            "Model calls answered with finish reason length without generating: the "
            "conversation already fills the model's context.",
            registry=r,
        )
        self.samples = Counter(
            PREFIX + "samples", "Training samples (sequences) handed to slime.", registry=r
        )
        self.trace_breaks = Counter(
            PREFIX + "trace_breaks",
            "Places where a turn could not extend its episode's sequence, by reason.",
            ["reason"],
            registry=r,
        )
        self.truncated_samples = Counter(
            PREFIX + "truncated_samples",
            "Samples whose response was clipped to maxResponseLength or stopped by length.",
            registry=r,
        )
        # Dynamic sampling and stragglers (train steps; docs/rollout.md).
        self.groups = Counter(
            PREFIX + "groups",
            "Prompt groups of train steps by outcome: kept, filtered (no reward variance or "
            "the user's filter), backfilled (filtered but trained to fill the batch), aborted "
            "and carried_over (cut when the batch was full, prompt returned to the data source).",
            ["outcome"],
            registry=r,
        )
        self.zero_variance_group_share = Gauge(
            PREFIX + "zero_variance_group_share",
            "Share of the last train step's finished groups whose episode rewards were all "
            "equal (no GRPO signal), whether or not they were filtered.",
            registry=r,
        )
        self.aborted_episodes = Counter(
            PREFIX + "aborted_episodes",
            "Episodes stopped by the rollout (agent stopped, engine requests aborted), by reason.",
            ["split", "reason"],
            registry=r,
        )
        self.discarded_episode_seconds = Counter(
            PREFIX + "discarded_episode_seconds",
            "Train episode time that trained nothing: cut (episodes stopped while running), "
            "aborted (finished episodes of groups the abort policy handed back, and finished "
            "episodes thrown away otherwise: kept too long for a cut group or when the run's "
            "last step ended, in a step that failed, or a failed one carried over in an older "
            "rollout state), filtered (dropped groups, and backfills: in the batch with every "
            "loss mask 0), masked (episodes of trained groups every token of which is masked: "
            "carried-over ones under offPolicyTokens: mask, or every completion aborted by "
            "the engine, of other weights or without usable logprobs) or failed (failed "
            "episodes of trained groups: one stand-in slot, its loss mask 0).",
            ["reason"],
            registry=r,
        )
        self.episode_seconds = Histogram(
            PREFIX + "episode_seconds",
            "Duration of finished episodes (from getting a slot to the result).",
            ["split"],
            buckets=EPISODE_BUCKETS,
            registry=r,
        )
        self.rollout_step_seconds = Histogram(
            PREFIX + "rollout_step_seconds",
            "Wall time of one rollout call (a train step or an eval pass).",
            ["split"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        # One observation per rollout call: a split's series created by its first call would
        # start at count 1, and rate() never sees that first train step or eval pass.
        for split in (SPLIT_TRAIN, SPLIT_EVAL):
            self.rollout_step_seconds.labels(split)
        self.rollout_total_steps = Gauge(
            PREFIX + "rollout_total_steps",
            "Rollout steps the run is asked for (spec.grpo.numRollouts): progress and ETA.",
            registry=r,
        )
        self.response_tokens = Histogram(
            PREFIX + "response_tokens",
            "Response length of each training sample, in tokens (what the loss sees).",
            buckets=RESPONSE_TOKEN_BUCKETS,
            registry=r,
        )
        self.eval_reward_mean = Gauge(
            PREFIX + "eval_reward_mean",
            "Mean raw episode reward of the last pass over one eval set, by its name.",
            ["eval_set"],
            registry=r,
        )
        self.eval_step = Gauge(
            PREFIX + "eval_step",
            "Rollout step of the last pass over one eval set (moves at each eval).",
            ["eval_set"],
            registry=r,
        )
        self.checkpoint_iteration = Gauge(
            PREFIX + "checkpoint_iteration",
            "Iteration Megatron's tracker file under spec.checkpoint.path names (the last "
            "checkpoint slime saved), read at each scrape; NaN before the first save.",
            registry=r,
        )
        # NaN, not 0, until a tracker is read: slime saves at rollout 0 as iteration 0 (with
        # saveInterval 1, or at the end of a one-rollout epoch), and the dashboard's
        # checkpoint annotation sees a save through changes(), which counts NaN -> 0 but
        # not 0 -> 0.
        self.checkpoint_iteration.set(math.nan)
        self.wandb_run_info = Gauge(
            PREFIX + "wandb_run_info",
            "1 for the W&B run this training logs to (needs spec.tracking.wandb.team); `group`"
            " is its W&B group and name (<namespace>/<name> unless the spec names a group).",
            ["url", "group"],
            registry=r,
        )
        self.excluded_episodes = Counter(
            PREFIX + "excluded_episodes",
            "Train episodes of trained groups left out of their group's mean and std and given "
            "no gradient (infrastructure failures, spec.grpo.failedEpisodes: exclude), by "
            "failure reason.",
            ["reason"],
            registry=r,
        )
        self.excluded_episode_share = Gauge(
            PREFIX + "excluded_episode_share",
            "Last train step: share of its trained groups' episodes excluded from the "
            "advantage (infrastructure failures).",
            registry=r,
        )
        self.policy_lag = Histogram(
            PREFIX + "policy_lag_steps",
            "Age of each trained episode in weight updates: 0 = sampled by the policy being "
            "trained; carried-over episodes are older.",
            buckets=POLICY_LAG_BUCKETS,
            registry=r,
        )
        self.stale_tokens = Counter(
            PREFIX + "stale_tokens",
            "Tokens of trained episodes sampled by an older policy, by what was done with them "
            "(masked or trained, spec.grpo.offPolicyTokens).",
            ["action"],
            registry=r,
        )
        self.stale_episodes_restarted = Counter(
            PREFIX + "stale_episodes_restarted",
            "Carried-over episodes older than spec.grpo.maxPolicyLag, run again from the prompt.",
            registry=r,
        )
        self.episode_length_bias = Gauge(
            PREFIX + "episode_length_bias",
            "Last train step: mean duration of trained episodes over the mean of every episode "
            "it ran (cut ones at their elapsed time), minus 1; negative = short episodes "
            "favoured. NaN before the first train step and after a step none of whose "
            "episodes trains a token.",
            registry=r,
        )
        # NaN, not prometheus_client's 0, which would read as a step measured without bias.
        self.episode_length_bias.set(math.nan)
        # Every label set an episode's end can count exists at 0 from the head's start: a
        # series created by its first increment starts at that count, which rate() and
        # increase() never see, so a burst of failures flushed at once (an engine dying with
        # every episode it served) never reached the dashboard or the failed-session alert.
        for split in (SPLIT_TRAIN, SPLIT_EVAL):
            for outcome in (OUTCOME_SUCCEEDED, OUTCOME_FAILED):
                self.episodes.labels(split, outcome)
            for reason in REASONS:
                self.failed_sessions.labels(split, reason)
            self.episode_seconds.labels(split)
            self.episode_reward.labels(split)
            for reason in ABORT_REASONS:
                self.aborted_episodes.labels(split, reason)
        for reason in REASONS:  # train episodes left out of their group's statistics
            self.excluded_episodes.labels(reason)
        # A train step's groups and its discarded time: an outcome that first occurs at step 40
        # would otherwise show from its second occurrence on, and a one-off never.
        for outcome in GROUP_OUTCOMES:
            self.groups.labels(outcome)
        for reason in DISCARD_REASONS:
            self.discarded_episode_seconds.labels(reason)
        for reason in TRACE_BREAK_REASONS:  # a one-off break (one agent's rewrite) shows too
            self.trace_breaks.labels(reason)
        # Every API's requests by every status the gateway answers (a first 502 or 429 is
        # counted), and each API's latency (its first request is in the quantiles' rate()).
        for api in GATEWAY_APIS:
            for code in (*map(str, GATEWAY_CODES), GATEWAY_CODE_OTHER):
                self.gateway_requests.labels(api, code)
            self.gateway_request_seconds.labels(api)
        # Every outcome of a result callback: the first one lost (an unreachable listener)
        # moves rate() and the dashboard's callback panel.
        for outcome in CALLBACK_OUTCOMES:
            self.gateway_callbacks.labels(outcome)


def gateway_code(status: int) -> str:
    """The `code` label of a gateway answer: its status if the gateway answers with it
    (`GATEWAY_CODES`), else `other`, so no status adds a series nobody created at 0."""
    return str(status) if status in GATEWAY_CODES else GATEWAY_CODE_OTHER
