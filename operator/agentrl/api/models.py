"""The RLExperiment spec and status as pydantic models.

One set of models serves three readers: the operator (parsing the custom resource), the
renderer (turning it into KubeRay objects) and the in-pod bundle (reading the runtime
config the renderer writes). Field names are camelCase on the wire, snake_case in Python.
Defaults follow agentcore-rl-toolkit's SlimeRunner where it has one, so an experiment that
sets only what it must trains like the reference recipe. Structural rules (types, ranges,
unknown fields) live here; cross-field rules live in `agentrl.api.validation`.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from agentrl.api.base import (
    INT32_MAX,
    QUANTITY_PATTERN,
    KubeObject,
    Model,
    NonNegativeInt,
    PositiveInt,
    Quantity,
    SecretKeyRef,
)
from agentrl.api.constants import (
    DEFAULT_GPU_RESOURCE,
    DEFAULT_STARTUP_DEADLINE_SECONDS,
    GATEWAY_PORT_DEFAULT,
    IMAGE_CUDA_HOME,
    MAX_GPU_NODES,
    PREFLIGHT_BUS_BANDWIDTH_MAX_GBPS,
    PREFLIGHT_TIMEOUT_MAX_SECONDS,
    PREFLIGHT_TIMEOUT_MIN_SECONDS,
    PREFLIGHT_TIMEOUT_SECONDS,
)
from agentrl.api.formats import (
    ABSOLUTE_PATH,
    IMAGE_REF,
    PATH_MAX,
    QUEUE_NAME,
    TEXT_MAX,
    URL_MAX,
    WORD_MAX,
    AbsolutePath,
    ExtendedResource,
    HttpBaseUrl,
    HttpUrl,
    LabelValue,
    ObjectName,
    Text,
    Word,
)
from agentrl.api.renderer_families import AUTO, FAMILIES, RENDERERS_VERSION
from agentrl.api.status import Condition, Progress, RayJobMirror, RLExperimentStatus

# Every API model and field type, so users of the API need this one module.
__all__ = [
    "DYNAMIC_SAMPLING_FILTER_PATTERN",
    "QUANTITY_PATTERN",
    "ZERO_REWARD_VARIANCE",
    "AgentCoreAgent",
    "AgentSpec",
    "CheckpointSpec",
    "Condition",
    "DataSpec",
    "EnvVar",
    "EnvVarSource",
    "EvalSet",
    "ExtraCode",
    "GatewayServiceSpec",
    "GatewaySpec",
    "GrpoSpec",
    "HeadSpec",
    "HeaderFromSecret",
    "HttpAgent",
    "KubeObject",
    "Model",
    "ModelSpec",
    "NonNegativeInt",
    "ObjectMeta",
    "Parallelism",
    "PositiveInt",
    "Progress",
    "Quantity",
    "RLExperiment",
    "RLExperimentSpec",
    "RLExperimentStatus",
    "RayJobMirror",
    "ResourcesSpec",
    "RewardNormalization",
    "RuntimeSpec",
    "SchedulingSpec",
    "SecretKeyRef",
    "TrackingSpec",
    "WandbSpec",
]

# ---- field types of this module ------------------------------------------------------

# The files slime's Dataset reads (slime/utils/data.py `read_file`): local paths only, and the
# rollout and the launcher's preflight read them as JSON lines.
DATA_SUFFIX = ".jsonl"


def _data_path(value: str) -> str:
    if "://" in value:
        scheme = value.split("://", 1)[0]
        raise ValueError(
            f"{scheme}:// URIs are not read: slime and the rollout open local files in the pods. "
            "Copy the data onto a volume (e.g. a PVC in runtime.volumes, mounted by "
            "runtime.volumeMounts) and give its absolute path"
        )
    if not value.startswith("/"):
        raise ValueError(
            f"{value!r} is not an absolute path; give the file's absolute path inside the pods"
        )
    if len(value) > PATH_MAX:
        raise ValueError(f"longer than {PATH_MAX} characters")
    if not value.endswith(DATA_SUFFIX):
        raise ValueError(
            f"{value!r} is not a {DATA_SUFFIX} file (slime refuses other formats at start)"
        )
    return value


DataPath = Annotated[
    str,
    AfterValidator(_data_path),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": PATH_MAX, "pattern": ABSOLUTE_PATH}
    ),
]


def _renderer_family(value: str) -> str:
    if value == AUTO or value in FAMILIES:
        return value
    close = difflib.get_close_matches(value, FAMILIES, n=1, cutoff=0.5)
    nearest = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(
        f"{value!r} is not a chat renderer family of renderers {RENDERERS_VERSION}; {nearest}"
        "use `default` for the checkpoint's own chat template (e.g. Qwen2.5), or one of "
        "the families listed in docs/api.md"
    )


RendererFamily = Annotated[
    str,
    AfterValidator(_renderer_family),
    WithJsonSchema({"type": "string", "enum": [*FAMILIES, AUTO]}),
]
# A W&B project name: W&B refuses / \ # ? % : and more than 128 characters.
WandbName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^/\\#?%:]+$")]

ImageRef = Annotated[str, Field(min_length=1, max_length=URL_MAX, pattern=IMAGE_REF)]

# ---- model -------------------------------------------------------------------------


class ModelSpec(Model):
    path: Annotated[
        str,
        Field(
            min_length=1,
            max_length=PATH_MAX,
            description="HF checkpoint dir inside the pods, or an HF id (downloaded by every "
            "pod at start; then refLoad must be a directory)",
        ),
    ]
    type: Annotated[
        str,
        Field(
            min_length=1,
            max_length=WORD_MAX,
            pattern=r"^[A-Za-z0-9._-]+$",
            description="slime model-args name: scripts/models/<type>.sh (e.g. qwen2.5-3B)",
        ),
    ]
    renderer_family: RendererFamily | None = Field(
        default=None,
        description="chat renderer family of the gateway (a `renderers` family, see below); "
        "required when path is a local directory",
    )
    tool_call_parser: Word | None = None
    """SGLang tool-call parser (e.g. `qwen25`); the gateway parses tool calls with the same
    parser.
    """
    reasoning_parser: Word | None = None
    """SGLang reasoning parser (e.g. `qwen3`, `deepseek-r1`) for models that think before
    answering.
    """
    context_length: PositiveInt | None = None
    """Maximum tokens per sequence (SGLang's context; unset: the checkpoint's `config.json`
    says). The gateway caps each model call's `max_new_tokens` at the room left; when set,
    `grpo.maxResponseLength` and each eval set's must leave room for the prompt.
    """
    ref_load: Annotated[str, Field(min_length=1, max_length=PATH_MAX)] | None = Field(
        default=None,
        description="the trainer's starting checkpoint, a directory in the pods: HF or "
        "Megatron (slime --ref-load; defaults to path, so required when path is an HF id)",
    )


# ---- data --------------------------------------------------------------------------


class EvalSet(Model):
    name: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")
    ]
    """Name of the eval set in metrics and W&B (unique within `data.eval`)."""
    path: DataPath
    """JSONL file inside the pods (absolute path), same row format as `data.train`."""
    samples_per_prompt: PositiveInt = 1
    """Samples generated per eval prompt."""
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    """Sampling temperature for eval (0 = greedy)."""
    max_response_length: PositiveInt | None = None
    """Response token budget for this set (default: `grpo.maxResponseLength`); below
    `model.contextLength` when that is set."""


class DataSpec(Model):
    train: DataPath = Field(
        description='JSONL file inside the pods (absolute path); each row {"prompt": ..., '
        '"metadata": {...}}'
    )
    eval: list[EvalSet] = Field(default_factory=list, max_length=16)
    """Eval sets, run every `evalInterval` rollouts."""
    eval_interval: PositiveInt = 10
    """Rollouts between evaluations."""
    shuffle: bool = True
    """Shuffle training prompts each epoch."""


# ---- agent -------------------------------------------------------------------------


class AgentCoreAgent(Model):
    """An AWS Bedrock AgentCore runtime invoked through boto3; results land in S3."""

    runtime_arn: Annotated[
        str, Field(max_length=2048, pattern=r"^arn:aws[a-z-]*:bedrock-agentcore:[^\s]*$")
    ]
    """ARN of the AgentCore runtime that runs the agent."""
    region: Annotated[str, Field(max_length=32, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]
    """AWS region of the runtime (e.g. `us-west-2`)."""
    s3_bucket: Annotated[str, Field(max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]
    """Bucket where the agent writes each episode's result."""
    timeout_seconds: PositiveInt = 900
    """Wait per episode for the agent's result before it counts as failed."""
    tps_limit: Annotated[float, Field(gt=0)] = 25.0
    """Client-side rate limit (calls per second) shared by invoke and stop calls."""


