"""The RLExperiment API: models, defaults, semantic validation and CRD generation."""

from agentrl.api.models import RLExperiment, RLExperimentSpec, RLExperimentStatus
from agentrl.api.runtime import RuntimeConfig

__all__ = ["RLExperiment", "RLExperimentSpec", "RLExperimentStatus", "RuntimeConfig"]
