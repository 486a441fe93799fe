"""The RLExperiment spec and status as pydantic models.

One set of models serves three readers: the operator (parsing the custom resource), the
renderer (turning it into KubeRay objects) and the in-pod bundle (reading the runtime
config the renderer writes). Field names are camelCase on the wire, snake_case in Python.
Defaults follow agentcore-rl-toolkit's SlimeRunner where it has one, so an experiment that
sets only what it must trains like the reference recipe. Structural rules (types, ranges,
unknown fields) live here; cross-field rules live in `agentrl.api.validation`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from agentrl.api.constants import DEFAULT_GPU_RESOURCE, GATEWAY_PORT_DEFAULT

# Kubernetes resource quantities ("16", "500m", "64Gi"). Same grammar as apimachinery.
QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def _quantity_text(value: object) -> object:
    # YAML reads `cpu: 32` as an int; Kubernetes accepts both, so do we.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


# On the wire an int-or-string, exactly like Kubernetes' own resource.Quantity.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    Field(pattern=QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# An open Kubernetes object passed through as the user wrote it (volumes, affinity...).
KubeObject = dict[str, Any]


class Model(BaseModel):
    """Base for every API object: camelCase aliases, unknown fields are errors."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )

    def dump(self) -> dict[str, Any]:
        """Wire form: camelCase keys, unset optionals omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SecretKeyRef(Model):
    """A key of a Secret in the experiment's namespace. Values never leave the Secret."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    key: Annotated[str, Field(min_length=1, max_length=253)]


# ---- model -------------------------------------------------------------------------


class ModelSpec(Model):
    path: Annotated[
        str, Field(min_length=1, description="HF checkpoint dir inside the pods (or an HF id)")
    ]
    type: Annotated[
        str,
        Field(
            min_length=1,
            pattern=r"^[A-Za-z0-9._-]+$",
            description="slime model-args name: scripts/models/<type>.sh (e.g. qwen2.5-3B)",
        ),
    ]
    renderer_family: str | None = Field(
        default=None,
        description="chat renderer family for the gateway; required when path is a local directory",
    )
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    context_length: PositiveInt | None = None
    ref_load: str | None = Field(
        default=None, description="reference model checkpoint (defaults to path)"
    )


# ---- data --------------------------------------------------------------------------


class EvalSet(Model):
    name: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")
    ]
    path: Annotated[str, Field(min_length=1)]
    samples_per_prompt: PositiveInt = 1
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    max_response_length: PositiveInt | None = None


class DataSpec(Model):
    train: Annotated[
        str,
        Field(min_length=1, description='JSONL; each row {"prompt": ..., "metadata": {...}}'),
    ]
    eval: list[EvalSet] = Field(default_factory=list)
    eval_interval: PositiveInt = 10
    shuffle: bool = True


# ---- agent -------------------------------------------------------------------------


class AgentCoreAgent(Model):
    """An AWS Bedrock AgentCore runtime invoked through boto3; results land in S3."""

    runtime_arn: Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:bedrock-agentcore:")]
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]
    s3_bucket: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]
    timeout_seconds: PositiveInt = 900
    tps_limit: Annotated[float, Field(gt=0)] = 25.0


class HeaderFromSecret(Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9-]+$")]
    secret_key_ref: SecretKeyRef


