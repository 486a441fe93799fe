"""The YAML files slime reads at start-up, as documents (pure; the launcher writes them).

- `--custom-config-path`: slime `setattr`s each key onto its `args`. agentrl's own knobs stay
  in the RuntimeConfig (typed, validated, one source of truth); the YAML only points the
  rollout code at it and labels slime's logged args with the experiment.
- `--eval-config`: one entry per eval set with its own sampling settings, for when the sets
  differ (slime's eval flags are global). slime builds each entry as
  `EvalDatasetConfig(**entry)`, so a key its release lacks is a TypeError after the GPUs
  are allocated; only fields every supported release has are written. The row keys are left
  to `--input-key`/`--metadata-key`, which slime applies to every eval set.
"""

from __future__ import annotations

from typing import Any, Final

from agentrl.api.models import RLExperimentSpec
from agentrl.api.runtime import RuntimeConfig

# A directory inside the head container only the launcher writes to.
FILES_DIR: Final = "/tmp/agentrl"
CUSTOM_CONFIG_NAME: Final = "slime-custom-config.yaml"
EVAL_CONFIG_NAME: Final = "slime-eval-config.yaml"


def custom_config(config: RuntimeConfig, config_path: str) -> dict[str, Any]:
    return {
        "agentrl_config_path": config_path,
        "agentrl_experiment": f"{config.namespace}/{config.experiment}",
        "agentrl_bundle_version": config.bundle_version,
    }


def eval_config(spec: RLExperimentSpec) -> dict[str, Any]:
    datasets = []
    for s in spec.data.eval:
        entry: dict[str, Any] = {
            "name": s.name,
            "path": s.path,
            "n_samples_per_eval_prompt": s.samples_per_prompt,
            "temperature": s.temperature,
        }
        if s.max_response_length:
            entry["max_response_len"] = s.max_response_length
        datasets.append(entry)
    return {"eval": {"datasets": datasets}}