class HeaderFromSecret(Model):
    name: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9-]+$")]
    """HTTP header name (e.g. `Authorization`)."""
    secret_key_ref: SecretKeyRef
    """Secret key holding the header value; it reaches the pods as an env var, never a ConfigMap."""


class HttpAgent(Model):
    """Any agent behind HTTP: episodes are submitted, results come back by callback."""

    url: HttpBaseUrl
    """Endpoint that starts an episode; agentrl polls and stops episodes at `<url>/<session id>`,
    so it has no query (send keys as `headers`)."""
    timeout_seconds: PositiveInt = 900
    """Wait per episode for the agent's result before it counts as failed."""
    headers: list[HeaderFromSecret] = Field(
        default_factory=list,
        max_length=16,
        description="request headers whose values come from Secrets",
    )
    poll_interval_seconds: Annotated[float, Field(ge=0.1, le=3600)] = 30.0
    """Seconds between result polls when the agent answers asynchronously (0.1 to 3600)."""


class AgentSpec(Model):
    agent_core: AgentCoreAgent | None = None
    """Run episodes on an AWS Bedrock AgentCore runtime. Exactly one of `agentCore` and `http`."""
    http: HttpAgent | None = None
    """Run episodes on an agent behind HTTP. Exactly one of `agentCore` and `http`."""
    max_concurrent: PositiveInt = Field(
        default=100, description="live episodes at once, train and eval alike"
    )
    max_pool_connections: PositiveInt | None = Field(
        default=None,
        description="boto3/HTTP pool size; derived from maxConcurrent when unset",
    )
    model_id: Annotated[str, Field(min_length=1, max_length=256)] = "default"
    """Model name the agent sees in its OpenAI/Anthropic requests."""

    @property
    def effective_max_pool_connections(self) -> int:
        """The pool size the bundle uses: never below what maxConcurrent needs."""
        return self.max_pool_connections or self.max_concurrent


