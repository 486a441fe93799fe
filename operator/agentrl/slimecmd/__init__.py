"""slime's command line: the one place that knows it (pure; imports only `agentrl.api`).

Render's preview (`agentrl render --show-command`) and the launcher in the pod
(`python -m agentrl.bundle.launch`) both call `compose`: the preview with the pod's facts
unknown (shown as placeholders and conditions), the launcher with them filled in. `flags`
holds what follows from the spec alone, `checkpoint` decides first run vs restart, `files`
the YAML documents slime reads, `policy` the slime flags agentrl's rollout cannot honour.
"""

from agentrl.slimecmd.checkpoint import CheckpointDir, Decision, Start, decide
from agentrl.slimecmd.compose import (
    Command,
    Cond,
    Part,
    PodFacts,
    compose,
    file_docs,
    preview,
    train_env_vars,
    wandb_run_name,
)
from agentrl.slimecmd.files import FILES_DIR

__all__ = [
    "FILES_DIR",
    "CheckpointDir",
    "Command",
    "Cond",
    "Decision",
    "Part",
    "PodFacts",
    "Start",
    "compose",
    "decide",
    "file_docs",
    "preview",
    "train_env_vars",
    "wandb_run_name",
]
