"""slime's command-line flags that follow from an RLExperiment spec.

The launcher in the pod adds what only the pod can know (MODEL_ARGS from slime's model
script, the resolved CUDA env for --train-env-vars) and appends `runtime.extraArgs` last.
"""

from __future__ import annotations

from agentrl.api.models import RLExperiment

ROLLOUT_FUNCTION = "agentrl.bundle.rollout.generate_rollout"
REWARD_POST_PROCESS = "agentrl.bundle.rewards.post_process_rewards"


def build_slime_args(exp: RLExperiment) -> list[str]:
    """The spec-derived part of slime's argv (placeholder, completed by the launcher work)."""
    spec = exp.spec
    return [
        "--hf-checkpoint", spec.model.path,
        "--prompt-data", spec.data.train,
        "--rollout-function-path", ROLLOUT_FUNCTION,
        "--custom-reward-post-process-path", REWARD_POST_PROCESS,
        "--num-rollout", str(spec.grpo.num_rollouts),
    ]  # fmt: skip