# ---- gateway -----------------------------------------------------------------------


class GatewayServiceSpec(Model):
    type: Literal["ClusterIP", "LoadBalancer"] = "ClusterIP"
    """How agents reach the gateway: `ClusterIP` (in-cluster) or `LoadBalancer`."""
    annotations: dict[str, Text] = Field(default_factory=dict, max_length=64)
    """Annotations on the Service (e.g. cloud load-balancer settings)."""
    load_balancer_source_ranges: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=64
    )
    """CIDRs allowed to reach a LoadBalancer Service."""


class GatewaySpec(Model):
    cumulative_token_mode: bool = False
    """Build each next prompt from the previous prompt + completion tokens + a rendered bridge, so
    re-tokenisation never drifts.
    """
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    """Gateway log level; per-request logs appear at `debug`."""
    port: Annotated[int, Field(ge=1024, le=65535)] = GATEWAY_PORT_DEFAULT
    """Gateway port on the head pod and the Service."""
    service: GatewayServiceSpec = Field(default_factory=GatewayServiceSpec)
    """The Service in front of the gateway and the metrics port."""
    public_url: HttpBaseUrl | None = Field(
        default=None,
        description="URL remote agents use to reach the gateway (e.g. the LoadBalancer's DNS "
        "name), for model calls and HTTP agents' result callbacks; defaults to the in-cluster "
        "Service URL",
    )
    max_in_flight: PositiveInt = Field(
        default=1024, description="requests in flight before the gateway answers 429"
    )
    max_request_bytes: Annotated[int, Field(ge=64 * 1024, le=64 * 1024 * 1024)] = 2 * 1024 * 1024
    """Largest request body an agent may send, in bytes (larger ones get 413). The default,
    2 MiB, holds a full 200k-token context of text or code (about 1 MB of JSON) twice over;
    each MiB more admits up to about a million prompt tokens of work per request.
    """


