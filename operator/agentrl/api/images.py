"""Which image the Ray pods of an experiment run, judged with what the caller knows.

`spec.runtime.image` is optional: the operator (from its chart value `operator.runtimeImage`,
or the default built into a released agentrl) or the CLI (`--image`) fills it in. agentrl
ships no built-in default until a release publishes its Ray pod image, so a spec without an
image may have nothing to run; the check lives here so `agentrl validate`, `agentrl render`
and the operator's condition say so in the same words, with the fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agentrl.api.findings import Finding, Severity
from agentrl.api.models import RLExperiment
from agentrl.api.rules import DIGEST_PINNED

PATH = "spec.runtime.image"
HOW_TO_SET = (
    "build images/slime/Dockerfile as images/README.md says, push it, and set "
    "spec.runtime.image: <image>:<tag>@sha256:<digest>; or give the operator that default: "
    "the chart's operator.runtimeImage, AGENTRL_IMAGE, or agentrl --image"
)


@dataclass(frozen=True)
class DefaultImage:
    """The image the caller puts in the pods of a spec that sets none.

    `image` None: no default is configured. `missing` is how loud that is when the spec
    sets no image either: the operator knows its own configuration (an error: nothing would
    be created), `agentrl validate` does not know the operator's (a warning).
    """

    image: str | None
    missing: Severity = "error"


def is_digest_pinned(image: str) -> bool:
    return bool(DIGEST_PINNED.match(image))


def image_findings(exp: RLExperiment, default: DefaultImage) -> Iterator[Finding]:
    """The spec names an image, or the default does (pinned by digest, or a warning)."""
    if exp.spec.runtime.image:
        return  # its pinning is `rules.image_pinned`'s
    if default.image is None:
        yield (
            PATH,
            "not set, and there is no default Ray pod image: none is configured, and no "
            "agentrl release has published one yet",
            HOW_TO_SET,
            default.missing,
        )
    elif not is_digest_pinned(default.image):
        yield (
            PATH,
            f"not set; the default image {default.image} is not pinned by digest",
            "pin the default as <image>:<tag>@sha256:<digest>, or set spec.runtime.image",
            "warning",
        )