class HttpAgent(Model):
    """Any agent behind HTTP: episodes are submitted, results come back by callback."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    timeout_seconds: PositiveInt = 900
    headers: list[HeaderFromSecret] = Field(
        default_factory=list, description="request headers whose values come from Secrets"
    )
    poll_interval_seconds: Annotated[float, Field(gt=0)] = 30.0


class AgentSpec(Model):
    agent_core: AgentCoreAgent | None = None
    http: HttpAgent | None = None
    max_concurrent: PositiveInt = Field(
        default=100, description="live episodes at once, train and eval alike"
    )
    max_pool_connections: PositiveInt | None = Field(
        default=None,
        description="boto3/HTTP pool size; derived from maxConcurrent when unset",
    )
    model_id: str = "default"

    @property
    def effective_max_pool_connections(self) -> int:
        """The pool size the bundle uses: never below what maxConcurrent needs."""
        return self.max_pool_connections or self.max_concurrent

    @property
    def backend(self) -> Literal["agentCore", "http"] | None:
        if self.agent_core is not None and self.http is None:
            return "agentCore"
        if self.http is not None and self.agent_core is None:
            return "http"
        return None


# ---- gateway -----------------------------------------------------------------------


class GatewayServiceSpec(Model):
    type: Literal["ClusterIP", "LoadBalancer"] = "ClusterIP"
    annotations: dict[str, str] = Field(default_factory=dict)
    load_balancer_source_ranges: list[str] = Field(default_factory=list)


class GatewaySpec(Model):
    cumulative_token_mode: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    port: Annotated[int, Field(ge=1024, le=65535)] = GATEWAY_PORT_DEFAULT
    service: GatewayServiceSpec = Field(default_factory=GatewayServiceSpec)
    public_url: Annotated[str, Field(pattern=r"^https?://")] | None = Field(
        default=None,
        description="URL remote agents use to reach the gateway (e.g. the LoadBalancer's DNS "
        "name); defaults to the in-cluster Service URL",
    )
    max_in_flight: PositiveInt = Field(
        default=1024, description="requests in flight before the gateway answers 429"
    )


# ---- grpo --------------------------------------------------------------------------


class RewardNormalization(Model):
    mode: Literal["grpo", "identity"] = "grpo"
    std: bool = Field(default=False, description="divide by the group's std as well")


class GrpoSpec(Model):
    num_rollouts: PositiveInt
    rollout_batch_size: PositiveInt = 32
    samples_per_prompt: PositiveInt = 8
    global_batch_size: PositiveInt | None = Field(
        default=None, description="defaults to rolloutBatchSize x samplesPerPrompt"
    )
    max_response_length: PositiveInt = 1024
    learning_rate: Annotated[float, Field(gt=0, le=1)] = 1e-6
    eps_clip: Annotated[float, Field(gt=0, le=1)] = 0.2
    eps_clip_high: Annotated[float, Field(gt=0, le=1)] = 0.28
    kl_loss_coef: Annotated[float, Field(ge=0)] = 0.0
    kl_loss_type: Literal["kl", "k2", "k3", "low_var_kl"] = "low_var_kl"
    temperature: Annotated[float, Field(gt=0, le=2)] = 1.0
    max_tokens_per_gpu: PositiveInt = 9216
    reward_normalization: RewardNormalization = Field(default_factory=RewardNormalization)

    @property
    def effective_global_batch_size(self) -> int:
        return self.global_batch_size or self.rollout_batch_size * self.samples_per_prompt


# ---- resources ---------------------------------------------------------------------


class Parallelism(Model):
    tensor: PositiveInt = 2
    pipeline: PositiveInt = 1
    context: PositiveInt = 1
    expert: PositiveInt = 1

    @property
    def model_parallel_size(self) -> int:
        return self.tensor * self.pipeline * self.context


class HeadSpec(Model):
    """The CPU-only Ray head: driver, gateway, metrics."""

    cpu: Quantity = "8"
    memory: Quantity = "32Gi"
    shm_size: Quantity = Field(default="8Gi", description="memory-backed /dev/shm of the head pod")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="placement of the head pod (CPU nodes)"
    )
    tolerations: list[KubeObject] = Field(default_factory=list)


class ResourcesSpec(Model):
    nodes: PositiveInt = 1
    gpus_per_node: PositiveInt = 8
    gpu_resource_name: str = DEFAULT_GPU_RESOURCE
    parallelism: Parallelism = Field(default_factory=Parallelism)
    rollout_gpus_per_engine: PositiveInt = 2
    colocate: bool = True
    rollout_gpus: PositiveInt | None = Field(
        default=None,
        description="GPUs reserved for SGLang engines when colocate is false (whole nodes)",
    )
    cpu: Quantity = "32"
    memory: Quantity = "256Gi"
    shm_size: Quantity = "64Gi"
    extra_resources: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="extra device resources per GPU pod, e.g. vpc.amazonaws.com/efa: 32",
    )
    head: HeadSpec = Field(default_factory=HeadSpec)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[KubeObject] = Field(default_factory=list)
    affinity: KubeObject | None = None
    priority_class_name: str | None = None

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


class EnvVar(Model):
    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    value: str | None = None
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"env {self.name}: set exactly one of value or valueFrom")
        return self


class ExtraCode(Model):
    """A ConfigMap of the user's own Python modules, mounted and put on PYTHONPATH."""

    config_map: Annotated[str, Field(min_length=1, max_length=253)]


