"""The cross-field rules of an RLExperiment, one small function each.

Each rule yields `(path, message, hint, severity)`; `agentrl.api.validation` wraps them into
`Problem`s. Paths are wire paths (camelCase), so the user can find the field in the YAML they
wrote. The arithmetic mirrors what slime and Megatron assert at start-up, hours after the GPUs
were allocated; here it fails before anything is created.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from agentrl.api import slime_flags
from agentrl.api.bounds import MAX_OBJECT_BYTES, join
from agentrl.api.constants import (
    CONFIGMAP_MAX_BYTES,
    ENV_CONFIG_PATH,
    ENV_NODE_NAME,
    ENV_POD_NAME,
    METRICS_PORT,
    RAY_PORTS,
    SLIME_EVAL_STEP_NAME,
    SLIME_EVAL_TRUNCATED_SUFFIX,
)
from agentrl.api.findings import Finding, Rule, err, repeats, warn
from agentrl.api.formats import EXTENDED_RESOURCE, FORMATS
from agentrl.api.models import ZERO_REWARD_VARIANCE, RLExperiment
from agentrl.api.partial import require_parsed
from agentrl.api.quantity import parse_quantity
from agentrl.api.renderer_families import AUTO
from agentrl.api.runtime import (
    ENV_HTTP_HEADER_PREFIX,
    ENV_WANDB_API_KEY,
    RuntimeConfig,
    config_spec,
    runtime_secret_env_names,
)

# Ports Ray itself listens on in the head pod (GCS, client, dashboard, node metrics).
RAY_PORT_NUMBERS = frozenset(port for _, port in RAY_PORTS)
# An image reference that cannot move: <image>[:<tag>]@sha256:<digest>.
DIGEST_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
# Env vars the renderer sets in every container; a user value would silently fight them.
RESERVED_ENV = frozenset(
    {
        "PYTHONPATH",
        "CUDA_HOME",
        "LD_LIBRARY_PATH",
        ENV_CONFIG_PATH,
        "NVIDIA_VISIBLE_DEVICES",
        ENV_POD_NAME,
        ENV_NODE_NAME,
    }
)
# Env KubeRay's own validation refuses in the head container (the spec's env reaches every
# Ray container): it marks the RayJob ValidationFailed, no cluster is created, and since
# spec.runtime is immutable only a new experiment recovers. agentrl renders no GCS fault
# tolerance and no autoscaler, so each of these is refused there. Name -> (values refused,
# None for any; the hint).
# https://github.com/ray-project/kuberay/blob/598eb66aa077c55ae04fa87b192238a3ec184e88/ray-operator/controllers/ray/utils/validation.go#L153-L205
KUBERAY_REFUSED_ENV: dict[str, tuple[frozenset[str] | None, str]] = {
    "RAY_REDIS_ADDRESS": (
        None,
        "remove it: it turns on GCS fault tolerance, which KubeRay allows only with its "
        "gcsFaultToleranceOptions, and agentrl renders none",
    ),
    "REDIS_USERNAME": (
        None,
        "remove it: KubeRay allows a Redis username only in gcsFaultToleranceOptions, and "
        "agentrl renders none",
    ),
    "RAY_enable_autoscaler_v2": (
        frozenset({"1", "true"}),
        "remove it: KubeRay allows autoscaler v2 only with enableInTreeAutoscaling, and "
        "agentrl's Ray cluster is a fixed-size gang without an autoscaler",
    ),
}

R = "resources"
# A Hugging Face repo id (huggingface_hub's validate_repo_id): owner/name, 96 characters.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_EXTENDED = re.compile(EXTENDED_RESOURCE)
# Words of an env var name that mark a secret (`HF_TOKEN`, `AWS_SECRET_ACCESS_KEY`,
# `DB_PASSWORD`, `OPENAI_API_KEY`); `TOKENIZERS_PARALLELISM` and `MAX_TOKENS` are not secrets.
_SECRET_WORDS = frozenset(
    ("SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY")
)
# Values that are credentials whatever the variable is called: an HTTP Authorization value,
# and the documented prefixes of common API tokens (Hugging Face `hf_`, OpenAI and Anthropic
# `sk-`, GitHub `ghp_`/`github_pat_`, Slack `xox?-`), long enough not to be a word.
_AUTHORIZATION = "an HTTP Authorization value"
_CREDENTIAL_VALUES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^bearer\s+\S{8,}$", re.IGNORECASE), _AUTHORIZATION),
    (re.compile(r"^(hf_|sk-|ghp_|github_pat_|xox[abprs]-)[A-Za-z0-9_-]{16,}$"), "an API token"),
)
# A Basic Authorization value: base64 of `user:password` (RFC 7617), not a phrase such as
# "Basic configuration".
_BASIC = re.compile(r"^basic\s+([A-Za-z0-9+/]+={0,2})$", re.IGNORECASE)
# A Kubernetes dependent variable, `$(NAME)` in an env value: the kubelet writes in the value of
# a variable the container's env sets before it (a Secret's, through valueFrom: the documented
# way to build a URL or an Authorization value around a secret), and leaves it as written when
# none does; either way the spec holds the reference, not the credential.
# https://kubernetes.io/docs/tasks/inject-data-application/define-interdependent-environment-variables/
_ENV_REFERENCE = re.compile(r"\$\([^)]+\)")
# Values of a secret-looking name that are not the secret: the path of a file that holds it
# (`GOOGLE_APPLICATION_CREDENTIALS`, `HF_TOKEN_PATH`, `POSTGRES_PASSWORD_FILE`: a Secret
# mounted as a volume, the way these variables are meant to be used), a switch
# (`HF_HUB_DISABLE_IMPLICIT_TOKEN: "1"`) or a count (`TOKEN_BUDGET: "4096"`).
_NOT_A_SECRET = re.compile(r"^(/\S*|\d{1,6}|true|false|yes|no|on|off)$", re.IGNORECASE)
# What the renderer adds to the runtime config besides the spec (slime flags, names, URLs);
# generous, so the rule refuses before the ConfigMap would.
CONFIG_HEADROOM = 64 * 1024
# A RayJob without user content (three pod templates, ports, labels): about 6 KiB.
RAYJOB_BASE_BYTES = 16 * 1024


def one_agent_backend(exp: RLExperiment) -> Iterator[Finding]:
    """`spec.agent` sets exactly one of `agentCore` and `http`."""
    agent = exp.spec.agent
    if agent.agent_core is None and agent.http is None:
        yield err("spec.agent", "no agent backend is set", "set exactly one of agentCore or http")
    elif agent.agent_core is not None and agent.http is not None:
        yield err("spec.agent", "both agentCore and http are set", "keep exactly one backend")


def agentcore_region_matches_arn(exp: RLExperiment) -> Iterator[Finding]:
    """`agent.agentCore.region` is the region of `runtimeArn`: boto3 sends every call to the
    region's endpoint, and a runtime exists in its ARN's region only.
    """
    # agentcore-rl-toolkit's client takes its boto3 region from the ARN for that reason:
    # https://github.com/awslabs/agentcore-rl-toolkit/blob/7bdd4159b505d8fc3571027b1a9c5f817011cceb/src/agentcore_rl_toolkit/client.py#L402-L403
    core = exp.spec.agent.agent_core
    if core is None:
        return
    # arn:<partition>:bedrock-agentcore:<region>:<account>:runtime/<id>
    parts = core.runtime_arn.split(":")
    arn_region = parts[3] if len(parts) > 3 else ""
    if arn_region and arn_region != core.region:
        yield err(
            "spec.agent.agentCore.region",
            f"region {core.region} is not the region of runtimeArn ({arn_region}): every "
            f"invoke would go to the {core.region} endpoint, where the runtime does not exist",
            f"set region: {arn_region}, or name the runtime of that region in runtimeArn",
        )


def pool_covers_concurrency(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `agent.maxPoolConnections` below `agent.maxConcurrent` (AgentCore: boto3's
    pool discards and re-opens connections under load; HTTP agents: requests wait for a free
    connection, and a submit that finds none within 10 s is sent again).
    """
    agent = exp.spec.agent
    pool = agent.max_pool_connections
    if pool is not None and pool < agent.max_concurrent:
        what = (
            "requests to the agent will wait for a free connection under load"
            if agent.http is not None
            else "connections will be discarded and re-opened under load"
        )
        yield warn(
            "spec.agent.maxPoolConnections",
            f"{pool} connections for {agent.max_concurrent} concurrent episodes: {what}",
            f"unset it (derived) or set it to at least {agent.max_concurrent}",
        )


