"""What the operator's own configuration contributes to every rendered experiment.

The operator (from its Helm values) and the CLI (from flags and env) build one
`OperatorDefaults`; the renderer never reads the environment itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl import __version__
from agentrl.api.constants import IMAGE_MEGATRON_DIR
from agentrl.api.images import is_digest_pinned

# The Ray pod image of this agentrl release (images/slime/Dockerfile: slime + SGLang +
# Megatron on CUDA), `<image>:<tag>@sha256:<digest>` so every pod of every retry runs the
# same bits. None until a release publishes one: the release workflow
# (.github/workflows/release.yaml, through hack/pin-images.py) writes the pushed image's
# digest on this line and into the chart's values. Until then every experiment needs an
# image from somewhere else (spec.runtime.image, AGENTRL_IMAGE, the chart's
# operator.runtimeImage, or agentrl --image), and validation says so, with the fix.
DEFAULT_IMAGE: str | None = None
# Python paths the slime image puts on PYTHONPATH itself (Megatron-LM is not pip-installed
# there); the renderer sets PYTHONPATH, so it must carry them on after agentrl's own code.
DEFAULT_IMAGE_PYTHONPATH = (IMAGE_MEGATRON_DIR,)


@dataclass(frozen=True)
class OperatorDefaults:
    """Operator-wide settings; `spec.runtime` overrides the image per experiment."""

    image: str | None = DEFAULT_IMAGE  # None: every spec must set spec.runtime.image
    bundle_version: str = __version__
    image_pythonpath: tuple[str, ...] = DEFAULT_IMAGE_PYTHONPATH
    ray_version: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    # Extra labels on every child (e.g. a team or cost-centre label from the chart).
    extra_labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.image == "":
            raise ValueError("OperatorDefaults.image must not be empty (None: no default)")
        if not self.bundle_version:
            raise ValueError("OperatorDefaults.bundle_version must not be empty")


__all__ = ["DEFAULT_IMAGE", "DEFAULT_IMAGE_PYTHONPATH", "OperatorDefaults", "is_digest_pinned"]
