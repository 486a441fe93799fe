"""Pin the job to one CUDA runtime major before slime starts (pure logic).

TransformerEngine and the cuDNN frontend dlopen-probe fixed sonames (`libcudart.so.12`,
`libcudart.so.13`) and abort with "Multiple libcudart libraries found" when two majors are
loadable. They can come from LD_LIBRARY_PATH, from the ldconfig cache (which
LD_LIBRARY_PATH cannot hide) or from `nvidia-*-cu12` wheels beside a CUDA 13 toolkit. This
module builds one LD_LIBRARY_PATH, finds every reachable libcudart and refuses two majors,
and checks which torch_memory_saver preload library slime will pick, by the lookup order
written in the image's own slime. Every function takes the filesystem root, the `ldconfig
-p` text or slime's source as arguments, so tests run on temporary trees;
`agentrl.bundle.launch.probe` supplies the real ones.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Final

# /usr/local/cuda, /usr/local/cuda-12.9, /usr/local/cuda/lib64, ... (any toolkit install).
_CUDA_PATH = re.compile(r"^/usr/local/cuda(-[0-9.]+)?(/|$)")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)(\.[0-9.]*)?$")
# `ldconfig -p` lines: "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12"
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")
TMS_STEM = "torch_memory_saver_hook_mode_preload"
# A preload build's file name: the stem, an optional `_cu<N>`, the stable-ABI suffix.
_TMS_FILE = re.compile(rf"^{TMS_STEM}(_cu\d+)?\.abi3\.so$")
# slime's actor_group.py picks the preload library by file existence, in an order written in
# its source: fa3c990 tries `_cu12` then the unsuffixed build, 624b824 `_cu13` first. The
# launcher reads the order from the image's slime (`tms_lookup_order`); these, the supported
# rows' orders, judge an image only when that source cannot be read, every order at once.
KNOWN_TMS_ORDERS: Final = (("_cu12", ""), ("_cu13", "_cu12", ""))


class CudaError(Exception):
    """The CUDA setup cannot work; the message names the files and the fix."""


@dataclass(frozen=True)
class Cudart:
    major: int
    path: str
    source: str  # "LD_LIBRARY_PATH", "ldconfig cache" or "site-packages wheel"


@dataclass(frozen=True)
class CudaEnv:
    cuda_home: str
    major: int
    ld_library_path: list[str]
    path: list[str]
    cudarts: list[Cudart] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            "CUDA_HOME": self.cuda_home,
            "LD_LIBRARY_PATH": ":".join(self.ld_library_path),
            "PATH": ":".join(self.path),
        }


def _host(root: Path, path: str) -> Path:
    """`path` as seen inside the (possibly temporary) filesystem `root`."""
    return root / PurePosixPath(path).relative_to("/") if path.startswith("/") else root / path


def _split(value: str | None) -> list[str]:
    return [p for p in (value or "").split(":") if p]


def _dedupe(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def nvidia_wheel_lib_dirs(root: Path, site_dirs: Sequence[str]) -> list[str]:
    """`<site>/nvidia/*/lib` (cu12 wheels: nvidia/cublas/lib; cu13: nvidia/cu13/lib)."""
    found: list[str] = []
    for site in site_dirs:
        base = _host(root, site) / "nvidia"
        if base.is_dir():
            found += [
                f"{site}/nvidia/{d.name}/lib"
                for d in sorted(base.iterdir())
                if (d / "lib").is_dir()
            ]
    return _dedupe(found)


def _cudarts_in(root: Path, directory: str, source: str) -> list[Cudart]:
    host = _host(root, directory)
    if not host.is_dir():
        return []
    found = []
    for entry in sorted(host.iterdir()):
        m = _CUDART.match(entry.name)
        if m:
            found.append(Cudart(int(m.group(1)), f"{directory.rstrip('/')}/{entry.name}", source))
    return found


def parse_ldconfig(text: str) -> list[Cudart]:
    """libcudart entries of `ldconfig -p` output (the loader cache the dynamic linker reads)."""
    found = []
    for line in text.splitlines():
        m = _LDCONFIG_LINE.match(line)
        if m:
            soname = _CUDART.match(m.group(1))
            if soname:
                found.append(Cudart(int(soname.group(1)), m.group(3), "ldconfig cache"))
    return found


def toolkit_major(root: Path, cuda_home: str) -> int:
    """The CUDA major of the toolkit at `cuda_home`, from its libcudart soname."""
    home = _host(root, cuda_home)
    if not home.is_dir():
        others = (
            sorted(p.name for p in _host(root, "/usr/local").glob("cuda*"))
            if _host(root, "/usr/local").is_dir()
            else []
        )
        hint = (
            f" (this image has: {', '.join('/usr/local/' + o for o in others)})" if others else ""
        )
        raise CudaError(
            f"CUDA_HOME {cuda_home} does not exist{hint}; set spec.runtime.cudaHome to the CUDA "
            "toolkit of the image"
        )
    majors = {c.major for c in _cudarts_in(root, f"{cuda_home.rstrip('/')}/lib64", "CUDA_HOME")}
    if len(majors) != 1:
        raise CudaError(
            f"{cuda_home}/lib64 holds {'no' if not majors else 'several'} libcudart.so.<major> "
            f"({sorted(majors)}); spec.runtime.cudaHome must point at one CUDA toolkit"
        )
    return majors.pop()


def build_ld_library_path(
    cuda_home: str, wheel_dirs: Sequence[str], ambient: str | None
) -> list[str]:
    """Wheel libraries first, then the one toolkit, then ambient entries minus other CUDA paths."""
    home = cuda_home.rstrip("/")
    kept = [p for p in _split(ambient) if not _CUDA_PATH.match(p) and not p.startswith(home + "/")]
    return _dedupe([*wheel_dirs, f"{home}/lib64", *kept])


def build_path(cuda_home: str, ambient: str | None) -> list[str]:
    home = cuda_home.rstrip("/")
    kept = [p for p in _split(ambient) if not _CUDA_PATH.match(p)]
    return _dedupe([f"{home}/bin", *kept])


def find_cudarts(
    root: Path, ld_dirs: Sequence[str], ldconfig_text: str, site_dirs: Sequence[str]
) -> list[Cudart]:
    """Every libcudart.so.<major> the process could load, with where it comes from."""
    found: list[Cudart] = []
    for d in ld_dirs:
        found += _cudarts_in(root, d, "LD_LIBRARY_PATH")
    found += parse_ldconfig(ldconfig_text)
    for wheel_dir in nvidia_wheel_lib_dirs(root, site_dirs):
        found += _cudarts_in(root, wheel_dir, "site-packages wheel")
    unique: dict[tuple[int, str], Cudart] = {}
    for c in found:
        unique.setdefault((c.major, c.path), c)
    return list(unique.values())


def check_one_major(cudarts: Sequence[Cudart], want: int) -> None:
    """Refuse a second CUDA runtime major, naming every file and the fix."""
    majors = sorted({c.major for c in cudarts})
    if majors in ([], [want]):
        return
    lines = "\n".join(
        f"  libcudart.so.{c.major}: {c.path} ({c.source})"
        for c in sorted(cudarts, key=lambda c: (c.major, c.path))
    )
    raise CudaError(
        f"CUDA runtime majors {majors} are all reachable, but the toolkit is CUDA {want}; "
        "TransformerEngine would abort with 'Multiple libcudart libraries found':\n"
        f"{lines}\n"
        f"Fix the image: uninstall the other major's nvidia-*-cu<N> wheels, and remove its "
        "/etc/ld.so.conf.d/*cuda* entry then run ldconfig (LD_LIBRARY_PATH cannot hide the "
        "ldconfig cache); or set spec.runtime.cudaHome to the toolkit the wheels match."
    )


def resolve_cuda(
    root: Path,
    cuda_home: str,
    site_dirs: Sequence[str],
    ambient_env: dict[str, str],
    ldconfig_text: str,
) -> CudaEnv:
    """The pinned CUDA env for the launcher, slime's driver and the Megatron actors."""
    major = toolkit_major(root, cuda_home)
    wheel_dirs = nvidia_wheel_lib_dirs(root, site_dirs)
    ld = build_ld_library_path(cuda_home, wheel_dirs, ambient_env.get("LD_LIBRARY_PATH"))
    cudarts = find_cudarts(root, ld, ldconfig_text, site_dirs)
    check_one_major(cudarts, major)
    path = build_path(cuda_home, ambient_env.get("PATH"))
    return CudaEnv(cuda_home.rstrip("/"), major, ld, path, cudarts)