def outside_the_cluster(url: str) -> bool:
    """Whether `url` names a host outside the cluster: a DNS name that is not a Service's
    (`agent`, `agent.rl.svc`, `agent.rl.svc.cluster.local`) nor `localhost`. An IP address
    could be either, so it is not."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return False
    labels = host.split(".")
    return len(labels) > 1 and "svc" not in labels[1:] and host != "localhost"


def loopback(url: str) -> bool:
    """Whether `url` names this machine: `localhost` (and names under it), a loopback
    address, or the unspecified address, which connects to the local host too."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def agent_urls_not_loopback(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: an HTTP agent's `url`, or `gateway.publicUrl`, on a loopback address. In
    the pods that is the Ray pod itself, where no agent and no public gateway address is:
    the rollout would send every episode to its own pod (each one fails as `agent_error`),
    and agents handed a loopback `publicUrl` would call their own machine. It is the URL
    that works on a laptop, and `agentrl rehearse` uses it as it stands unless
    `--agent-url` is given, so a rehearsal passes with it.
    """
    http = exp.spec.agent.http
    if http is not None and loopback(str(http.url)):
        yield warn(
            "spec.agent.http.url",
            f"{http.url} is a loopback address: in the cluster the rollout sends every "
            "episode to the Ray pod it runs in, where no agent listens, and each fails as "
            "agent_error",
            "give the address the pods reach the agent at (a Service, "
            "<service>.<namespace>.svc:<port>, or the agent's public URL); to rehearse "
            "against an agent on this machine, pass agentrl rehearse --agent-url instead",
        )
    public = exp.spec.gateway.public_url
    if public is not None and loopback(str(public)):
        yield warn(
            "spec.gateway.publicUrl",
            f"{public} is a loopback address: agents are handed it to call the model and "
            "to post their results, and would reach their own machine instead of the gateway",
            "set the address agents reach the gateway Service at (its LoadBalancer or "
            "Ingress hostname), or unset it for agents inside the cluster; to rehearse "
            "behind a tunnel, pass agentrl rehearse --gateway-url instead",
        )


def agent_headers_encrypted(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: an HTTP agent outside the cluster (its `url` not a cluster Service) on plain
    `http://` while `agent.http.headers` send it Secret values: the rollout sends those headers
    with every episode, readable on every network between the pods and the agent."""
    http = exp.spec.agent.http
    if http is None or not http.headers or urlsplit(http.url).scheme != "http":
        return
    if not outside_the_cluster(http.url):
        return
    names = ", ".join(h.name for h in http.headers)
    yield warn(
        "spec.agent.http.url",
        f"{http.url} is plain http to a host outside the cluster, and agent.http.headers "
        f"({names}) carry Secret values: each episode's request sends them unencrypted "
        "to the agent",
        f"use https://{http.url.split('://', 1)[1]} (TLS at the agent or its load balancer); "
        "if the agent is a Service in the cluster, write its url as "
        "<service>.<namespace>.svc",
    )