class RuntimeSpec(Model):
    image: str | None = Field(default=None, description="defaults to the operator's pinned image")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    cuda_home: str = "/usr/local/cuda"
    slime_dir: str = Field(default="/root/slime", description="slime checkout inside the image")
    env: list[EnvVar] = Field(default_factory=list)
    service_account_name: str | None = None
    volumes: list[KubeObject] = Field(default_factory=list)
    volume_mounts: list[KubeObject] = Field(default_factory=list)
    extra_code: list[ExtraCode] = Field(default_factory=list)
    extra_args: list[str] = Field(
        default_factory=list, description="passed to slime verbatim, last"
    )


# ---- checkpoint, tracking, scheduling ----------------------------------------------


class CheckpointSpec(Model):
    path: str | None = None
    save_interval: PositiveInt | None = None
    resume: bool = True


class WandbSpec(Model):
    project: Annotated[str, Field(min_length=1)]
    group: str | None = None
    host: str | None = None
    api_key_secret: SecretKeyRef


class TrackingSpec(Model):
    wandb: WandbSpec | None = None


class SchedulingSpec(Model):
    queue_name: str | None = Field(default=None, description="Kueue LocalQueue name")


# ---- the experiment ----------------------------------------------------------------


class RLExperimentSpec(Model):
    model: ModelSpec
    data: DataSpec
    agent: AgentSpec
    grpo: GrpoSpec
    gateway: GatewaySpec = Field(default_factory=GatewaySpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    # Lifecycle: the only fields that may change after creation.
    suspend: bool = False
    active_deadline_seconds: PositiveInt | None = None
    startup_deadline_seconds: PositiveInt | None = Field(
        default=None, description="time to reach Running (KubeRay preRunningDeadlineSeconds)"
    )
    backoff_limit: NonNegativeInt = 0
    ttl_seconds_after_finished: NonNegativeInt = 0


# ---- status ------------------------------------------------------------------------


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class RayJobMirror(Model):
    """KubeRay's own words, copied verbatim for debugging."""

    job_status: str | None = None
    job_deployment_status: str | None = None
    reason: str | None = None
    message: str | None = None


class Progress(Model):
    rollout: int | None = None
    total_rollouts: int | None = None
    train_reward: float | None = None
    eval_reward: float | None = None
    failed_session_ratio: float | None = None
    updated_at: str | None = None


class RLExperimentStatus(Model):
    phase: (
        Literal["Pending", "Initializing", "Running", "Suspended", "Succeeded", "Failed"] | None
    ) = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    ray_job_name: str | None = None
    ray_cluster_name: str | None = None
    dashboard_url: str | None = Field(default=None, alias="dashboardURL")
    gateway_url: str | None = Field(default=None, alias="gatewayURL")
    start_time: str | None = None
    completion_time: str | None = None
    attempts: int | None = None
    ray_job: RayJobMirror | None = None
    progress: Progress | None = None


class ObjectMeta(Model):
    """The parts of metadata agentrl reads; the API server owns the rest."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class RLExperiment(Model):
    api_version: Literal["agentrl.io/v1alpha1"] = "agentrl.io/v1alpha1"
    kind: Literal["RLExperiment"] = "RLExperiment"
    metadata: ObjectMeta
    spec: RLExperimentSpec
    status: RLExperimentStatus | None = None