def tms_lookup_order(source: str) -> tuple[str, ...] | None:
    """The preload builds slime's `ray/actor_group.py` tries, first to last, by name suffix
    ("_cu13", "_cu12", "" for the unsuffixed build).

    slime lists the file names as literals (`for path in ["..._cu13.abi3.so", ...]`) and
    LD_PRELOADs the first one that exists. None when the source holds no such list, or
    several that disagree: then no order can be trusted.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    orders: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.List | ast.Tuple) or not node.elts:
            continue
        names = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        matches = [_TMS_FILE.match(n) if isinstance(n, str) else None for n in names]
        if all(matches):
            orders.add(tuple(m.group(1) or "" for m in matches if m))
    return orders.pop() if len(orders) == 1 else None


@dataclass(frozen=True)
class TmsChoice:
    path: str | None
    problem: str | None  # set when slime would preload a build for another CUDA major, or none


def _lib_major(suffix: str, libs: Mapping[str, int | None]) -> int | None:
    """The CUDA major a preload build needs: the libcudart it links, else its name suffix."""
    linked = libs[f"{TMS_STEM}{suffix}.abi3.so"]
    if linked is not None:
        return linked
    return int(suffix.removeprefix("_cu")) if suffix else None


def choose_tms(
    site_dir: str | None,
    libs: Mapping[str, int | None],
    major: int,
    orders: Sequence[Sequence[str]],
) -> TmsChoice:
    """The torch_memory_saver preload library slime will LD_PRELOAD into CUDA `major` actors,
    or the problem with it.

    `libs` maps the file names in `site_dir` (where slime looks: the parent of the
    torch_memory_saver package) to the libcudart major each links (None if unknown).
    `orders` holds slime's lookup order (`tms_lookup_order`), or, when it could not be read,
    every order the image's slime might have: then each must pick a build for `major`, and
    the path is the first order's pick.
    """
    if site_dir is None:
        return TmsChoice(
            None, "torch_memory_saver is not installed; colocated training offloads through it"
        )
    present = {m.group(1) or "" for name in libs if (m := _TMS_FILE.match(name))}
    majors = {s: _lib_major(s, libs) for s in present}
    picks: list[str] = []
    for order in orders:
        pick = next((s for s in order if s in majors), None)
        if pick is None:
            tried = ", ".join(f"{TMS_STEM}{s}.abi3.so" for s in order)
            return TmsChoice(
                None,
                f"slime looks for {tried} in {site_dir} and none exists; install "
                f"torch_memory_saver built for CUDA {major}",
            )
        if majors[pick] not in (None, major):
            return TmsChoice(
                None,
                f"slime would LD_PRELOAD {site_dir}/{TMS_STEM}{pick}.abi3.so (built for CUDA "
                f"{majors[pick]}) into CUDA {major} actors; rebuild torch_memory_saver with "
                f"TMS_CUDA_MAJOR={major} and remove that file (images/slime/Dockerfile does)",
            )
        picks.append(pick)
    if not picks:
        raise ValueError("choose_tms needs at least one lookup order")
    return TmsChoice(f"{site_dir}/{TMS_STEM}{picks[0]}.abi3.so", None)
