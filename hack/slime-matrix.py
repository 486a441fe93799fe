#!/usr/bin/env python3
"""Derive the Ray pod image's version matrix from slime's own docker/ files.

agentrl's Ray pod image (images/slime/Dockerfile) is built FROM one of slime's release images.
What each of those images contains is decided by three files in slime's repository, at the
commit that published it: `docker/version.txt` (the tag's version), `docker/justfile` (the
release recipes: tag suffix and build arguments of each image) and `docker/Dockerfile` (what
is installed, branching on the CUDA major of the SGLang base). This script reads them and
writes the matrix table of images/README.md, so every version there is traceable to slime's
files and cannot drift from them; tests/images runs it with `--check` on the slime snapshots.

    hack/slime-matrix.py SLIME_CHECKOUT...            # print the table
    hack/slime-matrix.py --write SLIME_CHECKOUT...    # rewrite images/README.md's table
    hack/slime-matrix.py --check SLIME_CHECKOUT...    # exit 1 when the README's table differs

Each SLIME_CHECKOUT is a slime working tree (or a snapshot holding `docker/` and a `COMMIT`
file). Only the x86-64 images are listed; slime's arm64 recipes are reported on stderr.
Anything in the Dockerfile this script cannot read unambiguously (a component installed twice,
a condition it cannot evaluate around a component) is an error, not a guess.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "images" / "README.md"
BEGIN = "<!-- slime-matrix:begin -->"
END = "<!-- slime-matrix:end -->"
UPSTREAM = "https://github.com/THUDM/slime/tree/{commit}/docker"
# `$(python -c '... torch.version.cuda ...')`: the CUDA major of the base's torch.
TORCH_CUDA = re.compile(r"\$\(python3? -c '[^']*torch\.version\.cuda[^']*'\)")
IF_LITERAL = re.compile(
    r'if \[ "([^"$]*)" = "([^"$]*)" \]; then (.*?)(?:; else (.*?))?; fi', re.DOTALL
)
CUDA_SUFFIX = re.compile(r"-cu(\d+)(?:-|$)")


class MatrixError(ValueError):
    pass


@dataclass(frozen=True)
class Row:
    """One slime release image and what slime's docker/ files put into it."""

    image: str  # e.g. slimerl/slime:nightly-dev-20260629a
    recipe: str  # the justfile recipe that publishes it
    slime: str  # the slime commit whose docker/ files these are
    cuda: int  # CUDA major of the SGLang base (12 for cu129, 13 for cu130)
    sglang_base: str  # FROM image of slime's Dockerfile
    sglang: str
    megatron: str
    transformer_engine: str
    torch_memory_saver: str
    flash_attn: str
    apex: str
    numpy_scipy: str
    sgl_router: str
    also: str  # further pinned builds (DeepGEMM, DeepEP), or ""


# ---- reading slime's files ----------------------------------------------------------------


def commit_of(checkout: Path) -> str:
    marker = checkout / "COMMIT"
    if marker.is_file():
        return marker.read_text().split()[0]
    out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


