"""Import slime's, Megatron-LM's and SGLang's own argument code where their GPU stack is absent.

Test support: `install(roots)` puts a meta-path finder first, which serves

- real modules, from the files under `roots` (the upstream snapshots of slime and
  Megatron-LM, and SGLang's released source): everything under `slime` and `megatron`, and
  the SGLang modules that define its server arguments (`REAL_SGLANG`). A package's
  `__init__` runs only when a name it defines is asked for (never megatron.training's,
  which imports the whole trainer); other names asked of a package come from its submodule
  that defines them, which is what those `__init__` files re-export.
- stand-ins for what cannot be installed or run here (`STAND_INS`: torch and the GPU
  kernels, the rest of SGLang, slime's own router build and Megatron-Bridge plugins, wandb,
  and the Megatron/SGLang modules the snapshots do not carry): every attribute is a
  placeholder class. Building an argparse parser and running slime's argument checks read
  names and defaults from them, never tensors or devices.

Everything else imports normally (transformers, omegaconf, yaml: the real packages).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

REAL = ("slime", "megatron")
REAL_SGLANG = (
    "sglang.srt.server_args",
    "sglang.srt.server_args_config_parser",
    "sglang.srt.arg_groups",
    "sglang.srt.function_call",
    "sglang.srt.parser",
)
# Its __init__ imports the whole Megatron trainer; the argument code needs none of it.
SKIP_INIT = frozenset({"megatron.training"})
STAND_INS = frozenset(
    {
        "torch",
        "triton",
        "transformer_engine",
        "apex",
        "flash_attn",
        "sglang",
        "sgl_kernel",
        "sglang_router",
        "slime_plugins",
        "wandb",
    }
)


class _Placeholder(type):
    """A class standing for any name of a stand-in module; anything done with it yields it."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        decorated = args[0] if len(args) == 1 and not kwargs else None
        if callable(decorated) and not isinstance(decorated, _Placeholder):
            return decorated  # used as a decorator
        return cls

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __contains__(cls, item: Any) -> bool:
        return False

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__
    __add__ = __or__
    __radd__ = __or__

    def __mro_entries__(cls, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)  # subclassing a stand-in class gives a plain class


def placeholder(name: str) -> Any:
    return _Placeholder(name, (), {"__module__": "upstream_imports.stand_in"})


def _defines(path: Path, name: str) -> bool:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


class _Module(types.ModuleType):
    """A real package whose `__init__` runs only when a name it defines is asked for, or a
    stand-in module."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        for directory in map(Path, self.__dict__.get("__path__", [])):
            if (directory / f"{name}.py").is_file() or (directory / name).is_dir():
                return importlib.import_module(f"{self.__name__}.{name}")
            init = directory / "__init__.py"
            if self.__name__ not in SKIP_INIT and init.is_file() and _defines(init, name):
                code = compile(init.read_text(encoding="utf-8"), str(init), "exec")
                exec(code, self.__dict__)  # the package's own __init__, run as itself
                return self.__dict__[name]
            for path in sorted(directory.glob("*.py")):
                if path.stem != "__init__" and _defines(path, name):
                    value = getattr(importlib.import_module(f"{self.__name__}.{path.stem}"), name)
                    setattr(self, name, value)
                    return value
        value = placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class UpstreamFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: Sequence[str | Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self.stood_in: set[str] = set()

    @staticmethod
    def _under(name: str, prefixes: Sequence[str]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    def _locate(self, name: str) -> tuple[Path | None, bool]:
        rel = Path(*name.split("."))
        for root in self.roots:
            if (root / rel).with_suffix(".py").is_file():
                return (root / rel).with_suffix(".py"), False
            if (root / rel).is_dir():
                return root / rel, True
        return None, False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if self._under(fullname, REAL) or self._under(fullname, REAL_SGLANG):
            where, is_package = self._locate(fullname)
            if where is not None and not is_package:
                return importlib.util.spec_from_file_location(fullname, where)
            spec = importlib.util.spec_from_loader(fullname, self, is_package=True)
            if spec is not None and where is not None:
                spec.submodule_search_locations = [str(where)]
            if where is None:
                if self._under(fullname, ("slime",)):
                    return None  # the slime snapshot is whole: a missing module is missing
                self.stood_in.add(fullname)
            return spec
        if fullname.split(".", maxsplit=1)[0] in STAND_INS:
            self.stood_in.add(fullname)
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = list(spec.submodule_search_locations or [])
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install(roots: Sequence[str | Path]) -> UpstreamFinder:
    finder = UpstreamFinder(roots)
    sys.meta_path.insert(0, finder)
    return finder
