"""`agentrl rehearse`: an experiment's episode path on the user's machine, before any GPU.

The first time a researcher sees their agent, reward, chat template, tool-call parser,
context budget and network path work together should not be on a scheduled GPU gang. A
rehearsal runs the pods' own code for a few prompts against a real SGLang server the user
started (a workstation GPU, or SGLang's CPU backend): the gateway, the agent backend the
spec configures, the rollout's episodes, trace merging and reward post-processing. It
reports every episode (failure reasons as `agentrl_failed_sessions_total` counts them,
plus the rehearsal's own checks, `checks.py`), every group, the network path, and one
episode's tokens up close; docs/rehearse.md walks through it.

The CLI verb (`agentrl.cli`) imports this package only when it runs, so the core install
needs none of the bundle's dependencies; nothing here imports the CLI, render or the
controller.
"""

from __future__ import annotations

from agentrl.bundle.rehearse.options import Options
from agentrl.bundle.rehearse.report import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    RehearsalError,
    Report,
)
from agentrl.bundle.rehearse.run import engine_command, rehearse

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Options",
    "RehearsalError",
    "Report",
    "engine_command",
    "rehearse",
]