def recipes(justfile: str) -> dict[str, list[str]]:
    """Recipe name -> its body lines (just's syntax: a header at column 0, indented body)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in justfile.splitlines():
        header = re.match(r"^([A-Za-z0-9_-]+)\s*:", line)
        if header:
            current = out.setdefault(header.group(1), [])
        elif current is not None and line.startswith((" ", "\t")) and line.strip():
            current.append(line.strip())
    return out


def release_images(justfile: str, version: str) -> list[tuple[str, str, dict[str, str]]]:
    """(recipe, image:tag, build args) of every recipe that runs `just _release-raw`."""
    bodies = recipes(justfile)
    raw = "\n".join(bodies.get("_release-raw", []))
    name = re.search(r"-t (\S+):\$IMAGE_TAG", raw)
    if name is None or "${VERSION}${ARG_TAG_POSTFIX}" not in raw.replace('"', ""):
        raise MatrixError("justfile: _release-raw no longer tags <name>:${VERSION}${POSTFIX}")
    out = []
    for recipe, body in bodies.items():
        for line in body:
            words = shlex.split(line)
            if words[-2:] != ["just", "_release-raw"]:
                continue
            env = dict(w.split("=", 1) for w in words[:-2])
            args: dict[str, str] = {}
            extra = shlex.split(env.get("ARG_BUILD_EXTRA_ARGS", ""))
            for flag, value in zip(extra[::2], extra[1::2], strict=True):
                if flag != "--build-arg":
                    raise MatrixError(f"justfile {recipe}: unexpected {flag}")
                key, _, val = value.partition("=")
                args[key] = val
            out.append((recipe, f"{name.group(1)}:{version}{env.get('ARG_TAG_POSTFIX', '')}", args))
    return out


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, text) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.splitlines():
        if line.lstrip().startswith("#"):
            continue  # also inside a continued instruction, as Docker reads it
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        text = (pending + line.strip()).strip()
        pending = ""
        if text:
            word, _, rest = text.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _substitute(text: str, env: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, match.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


def effective_runs(dockerfile: str, build_args: dict[str, str]) -> tuple[str, dict[str, str]]:
    """What the RUN instructions do for these build args: (FROM image, joined RUN text)."""
    env: dict[str, str] = {}
    base = ""
    runs: list[str] = []
    steps = instructions(dockerfile)
    for word, text in steps:  # ARG defaults, then the build's own arguments
        if word == "ARG":
            key, _, default = text.partition("=")
            env.setdefault(key, build_args.get(key, default))
    for word, text in steps:
        if word == "FROM" and not base:
            base = _substitute(text.split()[0], env)
    cuda = cuda_major(base)
    for word, text in steps:
        if word != "RUN":
            continue
        resolved = _substitute(TORCH_CUDA.sub(str(cuda), text), env)
        runs.append(_select_branches(resolved))
    return base, {"run": "\n".join(runs), **env}


def _select_branches(text: str) -> str:
    def pick(match: re.Match[str]) -> str:
        left, right, then, other = match.groups()
        return then if left == right else (other or "")

    return IF_LITERAL.sub(pick, text)


def cuda_major(image: str) -> int:
    found = CUDA_SUFFIX.search(image)
    if found is None:
        raise MatrixError(f"cannot tell the CUDA major of {image}")
    digits = found.group(1)  # "129" (12.9), "130" (13.0) or a bare major ("13")
    return int(digits[:-1]) if len(digits) >= 3 else int(digits)


# ---- components ------------------------------------------------------------------------


def _one(pattern: str, run: str, what: str, optional: bool = False) -> re.Match[str] | None:
    found = list(re.finditer(pattern, run, re.DOTALL))
    if len(found) > 1:
        raise MatrixError(f"{what} is installed {len(found)} times")
    if not found and not optional:
        raise MatrixError(f"{what} is not installed (or no longer recognised)")
    return found[0] if found else None


def _short(commit: str) -> str:
    return commit[:8] if re.fullmatch(r"[0-9a-f]{12,40}", commit) else commit


def row_for(recipe: str, image: str, args: dict[str, str], docker: Path, commit: str) -> Row:
    base, env = effective_runs((docker / "Dockerfile").read_text(), args)
    run = env["run"]
    for unresolved in re.findall(r'if \[ "[^"]*\$[^"]*" = ', run):
        raise MatrixError(f"cannot evaluate {unresolved!r}")
    sglang_tag = base.rpartition(":")[2]
    version = re.match(r"v?(\d+\.\d+\.\d+(?:\.post\d+)?)", sglang_tag)
    wheel = _one(r"transformer_engine\[pytorch\]==([\w.]+)", run, "TE wheel", optional=True)
    source = _one(r"TransformerEngine\.git@([\w.-]+)", run, "TE source", optional=True)
    if (wheel is None) == (source is None):
        raise MatrixError("TransformerEngine: expected exactly one of the wheel or a source build")
    te = f"{wheel.group(1)} (wheel)" if wheel else f"`{_short(source.group(1))}` (source)"  # type: ignore[union-attr]
    tms = _one(r"github\.com/(\w+)/torch_memory_saver\.git@(\w+)", run, "torch_memory_saver")
    fa2 = _one(r"flash-attn==([\w.]+)", run, "flash-attn", optional=True)
    fa3 = _one(r"flash-attention\.git.*?git checkout (\w+).*?cd hopper", run, "FA3", optional=True)
    parts = [fa2.group(1)] if fa2 else []
    if fa3:
        parts.append(f"FA3 `{_short(fa3.group(1))}`")
    flash = " + ".join(parts) or "the SGLang base's"
    apex = _one(r"apex\.git@(\w+)", run, "apex")
    numpy = _one(r"numpy([<>=]=?[\d.]+)", run, "numpy")
    scipy = _one(r"scipy==([\d.]+)", run, "scipy", optional=True)
    router = _one(r"sgl-router/releases/download/v([\w.-]+)/", run, "sgl-router")
    also = []
    for name in ("DeepGEMM", "DeepEP"):
        found = _one(rf"(\w+)/{name}\.git.*?git checkout (\w+)", run, name, optional=True)
        if found:
            also.append(f"{name} `{_short(found.group(2))}` ({found.group(1)})")
    megatron = env.get("MEGATRON_COMMIT", "")
    _one(r"NVIDIA/Megatron-LM\.git.*?git checkout " + re.escape(megatron), run, "Megatron-LM")
    return Row(
        image=image,
        recipe=recipe,
        slime=commit,
        cuda=cuda_major(base),
        sglang_base=base,
        sglang=version.group(1) if version else sglang_tag,
        megatron=_short(megatron),
        transformer_engine=te,
        torch_memory_saver=f"`{_short(tms.group(2))}` ({tms.group(1)})",  # type: ignore[union-attr]
        flash_attn=flash,
        apex=f"`{_short(apex.group(1))}`",  # type: ignore[union-attr]
        numpy_scipy=f"`numpy{numpy.group(1)}`"  # type: ignore[union-attr]
        + (f", `scipy=={scipy.group(1)}`" if scipy else ""),
        sgl_router=f"`{router.group(1)}`",  # type: ignore[union-attr]
        also=", ".join(also),
    )


def rows_of(checkout: Path, warn: bool = True) -> list[Row]:
    docker = checkout / "docker"
    version = (docker / "version.txt").read_text().strip()
    commit = commit_of(checkout)
    out = []
    for recipe, image, args in release_images((docker / "justfile").read_text(), version):
        if "arm64" in image:
            if warn:
                print(f"{commit[:7]}: {image} ({recipe}) is arm64: not listed", file=sys.stderr)
            continue
        out.append(row_for(recipe, image, args, docker, commit))
    return out


# ---- the table ---------------------------------------------------------------------------

HEADER = (
    "| base image (`SLIME_BASE`) | slime `docker/` | CUDA | SGLang (base) | Megatron-LM "
    "| TransformerEngine | torch_memory_saver | flash-attn | apex | NumPy, SciPy | sgl-router "
    "| also pinned |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def table(rows: list[Row]) -> str:
    lines = [HEADER]
    for r in rows:
        slime = f"[`{r.slime[:7]}`]({UPSTREAM.format(commit=r.slime)}) `{r.recipe}`"
        cells = [f"`{r.image}`", slime, str(r.cuda), f"{r.sglang} (`{r.sglang_base}`)",
                 f"`{r.megatron}`", r.transformer_engine, r.torch_memory_saver, r.flash_attn,
                 r.apex, r.numpy_scipy, r.sgl_router, r.also or "-"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def replace_table(text: str, new: str) -> str:
    if BEGIN not in text or END not in text:
        raise MatrixError(f"{README} lacks the {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{new}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path, help="slime checkouts, newest last")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite the table in {README}")
    mode.add_argument("--check", action="store_true", help="exit 1 if the README differs")
    mode.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    try:
        rows = [row for checkout in args.checkouts for row in rows_of(checkout)]
    except MatrixError as err:
        print(f"slime-matrix: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    text = table(rows)
    if not (args.write or args.check):
        sys.stdout.write(text)
        return 0
    current = README.read_text()
    wanted = replace_table(current, text)
    if args.check:
        if wanted != current:
            print(f"{README} is stale: run hack/slime-matrix.py --write", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
