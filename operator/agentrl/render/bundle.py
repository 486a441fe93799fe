"""The bundle-code ConfigMap: agentrl's own in-pod sources, shipped next to the GPU image.

A new bundle never needs a new 20 GB image, and a running experiment never changes code under
its feet: the ConfigMap is immutable and carries a hash of its content in its name. The
sources travel as one zip archive (`binaryData`), which Python imports from directly when it
is on PYTHONPATH: half the bytes of the plain sources, and one volume without a per-file
item list, which would otherwise be repeated in every pod template of the RayJob (two thirds
of its size, parsed by KubeRay and every watcher on every update).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from agentrl.api.constants import BUNDLE_ARCHIVE_NAME, CONFIGMAP_MAX_BYTES

# What goes into the bundle: the package marker, the API (config models the bundle parses),
# slime's command line (the launcher composes it) and the bundle itself. Never the operator
# side.
BUNDLE_ROOTS = ("api", "slimecmd", "bundle")
# Bundle code that runs only on a user's machine (`agentrl rehearse`), never in the pods.
LOCAL_ONLY = frozenset({"agentrl/bundle/rehearse"})
# Zip members carry a timestamp; a fixed one keeps the archive a function of the sources.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def collect_bundle_files() -> dict[str, str]:
    """`agentrl/...py` relative path -> source text, read from the installed package."""
    root = resources.files("agentrl")
    files = {"agentrl/__init__.py": root.joinpath("__init__.py").read_text(encoding="utf-8")}
    for sub in BUNDLE_ROOTS:
        _walk(root.joinpath(sub), f"agentrl/{sub}", files)
    return dict(sorted(files.items()))


def _walk(node: Traversable, rel: str, out: dict[str, str]) -> None:
    for child in node.iterdir():
        if child.is_dir():
            path = f"{rel}/{child.name}"
            if child.name != "__pycache__" and path not in LOCAL_ONLY:
                _walk(child, path, out)
        elif child.name.endswith(".py"):
            out[f"{rel}/{child.name}"] = child.read_text(encoding="utf-8")


def content_hash(files: Mapping[str, str]) -> str:
    """sha256 over sorted (path, text) pairs: the same sources always give the same name."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode())
        digest.update(b"\0")
        digest.update(files[path].encode())
        digest.update(b"\0")
    return digest.hexdigest()


def archive(files: Mapping[str, str]) -> bytes:
    """A deterministic zip of the sources: sorted members, fixed times and modes, deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for path in sorted(files):
            if not path.endswith(".py") or path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"bundle file {path!r}: expected a relative .py path")
            member = zipfile.ZipInfo(path, date_time=FIXED_TIME)
            member.compress_type = zipfile.ZIP_DEFLATED
            member.external_attr = 0o644 << 16  # rw-r--r--, whatever the umask was
            zf.writestr(member, files[path].encode(), compresslevel=9)
    return out.getvalue()


@dataclass(frozen=True)
class Bundle:
    """The bundle sources and what every experiment derives from them, computed once: the
    ConfigMap's `binaryData` and the content hash naming it. An operator renders thousands
    of experiments from one unchanging set of sources."""

    files: Mapping[str, str]
    binary_data: Mapping[str, str]  # {BUNDLE_ARCHIVE_NAME: base64 of the zip}
    digest: str

    @classmethod
    def of(cls, files: Mapping[str, str]) -> Bundle:
        encoded = base64.b64encode(archive(files)).decode("ascii")
        if len(encoded) > CONFIGMAP_MAX_BYTES:
            raise ValueError(
                f"bundle archive is {len(encoded)} bytes in base64; a ConfigMap holds "
                f"{CONFIGMAP_MAX_BYTES}"
            )
        return cls(dict(files), {BUNDLE_ARCHIVE_NAME: encoded}, content_hash(files))
