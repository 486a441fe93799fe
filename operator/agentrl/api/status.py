"""The RLExperiment status: what the operator reports back (`kubectl get/describe rlx`).

Every field is declared in the CRD's schema (the status subresource prunes undeclared ones).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentrl.api.base import Model


class Condition(Model):
    type: str
    """Condition type (Valid, RayJobCreated, Running, Stalled, ...)."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str
    """One-word reason."""
    message: str = ""
    """Human-readable detail."""
    observed_generation: int | None = None
    """Generation of the spec this condition describes."""
    last_transition_time: str | None = None
    """When the status last changed (RFC 3339)."""


class RayJobMirror(Model):
    """KubeRay's own words, copied verbatim for debugging."""

    job_status: str | None = None
    """RayJob `status.jobStatus` (Ray's view; may be stale)."""
    job_deployment_status: str | None = None
    """RayJob `status.jobDeploymentStatus` (drives the phase)."""
    reason: str | None = None
    """RayJob `status.reason`."""
    message: str | None = None
    """RayJob `status.message`."""


class Progress(Model):
    rollout: int | None = None
    """Id of the last finished training rollout (slime counts from 0)."""
    total_rollouts: int | None = None
    """`grpo.numRollouts`."""
    rollout_text: str | None = None
    """Rollouts finished of the total, e.g. `12/200` (`kubectl get` shows it)."""
    train_reward: float | None = None
    """Mean reward of the last training rollout."""
    eval_reward: float | None = None
    """Mean reward of the last evaluation (over every eval set)."""
    failed_session_ratio: float | None = None
    """Failed / finished training episodes since the operator's previous progress read."""
    step_seconds: float | None = None
    """Seconds per rollout step, smoothed over the last steps."""
    eta: str | None = None
    """When the last rollout should finish at that pace (RFC 3339)."""
    updated_at: str | None = None
    """When a progress value last changed (RFC 3339)."""


class RLExperimentStatus(Model):
    phase: (
        Literal["Pending", "Initializing", "Running", "Suspended", "Succeeded", "Failed"] | None
    ) = None
    """Pending, Initializing, Running, Suspended, Succeeded or Failed (the last two are final)."""
    conditions: list[Condition] = Field(default_factory=list)
    """Conditions with reasons and messages."""
    observed_generation: int | None = None
    """Spec generation the operator last acted on."""
    ray_job_name: str | None = None
    """Name of the child RayJob."""
    ray_cluster_name: str | None = None
    """Name of the RayCluster KubeRay created (changes on retry)."""
    dashboard_url: str | None = Field(default=None, alias="dashboardURL")
    """Ray dashboard URL."""
    gateway_url: str | None = Field(default=None, alias="gatewayURL")
    """URL agents reach the gateway at."""
    wandb_run_url: str | None = Field(default=None, alias="wandbRunURL")
    """The W&B run of the current attempt, as the run reports it (needs
    `spec.tracking.wandb.team`). Every attempt's run is named `<namespace>/<name>` and logs
    into the group of that name (or `spec.tracking.wandb.group`)."""
    start_time: str | None = None
    """When the run started (RFC 3339)."""
    completion_time: str | None = None
    """When the run finished (RFC 3339)."""
    attempts: int | None = None
    """Runs so far (1 + retries)."""
    ray_job: RayJobMirror | None = None
    """KubeRay's own status fields, verbatim."""
    progress: Progress | None = None
    """Training progress read from the run's metrics."""
