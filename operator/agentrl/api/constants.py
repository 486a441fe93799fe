"""Names other parts of the system depend on: the CRD, labels, ports, mount paths.

They live in one stdlib-only module so the operator, the renderer and the in-pod bundle
agree on them without importing each other.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

GROUP: Final = "agentrl.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "RLExperiment"
PLURAL: Final = "rlexperiments"
SINGULAR: Final = "rlexperiment"
SHORT_NAMES: Final = ("rlx", "rlexp")
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# Labels on every child object.
LABEL_EXPERIMENT: Final = "agentrl.io/experiment"
LABEL_COMPONENT: Final = "agentrl.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "agentrl"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
# Kueue admits a RayJob by this label (all-or-nothing through `suspend`).
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"

# Annotations the operator writes; kopf's own bookkeeping lives under the same prefix.
ANNOTATION_PREFIX: Final = "agentrl.io"
ANNOTATION_SPEC_HASH: Final = "agentrl.io/spec-hash"
ANNOTATION_BUNDLE_VERSION: Final = "agentrl.io/bundle-version"

# Ray logical resource that marks the head pod, so agentrl's hub actor (metrics
# registry, gateway) is scheduled there and nowhere else.
HEAD_RAY_RESOURCE: Final = "agentrl_head"
# Ray logical resource that every GPU worker pod advertises and the RayJob's entrypoint
# asks for, so slime's driver (which needs a CUDA device) runs on a GPU worker.
DRIVER_RAY_RESOURCE: Final = "agentrl_driver"
# Keeps Ray from hiding a zero-GPU process's GPUs (older releases blank CUDA_VISIBLE_DEVICES
# for it): the RayJob's runtime env sets it for slime's driver (render/rayjob.py says why),
# and the gang preflight for its ranks.
RAY_NOSET_CUDA_VISIBLE_DEVICES: Final = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"

# spec.startupDeadlineSeconds when unset: an hour from the start of each attempt (or resume)
# until the run is Running and Ray has its job. Long enough for GPU nodes to be provisioned and
# a tens-of-GB image pulled; short enough that a gang stuck half-scheduled does not hold its
# GPUs through the night. Past it the experiment is Stalled (and alerts) and KubeRay fails
# the attempt (its preRunningDeadlineSeconds).
DEFAULT_STARTUP_DEADLINE_SECONDS: Final = 3600

# spec.runtime.preflight: the launcher's gang preflight (docs/launcher.md). Its default
# budget covers NCCL's communicator set-up for the whole gang and one round of node pairs per
# node, on a few dozen nodes; the bounds keep a typo from holding the gang for hours.
PREFLIGHT_TIMEOUT_SECONDS: Final = 300
PREFLIGHT_TIMEOUT_MIN_SECONDS: Final = 10
PREFLIGHT_TIMEOUT_MAX_SECONDS: Final = 3600
# Above any interconnect's all-reduce bus bandwidth today (NVLink 5 is ~900 GB/s a GPU): a
# larger minBusBandwidthGBps could never be met.
PREFLIGHT_BUS_BANDWIDTH_MAX_GBPS: Final = 10000
# How long a launcher whose checks failed waits for the experiment's /metrics to be read
# once (the operator scrapes Running experiments every AGENTRL_SWEEP_INTERVAL, 30 s by
# default) before it exits, so the Preflight condition shows the problem.
PREFLIGHT_REPORT_WAIT_SECONDS: Final = 90
# The pod and Kubernetes node a GPU worker runs on, from the downward API: the gang
# preflight names them in every problem.
ENV_POD_NAME: Final = "AGENTRL_POD_NAME"
ENV_NODE_NAME: Final = "AGENTRL_NODE_NAME"
METRIC_PREFLIGHT_INFO: Final = "agentrl_preflight_info"

# Ports on the head pod.
GATEWAY_PORT_DEFAULT: Final = 9090
METRICS_PORT: Final = 9400
RAY_DASHBOARD_PORT: Final = 8265
# Ray's own ports on the head, by the container port names agentrl gives them.
RAY_PORTS: Final = (("gcs-server", 6379), ("dashboard", RAY_DASHBOARD_PORT), ("client", 10001),
                    ("metrics", 8080))  # fmt: skip

# Metric names and split labels the bundle exports and the operator's progress scrape reads
# (docs/monitoring.md lists every family).
METRIC_ROLLOUT_STEP: Final = "agentrl_rollout_step"
METRIC_BATCH_REWARD_MEAN: Final = "agentrl_batch_reward_mean"
METRIC_EPISODES_TOTAL: Final = "agentrl_episodes_total"
METRIC_FAILED_SESSIONS_TOTAL: Final = "agentrl_failed_sessions_total"
METRIC_WANDB_RUN_INFO: Final = "agentrl_wandb_run_info"
# The EpisodesFailing condition: True once at least this share of the training episodes
# finished between two of the operator's reads failed. Half, because a failed episode gives
# no training signal (`failedEpisodes: exclude` leaves it out of its group, `zeroReward`
# trains it towards a 0 nobody judged): from there on most of the GPU time trains nothing,
# which a broken or unreachable agent service (every episode failing) is the common case of.
# The Prometheus alert (chart value monitoring.prometheusRule.failedSessionRatio) warns
# earlier; this is what `kubectl describe rlx` shows without Prometheus.
EPISODES_FAILING_RATIO: Final = 0.5
# ... judged over at least this many finished training episodes: a read with fewer leaves
# the judgement to a later read (the count runs on from the same start), so 1 failure of 1
# does not flip the condition and a slow agent is still judged.
EPISODES_FAILING_MIN_EPISODES: Final = 20
# agentrl_failed_sessions_total{reason}: why an episode failed, the log line's `reason=` too
# (bundle/failures.py gives each its category and meaning, and the rollout raises only these).
# The operator names only these in EpisodesFailing and its events, and counts any other
# label value as FAILURE_REASON_OTHER: a label is whatever the run's /metrics says, and the
# condition's reason also labels agentrl_experiment_condition, so unknown text reaches no
# status field, event or series.
FAILURE_TIMEOUT: Final = "timeout"
FAILURE_AGENT_ERROR: Final = "agent_error"
FAILURE_THROTTLED: Final = "throttled"
FAILURE_BAD_RESULT: Final = "bad_result"
FAILURE_RESULT_UNREADABLE: Final = "result_unreadable"
FAILURE_GATEWAY_ERROR: Final = "gateway_error"
FAILURE_NO_TURNS: Final = "no_turns"
FAILURE_EMPTY_MERGE: Final = "empty_merge"
FAILURE_INTERNAL: Final = "internal_error"
FAILURE_CANCELLED: Final = "cancelled"
FAILURE_REASONS: Final = (
    FAILURE_TIMEOUT,
    FAILURE_AGENT_ERROR,
    FAILURE_THROTTLED,
    FAILURE_BAD_RESULT,
    FAILURE_RESULT_UNREADABLE,
    FAILURE_GATEWAY_ERROR,
    FAILURE_NO_TURNS,
    FAILURE_EMPTY_MERGE,
    FAILURE_INTERNAL,
    FAILURE_CANCELLED,
)
FAILURE_REASON_OTHER: Final = "other"
SPLIT_TRAIN: Final = "train"
SPLIT_EVAL: Final = "eval"
# agentrl_episodes_total{outcome}: how an episode that ran to its end ended.
OUTCOME_SUCCEEDED: Final = "succeeded"
OUTCOME_FAILED: Final = "failed"
# agentrl_groups_total{outcome} and agentrl_discarded_episode_seconds_total{reason}: what a
# train step does with its prompt groups, and why episode time trained nothing (the rollout's
# record_step and Recorder name them; docs/rollout.md).
GROUP_OUTCOMES: Final = ("kept", "filtered", "backfilled", "skipped", "aborted", "carried_over")
DISCARD_REASONS: Final = ("cut", "aborted", "filtered", "masked", "failed")
# agentrl_aborted_episodes_total{reason}: why the rollout stopped a running episode.
ABORT_REASONS: Final = ("batch_full",)
# agentrl_trace_breaks_total{reason}: why a turn started a new training sequence (the trace
# merge's reasons, `bundle.traces`) or why the gateway rendered a prompt in full where it
# should have extended its conversation (`bundle.gateway.prompt`, which says what each means).
BREAK_IDENTICAL_PROMPT: Final = "identical_prompt"
BREAK_REWOUND: Final = "rewound"
BREAK_EDITED_COMPLETION: Final = "edited_completion"
BREAK_DIVERGED_PREFIX: Final = "diverged_prefix"
MERGE_BREAK_REASONS: Final = (
    BREAK_IDENTICAL_PROMPT,
    BREAK_REWOUND,
    BREAK_EDITED_COMPLETION,
    BREAK_DIVERGED_PREFIX,
)
BREAK_AMBIGUOUS_FORK: Final = "ambiguous_fork"
BREAK_HISTORY_REWRITE: Final = "history_rewrite"
BREAK_TOOLS_CHANGED: Final = "tools_changed"
BREAK_RETOKENIZE_DRIFT: Final = "retokenize_drift"
BREAK_BRIDGE_REFUSED: Final = "bridge_refused"
BREAK_BRIDGE_MISMATCH: Final = "bridge_mismatch"
PROMPT_BREAK_REASONS: Final = (
    BREAK_AMBIGUOUS_FORK,
    BREAK_HISTORY_REWRITE,
    BREAK_TOOLS_CHANGED,
    BREAK_RETOKENIZE_DRIFT,
    BREAK_BRIDGE_REFUSED,
    BREAK_BRIDGE_MISMATCH,
)
TRACE_BREAK_REASONS: Final = MERGE_BREAK_REASONS + PROMPT_BREAK_REASONS
# agentrl_gateway_requests_total{api,code} and agentrl_gateway_request_seconds{api}: the agent
# APIs the gateway serves, and every HTTP status its request path answers them with (the
# frontend's refusals, the engine's errors as 400/502/503/504, 499 for a client that left
# and 500 for an unexpected error; docs/gateway.md). Any other status is counted as
# GATEWAY_CODE_OTHER, so the label stays bounded and every series can exist at 0 from the
# start (a series born at its first request never shows that request in rate()).
GATEWAY_APIS: Final = ("openai", "anthropic")
GATEWAY_CODES: Final = (200, 400, 401, 404, 408, 410, 413, 429, 499, 500, 502, 503, 504)
GATEWAY_CODE_OTHER: Final = "other"
GATEWAY_PORT_NAME: Final = "gateway"
METRICS_PORT_NAME: Final = "agentrl-metrics"
# HTTP agents post an episode's result to `<gateway URL>/agentrl/callback/<session id>`, on
# the gateway's Service port, which relays it to the rollout's listener (docs/agents.md).
CALLBACK_PATH: Final = "/agentrl/callback"
CALLBACK_MAX_BYTES: Final = 16 * 1024 * 1024  # one result document
# The gateway refused a result document over CALLBACK_MAX_BYTES: it tells the rollout with
# this header (and the agent's own token) on an empty callback, so the episode fails at once
# as a bad result instead of waiting out its timeout.
CALLBACK_REFUSED_HEADER: Final = "X-Agentrl-Result-Refused"
# agentrl_gateway_callbacks_total{outcome}: what became of each result callback the gateway
# received (docs/gateway.md). `delivered`: the rollout's listener took it (2xx); `refused`:
# the listener answered 4xx (another token, not JSON, the episode no longer waiting); the
# rest never reached a listener that could take it: `unknown_session` (no open gateway
# session: a late result, or a wrong id), `too_large` (over CALLBACK_MAX_BYTES),
# `no_listener` (no rollout registered yet), `unreachable` (no answer from the listener),
# `listener_error` (the listener answered 5xx), `stopping` (the gateway's stop had closed
# its session: no episode can take a result any more). Each exists at 0 from the start.
CALLBACK_DELIVERED: Final = "delivered"
CALLBACK_REFUSED: Final = "refused"
CALLBACK_UNKNOWN_SESSION: Final = "unknown_session"
CALLBACK_TOO_LARGE: Final = "too_large"
CALLBACK_NO_LISTENER: Final = "no_listener"
CALLBACK_UNREACHABLE: Final = "unreachable"
CALLBACK_LISTENER_ERROR: Final = "listener_error"
CALLBACK_STOPPING: Final = "stopping"
CALLBACK_OUTCOMES: Final = (
    CALLBACK_DELIVERED,
    CALLBACK_REFUSED,
    CALLBACK_UNKNOWN_SESSION,
    CALLBACK_TOO_LARGE,
    CALLBACK_NO_LISTENER,
    CALLBACK_UNREACHABLE,
    CALLBACK_LISTENER_ERROR,
    CALLBACK_STOPPING,
)

# Where things are mounted inside every Ray container.
CONFIG_MOUNT_DIR: Final = "/etc/agentrl"
CONFIG_FILE_NAME: Final = "config.json"
CONFIG_PATH: Final = f"{CONFIG_MOUNT_DIR}/{CONFIG_FILE_NAME}"
BUNDLE_MOUNT_DIR: Final = "/opt/agentrl/code"
# The bundle is one zip archive (Python imports pure-Python packages from it): the first
# entry of PYTHONPATH in every Ray container.
BUNDLE_ARCHIVE_NAME: Final = "agentrl-bundle.zip"
BUNDLE_ARCHIVE_PATH: Final = f"{BUNDLE_MOUNT_DIR}/{BUNDLE_ARCHIVE_NAME}"
EXTRA_CODE_MOUNT_ROOT: Final = "/opt/agentrl/extra"
SHM_MOUNT_DIR: Final = "/dev/shm"
# Volumes agentrl adds to every Ray pod. A user volume may not take these names, nor any name
# starting with the reserved prefix (agentrl adds one volume per extraCode entry).
SHM_VOLUME: Final = "dshm"
CONFIG_VOLUME: Final = "agentrl-config"
BUNDLE_VOLUME: Final = "agentrl-bundle"
EXTRA_CODE_VOLUME_PREFIX: Final = "agentrl-extra-"
RESERVED_VOLUME_PREFIX: Final = "agentrl-"
# The environment variable through which the launcher finds the runtime config.
ENV_CONFIG_PATH: Final = "AGENTRL_CONFIG"

# KubeRay derives RayCluster and Service names from the RayJob name and caps it here.
RAYJOB_NAME_MAX: Final = 47
# ConfigMaps hold at most 1 MiB of data (core/v1 validation, MaxSecretSize).
CONFIGMAP_MAX_BYTES: Final = 1024 * 1024
# The annotations of one object hold at most 256 KiB, keys and values together
# (apimachinery's TotalAnnotationSizeLimitB).
ANNOTATIONS_MAX_BYTES: Final = 256 * 1024

DEFAULT_GPU_RESOURCE: Final = "nvidia.com/gpu"

# The launcher keeps each launch's output on the checkpoint volume, where `agentrl logs`
# points: <spec.checkpoint.path>/logs/<experiment>-attempt-<N>-<UTC time>.log
LAUNCH_LOG_DIR: Final = "logs"
LAUNCH_LOG_NAME: Final = "{experiment}-attempt-{attempt}-{time}.log"
LAUNCH_LOG_TIME: Final = "%Y%m%dT%H%M%SZ"  # strftime; sorts like the times it names
# What stands in for a secret value in logs, failure messages and the dry run's env.
REDACTED: Final = "<redacted>"

# Where the slime runtime image keeps things: the CUDA toolkit (spec.runtime.cudaHome's
# default) and the Megatron-LM checkout, which is not pip-installed there, so the pods'
# PYTHONPATH carries it (render) and the launcher hands it to slime's actors.
IMAGE_CUDA_HOME: Final = "/usr/local/cuda"
IMAGE_MEGATRON_DIR: Final = "/root/Megatron-LM"


class Phase(StrEnum):
    """What `kubectl get rlx` shows; Succeeded and Failed are sticky."""

    PENDING = "Pending"
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def is_terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class ConditionType(StrEnum):
    VALID = "Valid"
    RAYJOB_CREATED = "RayJobCreated"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STALLED = "Stalled"
    NAME_CONFLICT = "NameConflict"
    CHECKPOINT_CONFLICT = "CheckpointConflict"
    IMMUTABLE_FIELD_CHANGED = "ImmutableFieldChanged"
    CONFIG_WARNING = "ConfigWarning"
    CHILD_REJECTED = "ChildRejected"
    KUBERAY_INCOMPATIBLE = "KubeRayIncompatible"
    PREFLIGHT = "Preflight"
    EPISODES_FAILING = "EpisodesFailing"


# Kubernetes' documented scalability limit: clusters of at most 5,000 nodes
# (https://kubernetes.io/docs/setup/best-practices/cluster-large/); a spec asking for more
# GPU nodes than any cluster has renders a RayJob that never starts.
MAX_GPU_NODES: Final = 5000

# `agentrl rehearse`'s exit status (the CLI prints it, the bundle's report decides it), in
# `validate`'s convention: 0 all good, 1 something the report names failed, 2 it could not run.
REHEARSE_OK: Final = 0
REHEARSE_FAILED: Final = 1
REHEARSE_USAGE: Final = 2

# Keys slime's eval logging writes beside each eval set's `eval/<name>` in one flat dict:
# `eval/<name>-truncated_ratio`, and `eval/step` (the W&B step key) last, the same at both
# supported rows; an eval set named after one has its figure overwritten (rules.eval_sets).
# https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/observability/rollout_metrics.py#L223-L253
SLIME_EVAL_STEP_NAME: Final = "step"
SLIME_EVAL_TRUNCATED_SUFFIX: Final = "-truncated_ratio"