# ---- grpo --------------------------------------------------------------------------


# spec.grpo.dynamicSamplingFilter: the built-in filter's name, or a Python `module.function`.
ZERO_REWARD_VARIANCE: Final = "zeroRewardVariance"
DYNAMIC_SAMPLING_FILTER_PATTERN: Final = (
    rf"^({ZERO_REWARD_VARIANCE}|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+)$"
)


class RewardNormalization(Model):
    mode: Literal["grpo", "identity"] = "grpo"
    """`grpo`: subtract the group mean per episode; `identity`: raw rewards."""
    std: bool = Field(default=False, description="divide by the group's std as well")


class GrpoSpec(Model):
    num_rollouts: PositiveInt
    """Rollout steps to train for."""
    rollout_batch_size: PositiveInt = 32
    """Prompts per rollout step."""
    samples_per_prompt: PositiveInt = 8
    """Episodes per prompt (the GRPO group size)."""
    global_batch_size: PositiveInt | None = Field(
        default=None, description="defaults to rolloutBatchSize x samplesPerPrompt"
    )
    max_response_length: PositiveInt = 1024
    """Response tokens of one trained sequence (slime's `--rollout-max-response-len`): every
    completion of a multi-turn episode plus the tool output between them, clipped beyond it
    (counted, `truncated` set); also each model call's `max_new_tokens`. Size it for a whole
    episode.
    """
    learning_rate: Annotated[float, Field(gt=0, le=1)] = 1e-6
    """Adam learning rate."""
    eps_clip: Annotated[float, Field(gt=0, le=1)] = 0.2
    """PPO clip range below 1."""
    eps_clip_high: Annotated[float, Field(gt=0, le=1)] = 0.28
    """PPO clip range above 1 (clip-higher)."""
    kl_loss_coef: Annotated[float, Field(ge=0)] = 0.0
    """Weight of the KL loss against the reference model."""
    kl_loss_type: Literal["kl", "k2", "k3", "low_var_kl"] = "low_var_kl"
    """KL estimator."""
    temperature: Annotated[float, Field(gt=0, le=2)] = 1.0
    """Sampling temperature for training rollouts."""
    max_tokens_per_gpu: PositiveInt = 9216
    """Token budget per GPU for dynamic batching."""
    reward_normalization: RewardNormalization = Field(default_factory=RewardNormalization)
    """How episode rewards become advantages (episode-level, each episode weighs the same)."""
    over_sampling_batch_size: PositiveInt | None = None
    """Prompt groups a train step keeps in flight (slime's `--over-sampling-batch-size`), up
    to twice rolloutBatchSize. Above rolloutBatchSize, the step ends once rolloutBatchSize
    groups are kept and stragglerPolicy cuts the rest. Unset: rolloutBatchSize.
    """
    dynamic_sampling_filter: (
        Annotated[str, Field(pattern=DYNAMIC_SAMPLING_FILTER_PATTERN, max_length=253)] | None
    ) = None
    """Drop finished groups that carry no GRPO signal and start replacements (DAPO dynamic
    sampling): `zeroRewardVariance`, or `module.function` with the signature of slime's
    `--dynamic-sampling-filter-path` (e.g. from runtime.extraCode). Unset: keep every group.
    """
    max_refill_rounds: Annotated[int, Field(ge=0, le=100)] = 3
    """Cap on replacements for filtered groups: a step starts at most (1 + this) x
    overSamplingBatchSize groups, then fills the batch with filtered groups (no gradient).
    """
    straggler_policy: Literal["wait", "abort", "carryOver"] = "wait"
    """Once the batch is full: `wait` for every started group; `abort` the rest and return
    their prompts to slime's data source; `carryOver`: as abort, but keep their finished
    episodes, so the group resumes in the next step. A group that resumes is waited for,
    never cut again, as long as slime's data source hands cut groups out the next step (its
    default buffer does).
    """
    failed_episodes: Literal["exclude", "zeroReward"] = "exclude"
    """Episodes that end without a reward the agent reported (engine, transport, timeout,
    throttling, agent crash, contract violation): `exclude` leaves them out of their group's
    mean and std and gives them no gradient; `zeroReward` counts them as reward 0 (the old
    behaviour), which pulls the group mean down and so raises every sibling's advantage.
    """
    min_valid_samples_per_group: PositiveInt = 2
    """Episodes of a group that must end in a reported reward for the group to train (with
    `failedEpisodes: exclude` and GRPO normalisation); a group with fewer is dropped like a
    zero-variance one: replaced under dynamicSamplingFilter, otherwise counted and trained
    with zero advantage. At most samplesPerPrompt.
    """
    max_policy_lag: Annotated[int, Field(ge=0, le=100)] = 1
    """How many weight updates old a carried-over episode may be (`stragglerPolicy:
    carryOver`): an older one is run again from its prompt instead of reused; 0 reuses none.
    """
    off_policy_tokens: Literal["train", "mask"] = "mask"
    """Tokens of carried-over episodes, sampled by an older policy: `mask` keeps their reward
    in the group's statistics but trains none of their tokens (as slime's
    `--mask-offpolicy-in-partial-rollout`); `train` trains them with their logprobs as sampled,
    which only slime's `--use-tis` (or `--get-mismatch-metrics`, `--use-rollout-logprobs`) reads:
    without one they train as if on-policy, and validation warns (docs/rollout.md).
    """

    @property
    def effective_global_batch_size(self) -> int:
        return self.global_batch_size or self.rollout_batch_size * self.samples_per_prompt

    @property
    def effective_over_sampling_batch_size(self) -> int:
        return self.over_sampling_batch_size or self.rollout_batch_size

    @property
    def effective_min_valid_samples(self) -> int:
        """minValidSamplesPerGroup where it applies (failed episodes excluded, rewards compared
        within a group); otherwise 1: every group trains."""
        applies = self.reward_normalization.mode == "grpo" and self.failed_episodes == "exclude"
        return self.min_valid_samples_per_group if applies else 1


