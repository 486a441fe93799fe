"""The bundle-code ConfigMap: agentrl's own in-pod sources, shipped next to the GPU image.

A new bundle never needs a new 20 GB image, and a running experiment never changes code under
its feet: the ConfigMap is immutable and carries a hash of its content in its name. ConfigMap
keys cannot contain '/', so each file is stored under a flat key and the volume's
`items[].path` restores the package tree under `BUNDLE_MOUNT_DIR`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from agentrl.api.constants import CONFIGMAP_MAX_BYTES

# What goes into the bundle: the package marker, the API (config models the bundle parses)
# and the bundle itself. Never the operator side.
BUNDLE_ROOTS = ("api", "bundle")
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


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
            if child.name != "__pycache__":
                _walk(child, f"{rel}/{child.name}", out)
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


def flat_key(path: str) -> str:
    """'agentrl/bundle/launch.py' -> 'agentrl.bundle.launch.py' (a legal ConfigMap key)."""
    if not path.endswith(".py") or path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"bundle file {path!r}: expected a relative .py path")
    key = path[: -len(".py")].replace("/", ".") + ".py"
    if not CONFIGMAP_KEY.match(key):
        raise ValueError(f"bundle file {path!r}: {key!r} is not a valid ConfigMap key")
    return key


def bundle_data(files: Mapping[str, str]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """ConfigMap `data` and the volume `items` that restore the tree."""
    data: dict[str, str] = {}
    items: list[dict[str, str]] = []
    for path in sorted(files):
        key = flat_key(path)
        if key in data:
            raise ValueError(f"bundle files collide on ConfigMap key {key!r}")
        data[key] = files[path]
        items.append({"key": key, "path": path})
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_MAX_BYTES:
        raise ValueError(f"bundle is {size} bytes; a ConfigMap holds {CONFIGMAP_MAX_BYTES}")
    return data, items


@dataclass(frozen=True)
class Bundle:
    """The bundle sources with what every experiment derives from them, computed once: the
    ConfigMap data, the volume items restoring the tree, and the content hash naming it.
    An operator renders thousands of experiments from one unchanging set of sources."""

    files: Mapping[str, str]
    data: Mapping[str, str]
    items: tuple[Mapping[str, str], ...]
    digest: str

    @classmethod
    def of(cls, files: Mapping[str, str]) -> Bundle:
        data, items = bundle_data(files)
        return cls(dict(files), data, tuple(items), content_hash(files))
