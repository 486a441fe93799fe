"""What the operator's own configuration contributes to every rendered experiment.

The operator (from its Helm values) and the CLI (from flags and env) build one
`OperatorDefaults`; the renderer never reads the environment itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl import __version__
from agentrl.api.constants import IMAGE_MEGATRON_DIR
from agentrl.api.rules import DIGEST_PINNED

# The Ray pod image of this agentrl release (images/slime/Dockerfile): slime + SGLang +
# Megatron on CUDA, pinned by digest so every pod of every retry runs the same bits. The
# release pipeline writes the digest of the pushed image here and into the chart's values;
# until the first push this digest is a placeholder, so override it (--image, AGENTRL_IMAGE,
# or the chart's runtimeImage) with the digest of the image you built.
DEFAULT_IMAGE = (
    "ghcr.io/agentrl/agentrl-runtime:0.1.0"
    "@sha256:5a3c0f7f0a9a1f1d2b6c7e4d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b"
)
# Python paths the slime image puts on PYTHONPATH itself (Megatron-LM is not pip-installed
# there); the renderer sets PYTHONPATH, so it must carry them on after agentrl's own code.
DEFAULT_IMAGE_PYTHONPATH = (IMAGE_MEGATRON_DIR,)


@dataclass(frozen=True)
class OperatorDefaults:
    """Operator-wide settings; `spec.runtime` overrides the image per experiment."""

    image: str = DEFAULT_IMAGE
    bundle_version: str = __version__
    image_pythonpath: tuple[str, ...] = DEFAULT_IMAGE_PYTHONPATH
    ray_version: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    # Extra labels on every child (e.g. a team or cost-centre label from the chart).
    extra_labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.image:
            raise ValueError("OperatorDefaults.image must not be empty")
        if not self.bundle_version:
            raise ValueError("OperatorDefaults.bundle_version must not be empty")


def is_digest_pinned(image: str) -> bool:
    return bool(DIGEST_PINNED.match(image))
