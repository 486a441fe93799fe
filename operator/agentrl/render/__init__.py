"""Pure builders: a validated RLExperiment plus operator defaults -> Kubernetes objects.

No clock, no environment, no network: the same inputs always give the same objects, which
is what lets the operator compare desired and actual state and the tests pin golden files.
"""

from agentrl.render.bundle import Bundle, collect_bundle_files
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.objects import Children, render_all, runtime_config

__all__ = [
    "Bundle",
    "Children",
    "OperatorDefaults",
    "collect_bundle_files",
    "render_all",
    "runtime_config",
]