# ---- resources ---------------------------------------------------------------------


class Parallelism(Model):
    tensor: PositiveInt = 2
    """Tensor parallel size."""
    pipeline: PositiveInt = 1
    """Pipeline parallel size."""
    context: PositiveInt = 1
    """Context parallel size."""
    expert: PositiveInt = 1
    """Expert parallel size (MoE models)."""

    @property
    def model_parallel_size(self) -> int:
        return self.tensor * self.pipeline * self.context


class HeadSpec(Model):
    """The CPU-only Ray head: gateway and metrics (slime's driver runs on a GPU worker)."""

    cpu: Quantity = "8"
    """CPU of the head pod."""
    memory: Quantity = "32Gi"
    """Memory of the head pod."""
    shm_size: Quantity = Field(default="8Gi", description="memory-backed /dev/shm of the head pod")
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict, max_length=64, description="placement of the head pod (CPU nodes)"
    )
    tolerations: list[KubeObject] = Field(default_factory=list, max_length=32)
    """Tolerations of the head pod."""
    affinity: KubeObject | None = None
    """Affinity of the head pod (a Kubernetes Affinity object)."""
    priority_class_name: ObjectName | None = None
    """PriorityClass of the head and submitter pods; defaults to `resources.priorityClassName`."""


class ResourcesSpec(Model):
    nodes: Annotated[int, Field(ge=1, le=MAX_GPU_NODES)] = 1
    """GPU nodes (one Ray worker pod each); at most 5,000, the largest cluster Kubernetes
    supports."""
    gpus_per_node: PositiveInt = 8
    """GPUs per node."""
    gpu_resource_name: ExtendedResource = DEFAULT_GPU_RESOURCE
    """Extended resource that requests GPUs (e.g. `nvidia.com/gpu`, `amd.com/gpu`)."""
    parallelism: Parallelism = Field(default_factory=Parallelism)
    """Megatron parallelism; tensor x pipeline x context must divide the training GPUs."""
    rollout_gpus_per_engine: PositiveInt = 2
    """GPUs per SGLang engine; must divide the rollout GPUs."""
    colocate: bool = True
    """Train and generate on the same GPUs (slime offloads between phases)."""
    rollout_gpus: PositiveInt | None = Field(
        default=None,
        description="GPUs reserved for SGLang engines when colocate is false; training keeps "
        "the rest (whole nodes, or less than one node)",
    )
    cpu: Quantity = "32"
    """CPU per GPU pod."""
    memory: Quantity = "256Gi"
    """Memory per GPU pod (includes `/dev/shm`)."""
    shm_size: Quantity = "64Gi"
    """Size of the memory-backed `/dev/shm` of each GPU pod."""
    extra_resources: dict[str, Annotated[int, Field(ge=1, le=INT32_MAX)]] = Field(
        default_factory=dict,
        max_length=16,
        description="extra device resources per GPU pod, e.g. vpc.amazonaws.com/efa: 32",
    )
    head: HeadSpec = Field(default_factory=HeadSpec)
    """The CPU head pod."""
    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=64)
    """Node selector of the GPU pods."""
    tolerations: list[KubeObject] = Field(default_factory=list, max_length=32)
    """Tolerations of the GPU pods."""
    affinity: KubeObject | None = None
    """Affinity of the GPU pods (a Kubernetes Affinity object)."""
    priority_class_name: ObjectName | None = None
    """PriorityClass of the GPU worker pods, and of the head unless `head.priorityClassName`."""

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def actor_gpus(self) -> int:
        """GPUs that run Megatron actors (all of them when colocated)."""
        if self.colocate:
            return self.total_gpus
        return self.total_gpus - (self.rollout_gpus or 0)

    @property
    def engine_gpus(self) -> int:
        """GPUs that run SGLang engines."""
        return self.total_gpus if self.colocate else (self.rollout_gpus or 0)


