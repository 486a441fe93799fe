"""The launcher's I/O edge: what it learns from the image by running things.

Kept apart from the pure logic (`cuda`, `argcheck`, `agentrl.slimecmd`) so that logic runs
on injected text and temporary trees in tests, while this module is exercised by the
subprocess tests against slime's and Megatron's own source.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import site
import subprocess
import sysconfig
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentrl.bundle.launch import cuda, gang

_CUDART_NEEDED = re.compile(rb"libcudart\.so\.(\d+)")
# Import-heavy (torch, Megatron, SGLang); generous, but a hung import must not hang the job.
PROBE_TIMEOUT_S = 600


class ProbeError(Exception):
    """Something in the image could not be read; the message says what and how to fix it."""


def site_dirs() -> list[str]:
    """Every site-packages this Python imports from, the user site too (pip --user)."""
    dirs = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return list(dict.fromkeys(d for d in dirs if d))


def ldconfig_text() -> str:
    """`ldconfig -p`: the loader cache, which LD_LIBRARY_PATH cannot hide."""
    exe = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if Path(p).exists()), None
    )
    if exe is None:
        return ""
    done = subprocess.run([exe, "-p"], capture_output=True, text=True, check=False, timeout=60)
    return done.stdout


def tms_listing() -> tuple[str | None, dict[str, int | None]]:
    """Where slime looks for torch_memory_saver's preload library, and what is there: each
    file with the libcudart major its dynamic string table names (None if not exactly one)."""
    spec = importlib.util.find_spec("torch_memory_saver")
    if spec is None or spec.origin is None:
        return None, {}
    site_dir = Path(spec.origin).parent.parent
    libs: dict[str, int | None] = {}
    for lib in sorted(site_dir.glob("torch_memory_saver*.so")):
        majors = {int(m) for m in _CUDART_NEEDED.findall(lib.read_bytes())}
        libs[lib.name] = majors.pop() if len(majors) == 1 else None
    return str(site_dir), libs


# Runs in the image's Python with the pinned env: the directories `import slime` would load
# the package from. find_spec on a top-level name runs none of slime's code.
_SLIME_PACKAGE = """
import importlib.util, json
spec = importlib.util.find_spec("slime")
print(json.dumps(list(spec.submodule_search_locations or []) if spec else []))
"""
ACTOR_GROUP = Path("ray") / "actor_group.py"


@dataclass(frozen=True)
class TmsLookup:
    """How the image's slime looks for torch_memory_saver's preload library."""

    order: tuple[str, ...] | None
    """Name suffixes, first tried first (`cuda.tms_lookup_order`); None: not read."""
    source: str
    """The actor_group.py it was read from, or why none was."""


def tms_lookup(env: Mapping[str, str]) -> TmsLookup:
    """The preload lookup order of the slime `env`'s Python imports: the actor_group.py
    that builds the Megatron actors' LD_PRELOAD, read as text (slime is not imported)."""
    done = subprocess.run(
        ["python3", "-c", _SLIME_PACKAGE],
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
        timeout=PROBE_TIMEOUT_S,
    )
    try:
        dirs = [Path(d) for d in json.loads(done.stdout.splitlines()[-1])]
    except (IndexError, ValueError, TypeError):
        return TmsLookup(None, f"could not locate slime ({done.stderr.strip()[-300:]})")
    files = [d / ACTOR_GROUP for d in dirs if (d / ACTOR_GROUP).is_file()]
    if not files:
        where = ", ".join(map(str, dirs)) or "nowhere: slime is not importable"
        return TmsLookup(None, f"no slime/{ACTOR_GROUP} where slime imports from ({where})")
    try:
        source = files[0].read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return TmsLookup(None, f"cannot read {files[0]}: {e}")
    order = cuda.tms_lookup_order(source)
    if order is None:
        return TmsLookup(None, f"{files[0]} lists no torch_memory_saver preload library order")
    return TmsLookup(order, str(files[0]))


