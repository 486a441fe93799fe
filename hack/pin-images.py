#!/usr/bin/env python3
"""Write a release's pushed image digests where agentrl reads its defaults.

The release workflow (.github/workflows/release.yaml) builds and pushes both images, then runs
this with what the registry answered, so a release's defaults are real digests, never made-up
ones. It edits, in place and line by line (comments survive):

- operator/agentrl/render/defaults.py: `DEFAULT_IMAGE` (the Ray pod image the CLI and the
  operator use when `spec.runtime.image` is unset; baked into the operator image);
- charts/agentrl/values.yaml: `image.repository`, `image.tag`, `image.digest` (the operator)
  and `operator.runtimeImage` (the Ray pods' default, so the chart's NOTES know one is set);
- images/slime/Dockerfile: the `SLIME_BASE` default, pinned to the digest the build used.

    hack/pin-images.py --runtime-image REPO:TAG@sha256:D [--operator-image REPO:TAG@sha256:D]
                       [--slime-base IMAGE:TAG@sha256:D] [--root DIR]
    hack/pin-images.py --check-version 1.2.3   # the tag's version is the chart's and the package's

Every reference must be pinned by digest (`<name>[:<tag>]@sha256:<64 hex>`); anything else is
refused before a file is touched.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

PINNED = re.compile(r"^(?P<name>[^@\s:]+(?::\d+)?(?:/[^@\s:]+)*)(?::(?P<tag>[\w][\w.-]{0,127}))?"
                    r"@(?P<digest>sha256:[0-9a-f]{64})$")  # fmt: skip
DEFAULTS = Path("operator/agentrl/render/defaults.py")
VALUES = Path("charts/agentrl/values.yaml")
CHART = Path("charts/agentrl/Chart.yaml")
DOCKERFILE = Path("images/slime/Dockerfile")
INIT = Path("operator/agentrl/__init__.py")
# The assignment in defaults.py: None, a string, or a string too long for one line.
DEFAULT_LINE = r'^DEFAULT_IMAGE: str \| None = (?:None|"[^"\n]*"|\(\n +"[^"\n]*"\n\))$'
LINE_LENGTH = 100  # pyproject.toml's ruff line-length
PYPROJECT = Path("pyproject.toml")


class PinError(ValueError):
    pass


def parse(ref: str, what: str) -> re.Match[str]:
    found = PINNED.match(ref)
    if found is None:
        raise PinError(f"{what} {ref!r} is not pinned: write <image>[:<tag>]@sha256:<64 hex>")
    return found


def replace_once(text: str, pattern: str, new: str, where: Path) -> str:
    out, count = re.subn(pattern, lambda _: new, text, flags=re.MULTILINE)
    if count != 1:
        raise PinError(f"{where}: expected one line matching {pattern!r}, found {count}")
    return out


def set_in_block(text: str, block: str, key: str, value: str, where: Path) -> str:
    """`<block>:` at column 0, then its `  <key>: ...` line (values.yaml's two-space indent)."""
    pattern = rf"(^{block}:\n(?:(?:  .*|)\n)*?)  {key}: .*$"  # only the block's own lines
    out, count = re.subn(
        pattern, lambda m: f"{m.group(1)}  {key}: {quote(value)}", text, count=1, flags=re.M
    )
    if count != 1:
        raise PinError(f"{where}: no {block}.{key} to set")
    return out


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pin(root: Path, runtime: str, operator: str | None, slime_base: str | None) -> list[Path]:
    parse(runtime, "--runtime-image")
    op = parse(operator, "--operator-image") if operator else None
    if slime_base:
        parse(slime_base, "--slime-base")
    changed: list[Path] = []

    path = root / DEFAULTS
    line = f"DEFAULT_IMAGE: str | None = {quote(runtime)}"
    if len(line) > LINE_LENGTH:  # as `ruff format` would write it
        line = f"DEFAULT_IMAGE: str | None = (\n    {quote(runtime)}\n)"
    text = replace_once(path.read_text(), DEFAULT_LINE, line, DEFAULTS)
    path.write_text(text)
    changed.append(DEFAULTS)

    path = root / VALUES
    text = path.read_text()
    text = set_in_block(text, "operator", "runtimeImage", runtime, VALUES)
    if op is not None:
        text = set_in_block(text, "image", "repository", op.group("name"), VALUES)
        text = set_in_block(text, "image", "tag", op.group("tag") or "", VALUES)
        text = set_in_block(text, "image", "digest", op.group("digest"), VALUES)
    values = yaml.safe_load(text)  # what helm will read
    assert values["operator"]["runtimeImage"] == runtime
    if op is not None:
        assert values["image"]["digest"] == op.group("digest")
    path.write_text(text)
    changed.append(VALUES)

    if slime_base:
        path = root / DOCKERFILE
        text = replace_once(path.read_text(), r"^ARG SLIME_BASE=.*$",
                            f"ARG SLIME_BASE={slime_base}", DOCKERFILE)  # fmt: skip
        path.write_text(text)
        changed.append(DOCKERFILE)
    return changed


def check_version(root: Path, version: str) -> None:
    """The release tag's version is the chart's version and appVersion and the package's."""
    chart = yaml.safe_load((root / CHART).read_text())
    package = re.search(r'^version = "([^"]+)"', (root / PYPROJECT).read_text(), re.M)
    init = re.search(r'^__version__ = "([^"]+)"', (root / INIT).read_text(), re.M)
    found = {
        f"{CHART} version": str(chart.get("version")),
        f"{CHART} appVersion": str(chart.get("appVersion")),
        f"{PYPROJECT} version": package.group(1) if package else "<none>",
        f"{INIT} __version__": init.group(1) if init else "<none>",
    }
    wrong = [f"{k} is {v}" for k, v in found.items() if v != version]
    if wrong:
        raise PinError(f"release {version}: " + "; ".join(wrong) + " (bump them, then tag)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--runtime-image", help="the pushed Ray pod image, pinned")
    parser.add_argument("--operator-image", help="the pushed operator image, pinned")
    parser.add_argument("--slime-base", help="the slime base the Ray pod image was built FROM")
    parser.add_argument("--check-version", metavar="VERSION", help="check versions, pin nothing")
    args = parser.parse_args(argv)
    try:
        if args.check_version:
            check_version(args.root, args.check_version.removeprefix("v"))
            return 0
        if not args.runtime_image:
            parser.error("--runtime-image is required")
        for path in pin(args.root, args.runtime_image, args.operator_image, args.slime_base):
            print(f"pinned {path}")
    except PinError as err:
        print(f"pin-images: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