def agents_reach_gateway(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: an agent outside the cluster needs `gateway.publicUrl`: an AgentCore agent
    always, an HTTP agent whose `url` is not a cluster Service. It reaches the model, and an
    HTTP agent posts its result, through the gateway, whose in-cluster Service name does not
    resolve there: every episode would fail, or wait for the result poll.
    """
    if exp.spec.gateway.public_url is not None:
        return
    if exp.spec.agent.agent_core is not None:
        yield warn(
            "spec.gateway.publicUrl",
            "AgentCore agents run outside the cluster and cannot reach the in-cluster "
            "gateway Service",
            "expose it (service.type: LoadBalancer, e.g. an internal NLB with an "
            "external-dns hostname) and set publicUrl to that address",
        )
    http = exp.spec.agent.http
    if http is not None and outside_the_cluster(http.url):
        yield warn(
            "spec.gateway.publicUrl",
            f"the HTTP agent at {urlsplit(http.url).hostname} is outside the cluster, but it "
            "would be given the in-cluster gateway Service's URL for model calls "
            "(_rollout.base_url) and for posting its result (_rollout.callback_url)",
            "expose the gateway (service.type: LoadBalancer, or an Ingress to its Service) "
            "and set publicUrl to that address; if the agent is a Service in the cluster, "
            "write its url as <service>.<namespace>.svc",
        )


def renderer_for_local_model(exp: RLExperiment) -> Iterator[Finding]:
    """`model.rendererFamily` is required when `model.path` is a local directory (it cannot be
    inferred from a path).
    """
    model = exp.spec.model
    if model.renderer_family in (None, AUTO) and model.path.startswith("/"):
        yield err(
            "spec.model.rendererFamily",
            f"required because model.path {model.path!r} is a local directory"
            + (" (`auto` resolves only Hugging Face ids)" if model.renderer_family else ""),
            "set the checkpoint's `renderers` family, e.g. qwen3 or llama-3, or `default` for "
            "its own chat template (Qwen2.5); the list is in docs/api.md",
        )


def trainer_weights_on_disk(exp: RLExperiment) -> Iterator[Finding]:
    """slime loads the trainer's weights from `--ref-load` (refLoad, else path) and refuses
    anything that is not an existing directory in the pods; a Hugging Face id in `path` is
    fine for SGLang and the tokenizer only.
    """
    model = exp.spec.model
    for field, path in (("path", model.path), ("refLoad", model.ref_load)):
        if path is not None and _CONTROL.search(path):
            yield err(f"spec.model.{field}", "contains a control character", "remove it")
            return
    if not is_local_path(model.path) and not HUB_ID.match(model.path):
        yield err(
            "spec.model.path",
            f"{model.path!r} is neither an absolute path nor a Hugging Face id",
            "a hub id is owner/name in letters, digits, '-', '_' and '.' (at most 96 "
            "characters); a local checkpoint is an absolute path in the pods",
        )
        return
    if model.ref_load is None and not is_local_path(model.path):
        yield err(
            "spec.model.refLoad",
            f"required because model.path {model.path!r} is a Hugging Face id: slime loads "
            "the trainer's weights from a directory inside the pods",
            "mount the checkpoint (HF or Megatron) on a volume and set refLoad to its path, "
            f"or make model.path that directory (a directory is an absolute path: "
            f"/{model.path.strip('/')} if that is what {model.path!r} means)",
        )
    for field, path in (("path", model.path), ("refLoad", model.ref_load)):
        if path is None or not is_local_path(path) or path.startswith("/"):
            continue
        yield err(f"spec.model.{field}", f"{path!r} is not an absolute path", _relative_hint(path))
    if model.ref_load is not None and not is_local_path(model.ref_load):
        yield err(
            "spec.model.refLoad",
            f"{model.ref_load!r} looks like a Hugging Face id; slime loads --ref-load from disk",
            "mount the checkpoint (HF or Megatron) on a volume and give its absolute path",
        )


def _relative_hint(path: str) -> str:
    """Why a relative path means nothing in the pods, and what to write instead."""
    if path.startswith("~"):
        return "nothing expands '~' in the pods; give the directory's absolute path there"
    return (
        "the pods have no working directory of yours and agentrl copies no local files: "
        "put the checkpoint on a volume and give the absolute path where runtime.volumeMounts "
        f"mounts it (e.g. /{path.lstrip('./')})"
    )


def is_local_path(path: str) -> bool:
    """A filesystem path rather than a Hugging Face id like 'Qwen/Qwen2.5-3B-Instruct'."""
    if path.startswith(("/", ".", "~")) or "://" in path:
        return True
    return path.count("/") != 1


def parallelism_divides(exp: RLExperiment) -> Iterator[Finding]:
    """tensor x pipeline x context divides the training GPUs; expert divides what is left for data
    x context.
    """
    res = exp.spec.resources
    par = res.parallelism
    mp = par.model_parallel_size
    actor = res.actor_gpus
    if not layout_ok(exp):
        return
    if actor % mp:
        yield err(
            f"spec.{R}.parallelism",
            f"{actor} training GPUs are not divisible by tensor x pipeline x context = {mp}",
            "change the parallelism or the GPU count so the product divides the training GPUs",
        )
    elif (actor // (par.tensor * par.pipeline)) % par.expert:
        yield err(
            f"spec.{R}.parallelism.expert",
            f"expert parallelism {par.expert} does not divide data x context parallelism "
            f"{actor // (par.tensor * par.pipeline)}",
            "pick an expert size that divides the GPUs left after tensor x pipeline",
        )


def rollout_placement(exp: RLExperiment) -> Iterator[Finding]:
    """`resources.rolloutGpus` is set exactly when `colocate` is false, leaves GPUs for training,
    and leaves training whole nodes (or less than one).
    """
    res = exp.spec.resources
    path = f"spec.{R}.rolloutGpus"
    if res.colocate:
        if res.rollout_gpus is not None:
            yield err(path, "only used when colocate is false", "remove it or set colocate: false")
        return
    if res.rollout_gpus is None:
        yield err(path, "required when colocate is false", "set the GPUs reserved for SGLang")
        return
    if res.rollout_gpus >= res.total_gpus:
        yield err(
            path,
            f"{res.rollout_gpus} rollout GPUs leave none of {res.total_gpus} for training",
            "lower rolloutGpus or add nodes",
        )
    elif res.actor_gpus > res.gpus_per_node and res.actor_gpus % res.gpus_per_node:
        yield err(
            path,
            f"training would get {res.actor_gpus} GPUs, not whole nodes of {res.gpus_per_node}",
            "leave training whole nodes (or less than one node): make it a multiple of gpusPerNode",
        )


def engines_fit(exp: RLExperiment) -> Iterator[Finding]:
    """`resources.rolloutGpusPerEngine` divides the rollout GPUs."""
    res = exp.spec.resources
    per_engine = res.rollout_gpus_per_engine
    if res.engine_gpus >= 1 and res.engine_gpus % per_engine:
        yield err(
            f"spec.{R}.rolloutGpusPerEngine",
            f"{res.engine_gpus} rollout GPUs cannot be split into engines of {per_engine}",
            "choose a size that divides the rollout GPUs",
        )


def layout_ok(exp: RLExperiment) -> bool:
    """Whether the GPU split is sound; rules built on it stay quiet otherwise (no cascades)."""
    return next(rollout_placement(exp), None) is None


def batches_divide(exp: RLExperiment) -> Iterator[Finding]:
    """`grpo.globalBatchSize` divides rolloutBatchSize x samplesPerPrompt and is a multiple of the
    data-parallel size.
    """
    grpo = exp.spec.grpo
    res = exp.spec.resources
    per_rollout = grpo.rollout_batch_size * grpo.samples_per_prompt
    gbs = grpo.effective_global_batch_size
    path = "spec.grpo.globalBatchSize"
    if per_rollout % gbs:
        yield err(
            path,
            f"{gbs} does not divide rolloutBatchSize x samplesPerPrompt = {per_rollout}",
            "slime needs whole optimizer steps per rollout; use a divisor",
        )
    mp = res.parallelism.model_parallel_size
    if layout_ok(exp) and res.actor_gpus >= mp and res.actor_gpus % mp == 0:
        dp = res.actor_gpus // mp
        if gbs % dp:
            yield err(
                path,
                f"{gbs} is not divisible by the data-parallel size {dp}",
                "use a multiple of the data-parallel size",
            )


def grpo_groups(exp: RLExperiment) -> Iterator[Finding]:
    """GRPO needs `samplesPerPrompt` >= 2; `maxResponseLength`, and each eval set's, stays
    below `model.contextLength`."""
    grpo = exp.spec.grpo
    if grpo.reward_normalization.mode == "grpo" and grpo.samples_per_prompt < 2:
        yield err(
            "spec.grpo.samplesPerPrompt",
            "GRPO compares samples of one prompt; with 1 every advantage is 0",
            "use at least 2 (SlimeRunner uses 8)",
        )
    ctx = exp.spec.model.context_length
    if ctx is not None and grpo.max_response_length >= ctx:
        yield err(
            "spec.grpo.maxResponseLength",
            f"{grpo.max_response_length} leaves no room for the prompt in {ctx} tokens",
            "lower it or raise model.contextLength",
        )
    for i, eval_set in enumerate(exp.spec.data.eval):
        budget = eval_set.max_response_length
        if ctx is not None and budget is not None and budget >= ctx:
            yield err(
                f"spec.data.eval[{i}].maxResponseLength",
                f"{budget} leaves no room for the prompt in {ctx} tokens",
                "lower it or raise model.contextLength",
            )


def dynamic_sampling(exp: RLExperiment) -> Iterator[Finding]:
    """`grpo.overSamplingBatchSize` is between rolloutBatchSize and twice it, and above it only
    with a stragglerPolicy that cuts (with `wait` the extra groups would run and be thrown away); a
    dynamicSamplingFilter needs samplesPerPrompt >= 2; minValidSamplesPerGroup is at most
    samplesPerPrompt; `offPolicyTokens: train` without a slime loss that corrects for the
    older policy is warned about.
    """
    grpo = exp.spec.grpo
    path = "spec.grpo"
    over = grpo.over_sampling_batch_size
    if over is not None and over < grpo.rollout_batch_size:
        yield err(
            f"{path}.overSamplingBatchSize",
            f"{over} is below rolloutBatchSize {grpo.rollout_batch_size}",
            "set at least rolloutBatchSize (e.g. 1.125 x it), or unset it",
        )
    elif over is not None and over > 2 * grpo.rollout_batch_size:
        yield err(
            f"{path}.overSamplingBatchSize",
            f"{over} is more than twice rolloutBatchSize {grpo.rollout_batch_size}: the groups "
            "one step cuts might not all fit the next batch, where each is waited for",
            f"use at most {2 * grpo.rollout_batch_size} (1.125 x rolloutBatchSize is typical)",
        )
    elif over is not None and over > grpo.rollout_batch_size and grpo.straggler_policy == "wait":
        yield err(
            f"{path}.overSamplingBatchSize",
            "over-sampling with stragglerPolicy wait runs the extra groups and throws them away",
            "set stragglerPolicy to carryOver (or abort), or unset overSamplingBatchSize",
        )
    elif grpo.straggler_policy != "wait" and grpo.effective_over_sampling_batch_size == (
        grpo.rollout_batch_size
    ):
        yield warn(
            f"{path}.stragglerPolicy",
            f"{grpo.straggler_policy} has no effect: without over-sampling every started group "
            "is needed for the batch, so none is ever cut",
            "set overSamplingBatchSize above rolloutBatchSize (e.g. 1.125 x it)",
        )
    if 2 <= grpo.samples_per_prompt < grpo.effective_min_valid_samples:
        yield err(
            f"{path}.minValidSamplesPerGroup",
            f"{grpo.min_valid_samples_per_group} is more than samplesPerPrompt "
            f"{grpo.samples_per_prompt}, so no group could ever train",
            f"use at most {grpo.samples_per_prompt} (2, the default, is what GRPO needs)",
        )
    if grpo.dynamic_sampling_filter is not None and grpo.samples_per_prompt < 2:
        yield err(
            f"{path}.dynamicSamplingFilter",
            "a group of one episode never has reward variance, so every group would be filtered",
            "use samplesPerPrompt >= 2, or unset the filter",
        )
    stale_trained = (
        grpo.off_policy_tokens == "train"
        and grpo.straggler_policy == "carryOver"
        and grpo.max_policy_lag > 0
    )
    if stale_trained and not slime_flags.corrects_off_policy(exp.spec.runtime.extra_args):
        yield warn(
            f"{path}.offPolicyTokens",
            "train trains the tokens of carried-over episodes, sampled by an older policy, "
            "but without --use-tis or --use-rollout-logprobs slime's loss never reads the "
            "logprobs they were sampled with (the trainer recomputes them with its current "
            "weights), so they train as if on-policy, uncorrected",
            "add --use-tis to spec.runtime.extraArgs (truncated importance sampling, see "
            "docs/rollout.md), or set offPolicyTokens: mask (the default)",
        )
    custom = grpo.dynamic_sampling_filter not in (None, ZERO_REWARD_VARIANCE)
    if custom and not exp.spec.runtime.extra_code:
        yield warn(
            f"{path}.dynamicSamplingFilter",
            f"{grpo.dynamic_sampling_filter} must be importable in the pods, and no "
            "runtime.extraCode is set",
            "ship the module in a runtime.extraCode ConfigMap (the rollout imports it at its "
            "first step and stops with the import error if it is missing)",
        )


def slime_flags_in_extra_args(exp: RLExperiment) -> Iterator[Finding]:
    """slime flags in `runtime.extraArgs` that agentrl's rollout cannot honour
    (`agentrl.api.slime_flags`, the launcher's table too): the ones slime would stop on, that
    a spec field replaces (among them the batch shape, the number of rollouts, the sampling
    temperature and length and the train file, which agentrl renders from `spec.grpo` and
    `spec.data`), that change the train rows' fixed contract (each row's `prompt` and
    `metadata`, its `tools` joining the metadata), or that would replace agentrl's own code
    inside slime (its rollout function, reward post-process and custom config, or slime's
    conversion that runs them) are errors naming the field to use; ones only slime's own
    rollout reads are warnings. Judged here, before any GPU is scheduled."""
    for i, is_error, message in slime_flags.judge_extra_args(exp.spec.runtime.extra_args):
        path = f"spec.runtime.extraArgs[{i}]"
        if is_error:
            fix = message.rsplit(" Fix: ", 1)
            yield err(path, fix[0], fix[1] if len(fix) == 2 else "remove it")
        else:
            yield warn(path, message, "remove it")


def pod_sizes(exp: RLExperiment) -> Iterator[Finding]:
    """`cpu` and `memory` of the GPU and head pods are above zero: Ray starts a node with
    as many CPUs as the container's limit, and a pod limited to no memory never runs."""
    res = exp.spec.resources
    for path, value in (
        (f"spec.{R}.cpu", res.cpu),
        (f"spec.{R}.memory", res.memory),
        (f"spec.{R}.head.cpu", res.head.cpu),
        (f"spec.{R}.head.memory", res.head.memory),
    ):
        if parse_quantity(value) <= 0:
            what = "CPU" if path.endswith("cpu") else "memory"
            yield err(path, f"{value} leaves the pod no {what}", "give a size above zero")


def shm_fits_memory(exp: RLExperiment) -> Iterator[Finding]:
    """`/dev/shm` is memory-backed and counts against the pod's memory limit, so `shmSize`
    stays below `memory` (head and GPU pods).
    """
    res = exp.spec.resources
    for path, shm, memory in (
        (f"spec.{R}.shmSize", res.shm_size, res.memory),
        (f"spec.{R}.head.shmSize", res.head.shm_size, res.head.memory),
    ):
        if parse_quantity(memory) <= 0:
            continue  # pod_sizes says so
        if parse_quantity(shm) >= parse_quantity(memory):
            yield err(
                path,
                f"{shm} of /dev/shm would use the whole {memory} memory limit",
                "lower shmSize or raise memory (shared memory counts against the limit)",
            )


def image_pinned(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `runtime.image` not pinned by digest (a moving tag can put different bits in
    the pods of one run, or of its retries).
    """
    image = exp.spec.runtime.image
    if image is not None and not DIGEST_PINNED.match(image):
        yield warn(
            "spec.runtime.image",
            f"{image} is not pinned by digest",
            "use <image>:<tag>@sha256:<digest>",
        )


def eval_sets(exp: RLExperiment) -> Iterator[Finding]:
    """Eval set names are unique, and none takes a key slime's eval logging writes for
    something else: `step` (its reward would be overwritten by the step number) or
    `<another set>-truncated_ratio` (it would overwrite that set's truncated ratio)."""
    names = [e.name for e in exp.spec.data.eval]
    for i, name in repeats(names):
        yield err(f"spec.data.eval[{i}].name", f"duplicate eval set {name!r}", "rename it")
    for i, name in enumerate(names):
        if name == SLIME_EVAL_STEP_NAME:
            yield err(
                f"spec.data.eval[{i}].name",
                "an eval set named 'step' is logged as slime's eval/step, which slime then sets "
                "to the rollout step: the set's reward never reaches W&B",
                "rename it",
            )
        base = name.removesuffix(SLIME_EVAL_TRUNCATED_SUFFIX)
        if base != name and base in names:
            yield err(
                f"spec.data.eval[{i}].name",
                f"slime logs the reward of {name!r} under the key of eval set {base!r}'s "
                "truncated ratio (eval/<name>-truncated_ratio); one overwrites the other",
                "rename it",
            )


def final_eval(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: eval sets, and `data.evalInterval` does not divide `grpo.numRollouts`: slime
    evaluates after every `evalInterval`-th rollout and at the end of each pass over the data,
    but never forces an eval after the last rollout as it forces a checkpoint save, so the
    final weights may go unevaluated."""
    # train.py calls should_run_periodic_action without num_rollout for the eval only, at
    # both supported slime commits, e.g.
    # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/train.py
    data, rollouts = exp.spec.data, exp.spec.grpo.num_rollouts
    if data.eval and rollouts % data.eval_interval:
        last = rollouts // data.eval_interval * data.eval_interval
        after = f"after rollout {last}" if last else "only before training (rollout 0)"
        yield warn(
            "spec.data.evalInterval",
            f"evalInterval {data.eval_interval} does not divide grpo.numRollouts {rollouts}: "
            f"slime evaluates {after} and at the end of each pass over the data, never after "
            "the last rollout, so the final weights may go unevaluated",
            f"set numRollouts to a multiple of evalInterval (e.g. {last + data.eval_interval})"
            " or evalInterval to a divisor of numRollouts",
        )


def checkpoint_saves(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `checkpoint.path` without `checkpoint.saveInterval` (nor `--save-interval` in
    `runtime.extraArgs`): slime saves a checkpoint every `saveInterval` rollouts and after the
    last one, and without the interval never, so the trained weights are not saved and a
    retry or a resume starts over from the model. An error: `--save-interval` in
    `runtime.extraArgs` without `checkpoint.path`, which slime stops on at start."""
    # train.py saves when should_run_periodic_action(rollout_id, args.save_interval, ...) holds,
    # and that is False for every rollout when the interval is None, the last one included
    # (slime/utils/misc.py at both supported commits, e.g.
    # https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/utils/misc.py).
    ckpt, rollouts = exp.spec.checkpoint, exp.spec.grpo.num_rollouts
    given = slime_flags.last_index(exp.spec.runtime.extra_args, slime_flags.SAVE_INTERVAL_FLAG)
    if given is not None and ckpt.path is None:
        yield err(
            f"spec.runtime.extraArgs[{given}]",
            slime_flags.SAVE_INTERVAL_WITHOUT_PATH,
            slime_flags.SAVE_INTERVAL_FIX,
        )
    if ckpt.path is not None and ckpt.save_interval is None and given is None:
        yield warn(
            "spec.checkpoint.saveInterval",
            f"unset while checkpoint.path is set: slime saves no checkpoint at all (it saves "
            "every saveInterval rollouts and after the last one, and never without the "
            f"interval), so the trained weights are not saved to {ckpt.path}, and a retry "
            "(backoffLimit) or a resume starts over from the model",
            "set saveInterval, the rollouts between checkpoints: a retry redoes fewer than "
            f"that many (grpo.numRollouts, {rollouts}, saves the final weights)",
        )


def retries_resume(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `backoffLimit` asks for retries that have nothing to resume: no
    `checkpoint.path`, or a save interval (`checkpoint.saveInterval`, or `--save-interval` in
    `runtime.extraArgs`, which comes after it and wins) of at least `grpo.numRollouts` (slime
    then saves only after the last rollout). Each retry starts over from the model at rollout
    0 and trains again every rollout the failed attempt had done, on the same GPUs' time. A
    run of one rollout has nothing before its last to resume."""
    spec = exp.spec
    ckpt, rollouts = spec.checkpoint, spec.grpo.num_rollouts
    if spec.backoff_limit == 0 or rollouts <= 1:
        return
    given = slime_flags.last_index(spec.runtime.extra_args, slime_flags.SAVE_INTERVAL_FLAG)
    if ckpt.path is None:
        if given is not None:
            return  # checkpoint_saves refuses --save-interval without a path
        yield warn(
            "spec.backoffLimit",
            f"{spec.backoff_limit} retries, and no checkpoint.path: slime saves nothing, so each "
            "retry starts over from the model at rollout 0 and trains again every rollout the "
            "failed attempt did",
            "set checkpoint.path on a shared PersistentVolumeClaim and checkpoint.saveInterval "
            "(a retry then goes on from the last save), or set backoffLimit: 0",
        )
        return
    path, interval, name = "spec.checkpoint.saveInterval", ckpt.save_interval, "saveInterval"
    if given is not None:
        path, name = f"spec.runtime.extraArgs[{given}]", slime_flags.SAVE_INTERVAL_FLAG
        interval = slime_flags.save_interval(spec.runtime.extra_args)
    # should_run_periodic_action: (rollout_id + 1) % interval == 0, or the last rollout.
    if interval is not None and interval >= rollouts:
        yield warn(
            path,
            f"{name} {interval} is not below grpo.numRollouts ({rollouts}): slime saves only "
            f"after the last rollout, so each of the {spec.backoff_limit} retries "
            "(backoffLimit) starts over from the model at rollout 0",
            f"set {name} below {rollouts}: a retry then goes on from the last save",
        )
    # A path without any interval is checkpoint_saves' warning, which names the retry too.


def start_taken_over(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `--finetune` in `runtime.extraArgs` while `checkpoint.resume` would resume:
    agentrl then leaves the start of every attempt to the flags, and `--finetune` makes each
    one (a backoffLimit retry, a resume) start from iteration 0 and save over the run's
    checkpoints. `--load` alone starts the first run; a restart still loads the run's own
    saves (`agentrl.slimecmd.compose`)."""
    extra, ckpt = exp.spec.runtime.extra_args, exp.spec.checkpoint
    finetune = [i for i, a in enumerate(extra) if slime_flags.option_name(a) == "--finetune"]
    if finetune and ckpt.path is not None and ckpt.resume:
        yield warn(
            f"spec.runtime.extraArgs[{finetune[-1]}]",
            "--finetune takes the start of every attempt over: a retry (backoffLimit) or a "
            f"resume starts from iteration 0 again and saves over the checkpoints in "
            f"{ckpt.path}, not resuming them",
            "remove it: agentrl starts a first run as a fine-tune of the model itself and "
            "resumes the run's own checkpoints on a restart",
        )


def start_rollout_fixed(exp: RLExperiment) -> Iterator[Finding]:
    """`--start-rollout-id` in `runtime.extraArgs` while `checkpoint.resume` would resume:
    slime takes the rollout to go on from from the checkpoint only when the flag is unset, so
    every restart would train again from that rollout and save over the run's checkpoints."""
    ckpt = exp.spec.checkpoint
    i = slime_flags.fixed_start_rollout(exp.spec.runtime.extra_args)
    if i is not None and ckpt.path is not None and ckpt.resume:
        yield err(
            f"spec.runtime.extraArgs[{i}]",
            f"{slime_flags.START_ROLLOUT_FLAG} with checkpoint.resume: "
            f"{slime_flags.START_ROLLOUT_WHY} in {ckpt.path}",
            slime_flags.START_ROLLOUT_FIX,
        )


def gateway_service(exp: RLExperiment) -> Iterator[Finding]:
    """The gateway port is free on the head pod; source ranges only with a LoadBalancer, and valid
    CIDRs.
    """
    gw = exp.spec.gateway
    if gw.port in RAY_PORT_NUMBERS or gw.port == METRICS_PORT:
        yield err(
            "spec.gateway.port",
            f"port {gw.port} is taken by Ray or agentrl's metrics on the head pod",
            "pick another port",
        )
    svc = gw.service
    if svc.type != "LoadBalancer" and svc.load_balancer_source_ranges:
        yield err(
            "spec.gateway.service.loadBalancerSourceRanges",
            "only used by a LoadBalancer service",
            "set service.type: LoadBalancer or remove it",
        )
    for i, cidr in enumerate(svc.load_balancer_source_ranges):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            yield err(
                f"spec.gateway.service.loadBalancerSourceRanges[{i}]",
                f"{cidr!r} is not a CIDR",
                "e.g. 10.0.0.0/8",
            )


def env_vars(exp: RLExperiment) -> Iterator[Finding]:
    """Env names are unique, not ones agentrl sets (CUDA_HOME, LD_LIBRARY_PATH, PYTHONPATH,
    AGENTRL_CONFIG, AGENTRL_POD_NAME, AGENTRL_NODE_NAME, secret env), and not ones KubeRay
    refuses in the head pod (RAY_REDIS_ADDRESS, REDIS_USERNAME, RAY_enable_autoscaler_v2=1).
    """
    for i, name in repeats([e.name for e in exp.spec.runtime.env]):
        yield err(f"spec.runtime.env[{i}].name", f"{name} is set twice", "keep one")
    for i, env in enumerate(exp.spec.runtime.env):
        path = f"spec.runtime.env[{i}].name"
        if env.name in RESERVED_ENV or env.name.startswith(ENV_HTTP_HEADER_PREFIX):
            yield err(path, f"{env.name} is set by agentrl", _reserved_env_hint(env.name))
        elif env.name == ENV_WANDB_API_KEY and exp.spec.tracking.wandb is not None:
            yield err(path, f"{env.name} comes from tracking.wandb.apiKeySecret", "remove it")
        elif env.name in KUBERAY_REFUSED_ENV:
            values, hint = KUBERAY_REFUSED_ENV[env.name]
            if values is None or env.value in values:
                shown = env.name if values is None else f"{env.name}={env.value}"
                yield err(path, f"KubeRay refuses {shown} in the head pod (the RayJob would "
                          "be ValidationFailed and no cluster created)", hint)  # fmt: skip


def looks_secret(name: str) -> bool:
    """An env var name that usually carries a secret (`*_KEY`, `*TOKEN`, `*SECRET*`...)."""
    words = name.upper().split("_")
    return words[-1] == "KEY" or any(w in _SECRET_WORDS or w.endswith("TOKEN") for w in words)


def credential_in_value(value: str) -> str | None:
    """What kind of credential a plain-text value is, whatever its variable is called (an
    Authorization value, a known API token prefix, a URL with a password), or None. Its
    `$(NAME)` references are not part of it: `postgres://rl:$(DB_PASSWORD)@db/runs` or
    `Bearer $(API_TOKEN)` take the credential from another variable (a Secret's)."""
    text = _ENV_REFERENCE.sub("", value).strip()
    for pattern, kind in _CREDENTIAL_VALUES:
        if pattern.match(text):
            return kind
    basic = _BASIC.match(text)
    if basic is not None and _basic_credentials(basic.group(1)):
        return _AUTHORIZATION
    if "://" in text:
        try:
            if urlsplit(text).password:
                return "a URL with a password in it"
        except ValueError:  # an unparsable URL (a bad port) is judged elsewhere or not at all
            return None
    return None


def _basic_credentials(token: str) -> bool:
    """Whether a Basic Authorization token is base64 of `user:password`."""
    try:
        return b":" in base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        return False


def secrets_in_plain_text(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: an env var whose name looks like a secret, or whose value is one whatever the
    name (`Bearer ...`, an `hf_`/`sk-`/`ghp_` token, a URL with a password), has a plain-text
    `value` (it would sit in the RayJob, readable by anyone who may read RayJobs);
    `valueFrom.secretKeyRef` keeps it in a Secret. A `$(NAME)` reference to another variable
    (one from a Secret) is not a secret in plain text: `postgres://rl:$(DB_PASSWORD)@db/runs`,
    `Bearer $(API_TOKEN)`; nor is the value of a secret-looking name that is a file's path
    (`GOOGLE_APPLICATION_CREDENTIALS`, `HF_TOKEN_PATH` to a mounted Secret), a switch or a
    count (`HF_HUB_DISABLE_IMPLICIT_TOKEN: "1"`). The same for a slime flag in `extraArgs`
    that takes a key or a password (not the ones that name a key of the data rows, such as
    `--input-key` or `--label-key`).
    """
    for i, env in enumerate(exp.spec.runtime.env):
        if env.value is None or env.value == "":
            continue
        kind = credential_in_value(env.value)
        # `HF_TOKEN: $(HUGGING_FACE_HUB_TOKEN)` names a secret and holds only a reference to it.
        named = (
            looks_secret(env.name)
            and _ENV_REFERENCE.search(env.value) is None
            and not _NOT_A_SECRET.match(env.value.strip())
        )
        if named or kind is not None:
            what = "looks like a secret" if kind is None else f"holds {kind}"
            yield warn(
                f"spec.runtime.env[{i}].value",
                f"{env.name} {what} but its value is plain text in the spec",
                "use valueFrom.secretKeyRef (a Secret key) instead of value",
            )
    args = exp.spec.runtime.extra_args
    for i, arg in enumerate(args):
        flag = slime_flags.option_name(arg)
        if flag is not None and _flag_takes_secret(
            flag, "=" in arg, args[i + 1] if i + 1 < len(args) else None
        ):
            yield warn(
                f"spec.runtime.extraArgs[{i}]",
                f"{flag} takes a secret; extraArgs are stored in plain text in the runtime-config "
                "ConfigMap",
                "pass secrets as env from a Secret (runtime.env[].valueFrom; W&B: "
                "tracking.wandb.apiKeySecret)",
            )


def _flag_takes_secret(flag: str, has_value: bool, following: str | None) -> bool:
    """A slime flag named for what it carries (`--wandb-key`, `--sglang-api-key`, `--hf-token`)
    and given a value: its last word says so, where an env var's may be any word. slime's own
    `--rollout-stop-token-ids`, `--calculate-per-token-loss` or the switch `--rl-skip-bos-token`
    carry token ids, a mode or nothing; `--input-key` and the like name a key of the data rows."""
    if flag in slime_flags.DATA_KEY_FLAGS:
        return False
    if not has_value and (following is None or following.startswith("--")):
        return False  # a switch: nothing to keep secret
    last = flag[2:].upper().replace("-", "_").split("_")[-1]
    return last == "KEY" or last in _SECRET_WORDS or last.endswith("TOKEN")


def _reserved_env_hint(name: str) -> str:
    if name == "CUDA_HOME":
        return "set runtime.cudaHome instead"
    if name == "PYTHONPATH":
        return "put your modules in runtime.extraCode instead"
    if name == "NVIDIA_VISIBLE_DEVICES":
        return "remove it: the device plugin sets it on GPU workers, agentrl hides GPUs on the head"
    return "remove it"


def preflight(exp: RLExperiment) -> Iterator[Finding]:
    """Warning: `runtime.preflight.minBusBandwidthGBps` or `onLowBandwidth: fail` set where
    nothing uses them (`gang: false`, or `fail` without a minimum to compare with)."""
    pre = exp.spec.runtime.preflight
    path = "spec.runtime.preflight"
    if not pre.gang and pre.min_bus_bandwidth_gbps is not None:
        yield warn(
            f"{path}.minBusBandwidthGBps",
            "is ignored: gang is false, so no all-reduce measures the bandwidth",
            "set gang: true, or remove minBusBandwidthGBps",
        )
    elif pre.on_low_bandwidth == "fail" and pre.min_bus_bandwidth_gbps is None:
        yield warn(
            f"{path}.onLowBandwidth",
            "fail has no effect without minBusBandwidthGBps (the bandwidth is only reported)",
            "set minBusBandwidthGBps (docs/launcher.md lists typical figures)",
        )


def extra_code(exp: RLExperiment) -> Iterator[Finding]:
    """Each extraCode ConfigMap is listed once."""
    for i, name in repeats([c.config_map for c in exp.spec.runtime.extra_code]):
        yield err(f"spec.runtime.extraCode[{i}].configMap", f"{name!r} listed twice", "keep one")


def extra_resources(exp: RLExperiment) -> Iterator[Finding]:
    """`gpuResourceName` and `extraResources` are device-plugin resources (`nvidia.com/gpu`,
    `vpc.amazonaws.com/efa`): never cpu, memory or a kubernetes.io name, which would overwrite
    the pod's own limits; extraResources never repeat the GPU resource.
    """
    res = exp.spec.resources
    if _native(res.gpu_resource_name):
        yield err(
            f"spec.{R}.gpuResourceName",
            f"{res.gpu_resource_name!r} is a Kubernetes resource, not a device plugin's",
            "e.g. nvidia.com/gpu or amd.com/gpu",
        )
    for name in res.extra_resources:
        path = f"spec.{R}.extraResources"
        if name == res.gpu_resource_name:
            yield err(path, f"{name} is the GPU resource", "GPUs come from gpusPerNode")
        elif not _EXTENDED.match(name) or len(name) > 253 or _native(name):
            fmt = FORMATS[EXTENDED_RESOURCE]
            yield err(join(path, name), f"{name!r} is {fmt.message}", "e.g. vpc.amazonaws.com/efa")


def _native(resource: str) -> bool:
    """In Kubernetes' own domain: no device plugin advertises it (core/v1 validation)."""
    domain = resource.split("/", 1)[0]
    return domain == "kubernetes.io" or domain.endswith(".kubernetes.io")


def children_fit(exp: RLExperiment) -> Iterator[Finding]:
    """The objects agentrl creates fit Kubernetes' limits: the runtime-config ConfigMap holds
    at most 1 MiB (the spec, extraArgs included), the RayJob at most 1.5 MiB (env, volumes
    and placement are copied into two pod templates).
    """
    require_parsed(exp)
    spec = exp.spec
    # Neither child copies more than three times the spec; most specs are a few KiB, so
    # one serialization settles it.
    compact = len(spec.model_dump_json(by_alias=True, exclude_none=True))
    if 3 * compact + CONFIG_HEADROOM + RAYJOB_BASE_BYTES < CONFIGMAP_MAX_BYTES:
        return
    config = RuntimeConfig(
        experiment=exp.metadata.name,
        namespace=exp.metadata.namespace,
        bundle_version="0",
        spec=config_spec(spec),
        gateway_url="",
        runtime_secret_envs=runtime_secret_env_names(spec),
    )
    size = len(config.to_json().encode()) + CONFIG_HEADROOM
    if size > CONFIGMAP_MAX_BYTES:
        parts = {f"spec.{k}": v for k, v in _sizes(config_spec(spec).dump(), depth=2).items()}
        yield err(
            max(parts, key=lambda p: parts[p]),
            f"the runtime-config ConfigMap would hold about {size // 1024} KiB; Kubernetes "
            f"allows {CONFIGMAP_MAX_BYTES // 1024} KiB",
            "shorten this field (large data belongs on a volume)",
        )
    rt, res = spec.runtime.dump(), spec.resources.dump()
    copied = {
        "spec.runtime.env": 2 * _json_size(rt.get("env", [])),
        "spec.runtime.volumes": 3 * _json_size(rt.get("volumes", [])),
        "spec.runtime.volumeMounts": 2 * _json_size(rt.get("volumeMounts", [])),
        "spec.resources.affinity": _json_size(res.get("affinity", {})),
        "spec.resources.tolerations": _json_size(res.get("tolerations", [])),
        "spec.resources.head.tolerations": 2 * _json_size(res["head"].get("tolerations", [])),
    }
    total = RAYJOB_BASE_BYTES + sum(copied.values())
    if total > MAX_OBJECT_BYTES:
        yield err(
            max(copied, key=lambda p: copied[p]),
            f"the RayJob would be about {total // 1024} KiB; Kubernetes stores objects up to "
            f"{MAX_OBJECT_BYTES // 1024} KiB",
            "this field is copied into every pod template; shorten it",
        )


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _sizes(tree: dict[str, Any], depth: int, prefix: str = "") -> dict[str, int]:
    """Serialized size of every subtree `depth` levels down ('runtime.extraArgs': 1234)."""
    out: dict[str, int] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        if depth > 1 and isinstance(value, dict) and value:
            out.update(_sizes(value, depth - 1, path))
        else:
            out[path] = _json_size(value)
    return out


ALL_RULES: tuple[Rule, ...] = (
    one_agent_backend,
    agentcore_region_matches_arn,
    pool_covers_concurrency,
    agents_reach_gateway,
    agent_urls_not_loopback,
    agent_headers_encrypted,
    renderer_for_local_model,
    trainer_weights_on_disk,
    parallelism_divides,
    rollout_placement,
    engines_fit,
    batches_divide,
    grpo_groups,
    dynamic_sampling,
    slime_flags_in_extra_args,
    pod_sizes,
    shm_fits_memory,
    image_pinned,
    eval_sets,
    final_eval,
    checkpoint_saves,
    retries_resume,
    start_taken_over,
    start_rollout_fixed,
    gateway_service,
    env_vars,
    preflight,
    extra_code,
    extra_resources,
    secrets_in_plain_text,
    children_fit,
)