def model_args(slime_dir: str, model_type: str) -> list[str]:
    """MODEL_ARGS from slime's scripts/models/<type>.sh, read through bash (it is a bash array)."""
    models = Path(slime_dir) / "scripts" / "models"
    script = models / f"{model_type}.sh"
    if not script.is_file():
        known = sorted(p.stem for p in models.glob("*.sh")) if models.is_dir() else []
        hint = (
            f"; known types: {', '.join(known)}"
            if known
            else f"; is spec.runtime.slimeDir ({slime_dir}) right?"
        )
        raise ProbeError(f"spec.model.type: no slime model script {script}{hint}")
    cmd = 'set -e; source "$1"; printf "%s\\0" "${MODEL_ARGS[@]}"'
    done = subprocess.run(
        ["bash", "-c", cmd, "bash", str(script)], capture_output=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise ProbeError(
            f"sourcing {script} failed: {done.stderr.decode(errors='replace').strip()[-500:]}"
        )
    items = [x.decode() for x in done.stdout.split(b"\0") if x]
    if not items:
        raise ProbeError(f"{script} does not define the bash array MODEL_ARGS")
    return items


# Runs in the image's Python with the pinned env: builds the same parser slime's
# parse_args builds (Megatron's arguments, then slime's, then SGLang's --sglang-* copies)
# and writes its option strings to the file named by argv[1]. It also counts the CUDA
# devices torch sees in this env (importing Megatron's arguments has imported torch), which
# is what Megatron's validate_args will query in slime's driver. Given Hugging Face trainer
# weights (argv[2]) and a slime without Megatron-Bridge (no --megatron-to-hf-mode), it also
# asks slime's own HF loader whether it takes them (it loads per model type).
_SLIME_PARSER = """
import argparse, importlib.util, json, sys
out, weights = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
if importlib.util.find_spec("slime") is None:
    json.dump({"slime": False}, open(out, "w")); sys.exit(0)
import megatron.training.arguments as margs
from slime.utils.arguments import get_slime_extra_args_provider
from slime.backends.sglang_utils.arguments import add_sglang_arguments
p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, conflict_handler="resolve")
p = margs.add_megatron_arguments(p) or p
get_slime_extra_args_provider()(p)
add_sglang_arguments(p)
result = {"slime": True, "flags": sorted(p._option_string_actions)}
try:
    import torch
    result["cudaDevices"] = int(torch.cuda.device_count())
except Exception as e:
    result["cudaDevices"], result["cudaError"] = 0, f"{type(e).__name__}: {e}"
if weights and "--megatron-to-hf-mode" not in p._option_string_actions:
    try:
        from slime.backends.megatron_utils.hf_to_megatron import supports_hf_weight_loading
    except ImportError:
        pass
    else:
        result["hfLoadable"] = bool(supports_hf_weight_loading(weights))
json.dump(result, open(out, "w"))
"""


@dataclass(frozen=True)
class SlimeParser:
    """What the image's slime accepts."""

    flags: frozenset[str]
    """Every option string its parser defines."""
    hf_loadable: bool | None = None
    """Whether its own HF loader takes the weights asked about (None: not asked, or no such
    loader)."""
    cuda_devices: int | None = None
    """CUDA devices torch counts in the pinned env: what slime's driver will see."""
    cuda_error: str | None = None
    """Why torch could not count them, when it raised."""


def slime_parser(env: Mapping[str, str], hf_weights: str | None = None) -> SlimeParser | None:
    """slime's parser built in the image's Python, or None when slime is not importable."""
    with tempfile.TemporaryDirectory(prefix="agentrl-flags-") as tmp:
        out = Path(tmp) / "flags.json"
        done = subprocess.run(
            ["python3", "-c", _SLIME_PARSER, str(out), *([hf_weights] if hf_weights else [])],
            env=dict(env),
            capture_output=True,
            text=True,
            check=False,
            timeout=PROBE_TIMEOUT_S,
        )
        if done.returncode != 0 or not out.exists():
            raise ProbeError(
                "could not build slime's argument parser to check the flags (slime, Megatron and "
                f"SGLang must import with the pinned CUDA env):\n{done.stderr.strip()[-1500:]}"
            )
        result = json.loads(out.read_text(encoding="utf-8"))
    if not result.get("slime"):
        return None
    return SlimeParser(
        frozenset(result["flags"]),
        result.get("hfLoadable"),
        result.get("cudaDevices"),
        result.get("cudaError"),
    )


def known_flags(env: Mapping[str, str]) -> frozenset[str] | None:
    """Every option string slime's parser defines, or None when slime is not importable."""
    parser = slime_parser(env)
    return parser.flags if parser else None


def visible_gpus() -> tuple[int | None, str | None]:
    """(GPUs nvidia-smi lists in this pod, warning). None where there is no nvidia-smi, or
    where it cannot reach a driver (a GPU-less pod whose image carries the binary)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    done = subprocess.run(
        [exe, "--list-gpus"], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip()[-200:]
        return None, f"nvidia-smi failed, GPU count not checked: {reason}"
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU ")), None


def gpu_health() -> tuple[list[str], str | None]:
    """(what makes a GPU here unfit, a note when health could not be read fully) from
    nvidia-smi's per-GPU query (`gang.HEALTH_FIELDS`); an nvidia-smi too old for the newer
    fields is asked the base ones only."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [], "nvidia-smi not found: ECC and recovery state not read"
    note = None
    for fields in (gang.HEALTH_FIELDS, gang.BASE_HEALTH_FIELDS):
        done = subprocess.run(
            [exe, *gang.health_query(fields)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return gang.gpu_health_problems(gang.parse_gpu_health(done.stdout, fields)), note
        reason = (done.stderr or done.stdout).strip()[-200:]
        if "not a valid field" not in reason:
            return [], f"nvidia-smi failed, GPU health not read: {reason}"
        note = f"this nvidia-smi reads ECC only ({reason})"
    return [], note