# ---- runtime -----------------------------------------------------------------------


class EnvVarSource(Model):
    secret_key_ref: SecretKeyRef
    """Secret key the value comes from."""


class EnvVar(Model):
    name: Annotated[str, Field(max_length=253, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    """Variable name."""
    value: Text | None = None
    """Literal value (no secrets: use `valueFrom`)."""
    value_from: EnvVarSource | None = None
    """Value from a Secret key."""

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"env {self.name}: set exactly one of value or valueFrom")
        return self


class ExtraCode(Model):
    """A ConfigMap of the user's own Python modules, mounted and put on PYTHONPATH."""

    config_map: ObjectName
    """ConfigMap name; its keys become files under `/opt/agentrl/extra/<index>`."""


class PreflightSpec(Model):
    """The launcher's gang preflight before slime starts (docs/launcher.md)."""

    gang: bool = True
    """Check every GPU worker (GPU count and health, /dev/shm, the CUDA pin, the interconnect)
    and run one NCCL all-reduce over the gang before slime starts; a problem stops the run."""
    timeout_seconds: Annotated[
        int, Field(ge=PREFLIGHT_TIMEOUT_MIN_SECONDS, le=PREFLIGHT_TIMEOUT_MAX_SECONDS)
    ] = PREFLIGHT_TIMEOUT_SECONDS
    """Seconds the whole gang preflight may take; ranks that have not joined by then are
    named."""
    min_bus_bandwidth_gbps: (
        Annotated[float, Field(gt=0, le=PREFLIGHT_BUS_BANDWIDTH_MAX_GBPS)] | None
    ) = Field(default=None, alias="minBusBandwidthGBps")  # GB/s, as nccl-tests writes it
    """Lowest all-reduce bus bandwidth (GB/s, nccl-tests' busbw) accepted between any two
    nodes, or within the node of a one-node run; unset: measured and reported only."""
    on_low_bandwidth: Literal["warn", "fail"] = "warn"
    """What a node pair below `minBusBandwidthGBps` does: a warning, or stop the run."""


class RuntimeSpec(Model):
    image: ImageRef | None = Field(
        default=None, description="defaults to the operator's pinned image"
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Pull policy of every Ray container."""
    cuda_home: AbsolutePath = IMAGE_CUDA_HOME
    """CUDA toolkit inside the image; sets CUDA_HOME and LD_LIBRARY_PATH everywhere."""
    slime_dir: AbsolutePath = Field(
        default="/root/slime", description="slime checkout inside the image"
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=128)
    """Extra env vars of every Ray container."""
    service_account_name: ObjectName | None = None
    """ServiceAccount of every pod (IRSA / workload identity for S3 and AgentCore)."""
    volumes: list[KubeObject] = Field(default_factory=list, max_length=32)
    """Extra pod volumes (Kubernetes Volume objects: model, data, checkpoint PVCs)."""
    volume_mounts: list[KubeObject] = Field(default_factory=list, max_length=64)
    """Mounts of those volumes in every Ray container."""
    extra_code: list[ExtraCode] = Field(default_factory=list, max_length=16)
    """ConfigMaps of your own Python modules, mounted and put on PYTHONPATH."""
    extra_args: list[Annotated[str, Field(max_length=TEXT_MAX)]] = Field(
        default_factory=list, max_length=256, description="passed to slime verbatim, last"
    )
    pod_labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=64)
    """Labels on every pod (head, GPU workers, submitter), e.g. a cost centre. Keys under
    `agentrl.io/` and `ray.io/` are agentrl's and KubeRay's."""
    pod_annotations: dict[str, Text] = Field(default_factory=dict, max_length=64)
    """Annotations on every pod; they override agentrl's own (e.g.
    `karpenter.sh/do-not-disrupt: "false"` for a run that may be interrupted)."""
    preflight: PreflightSpec = Field(default_factory=PreflightSpec)
    """The launcher's gang preflight before slime starts."""


# ---- checkpoint, tracking, scheduling ----------------------------------------------


class CheckpointSpec(Model):
    path: AbsolutePath | None = None
    """Checkpoint directory inside the pods (absolute, on a shared volume), this run's own: the
    operator does not start an experiment whose directory (or one inside or above it, on the
    same volume) another unfinished experiment of the namespace keeps (CheckpointConflict)."""
    save_interval: PositiveInt | None = None
    """Rollouts between checkpoints (needs `path`)."""
    resume: bool = True
    """Resume from the latest checkpoint under `path` if there is one. false: start from the
    model, leaving out saves another experiment made there; a retry (backoffLimit) or a resume
    after a suspend of this experiment still goes on from its own saves."""


class WandbSpec(Model):
    project: WandbName
    """W&B project."""
    group: WandbName | None = None
    """W&B group."""
    team: WandbName | None = None
    """W&B entity (team or user) of the run (`--wandb-team`); the dashboard links the run."""
    host: HttpUrl | None = None
    """W&B server URL (self-hosted)."""
    api_key_secret: SecretKeyRef
    """Secret key with the W&B API key (reaches the pods as WANDB_API_KEY)."""


class TrackingSpec(Model):
    wandb: WandbSpec | None = None
    """Log to Weights & Biases."""


class SchedulingSpec(Model):
    queue_name: Annotated[str, Field(min_length=1, max_length=63, pattern=QUEUE_NAME)] | None = (
        Field(default=None, description="Kueue LocalQueue name (also a label value on the RayJob)")
    )


# ---- the experiment ----------------------------------------------------------------


class RLExperimentSpec(Model):
    model: ModelSpec
    """The model to train."""
    data: DataSpec
    """Training and eval prompts."""
    agent: AgentSpec
    """The agent that runs episodes."""
    grpo: GrpoSpec
    """GRPO hyper-parameters."""
    gateway: GatewaySpec = Field(default_factory=GatewaySpec)
    """The model gateway agents call."""
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """GPUs, parallelism, pod sizes and placement."""
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    """Image, env, volumes and code of the Ray pods."""
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """Checkpointing and resume."""
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    """Experiment tracking."""
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    """Queueing (mutable)."""
    # Lifecycle: the only fields that may change after creation.
    suspend: bool = False
    """Stop the run and release its pods; set back to false to start it again (mutable)."""
    active_deadline_seconds: PositiveInt | None = None
    """Deadline of each attempt, not of the whole run: KubeRay counts it from the start of every
    attempt (each backoffLimit retry) and every resume, so a run can hold its GPUs for up to
    backoffLimit + 1 times this. Past it the attempt fails with DeadlineExceeded, which is not
    retried (mutable)."""
    startup_deadline_seconds: PositiveInt | None = None
    """Seconds from the start of each attempt (each backoffLimit retry, each resume) until the
    run is Running and Ray has started its job; unset: 3600. Past it the experiment is Stalled
    (StartupDeadlineExceeded, or SubmitterNotStarted), and a run not yet Running fails the
    attempt (KubeRay's preRunningDeadlineSeconds) (mutable)."""
    backoff_limit: NonNegativeInt = 0
    """Retries of a failed run, each on a fresh Ray cluster. KubeRay retries no attempt that
    failed with DeadlineExceeded (activeDeadlineSeconds) or, from KubeRay v1.7,
    JobStatusCheckTimeoutExceeded (the Ray dashboard on the head pod unreachable, by default
    for 5 minutes) (mutable)."""
    ttl_seconds_after_finished: NonNegativeInt = 0
    """Seconds KubeRay keeps the Ray cluster (head and worker pods, and their logs) after the
    run ends before deleting it; the RayJob and its submitter pod stay (mutable). After
    `activeDeadlineSeconds` or a failed submitter, KubeRay does not stop the Ray job: training
    goes on, on the GPUs, writing checkpoints, for these seconds."""

    @property
    def startup_deadline(self) -> int:
        """`startup_deadline_seconds`, or its default when unset."""
        return startup_deadline(self.startup_deadline_seconds)


def startup_deadline(seconds: int | None) -> int:
    """The startup deadline in force: the spec's, else DEFAULT_STARTUP_DEADLINE_SECONDS."""
    return DEFAULT_STARTUP_DEADLINE_SECONDS if seconds is None else seconds


class ObjectMeta(Model):
    """The parts of metadata agentrl reads; the API server owns the rest."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_attribute_docstrings=True,
    )

    name: str
    """Experiment name: a DNS-1035 label of at most 47 characters."""
    namespace: str = "default"
    """Namespace of the experiment and its children."""
    uid: str | None = None
    """Set by the API server; children get owner references to it."""
    generation: int | None = None
    """Set by the API server."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations."""


class RLExperiment(Model):
    api_version: Literal["agentrl.io/v1alpha1"] = "agentrl.io/v1alpha1"
    """`agentrl.io/v1alpha1`."""
    kind: Literal["RLExperiment"] = "RLExperiment"
    """`RLExperiment`."""
    metadata: ObjectMeta
    """Name and namespace."""
    spec: RLExperimentSpec
    """What to train and how."""
    status: RLExperimentStatus | None = None
    """Written by the operator."""
