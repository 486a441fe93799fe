"""slime's real data-source classes, loaded from the upstream snapshots without torch.

`slime/rollout/data_source.py` at each pinned commit is executed as it is; only its imports
are stood in for: `torch` (its `save`/`load` of the cursor are pickle, which is what
`torch.save` of a dict of numbers is), the tokenizer
and processor loaders (no model here), `load_function`, `Sample` (the plain twin with the
same fields), and `Dataset`, reduced to reading the JSONL rows into samples with `prompt`,
`label` and `metadata`. Everything the rollout relies on (offsets, epochs, group_index and
index assignment, deep copies, the buffer, `add_samples`' checks) is slime's own code.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pickle
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.support.shared import UPSTREAM, require
from tests.support.slime_data import data_module
from tests.support.stand_ins import stand_in
from tests.support.upstream import slime_rows

from agentrl.bundle.rollout.types import PlainSample

COMMITS = slime_rows()


def snapshot(commit: str) -> Path:
    path = UPSTREAM / "slime" / commit / "slime" / "rollout" / "data_source.py"
    return require(path, f"slime's snapshot at {commit}")


def _load_function(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _torch_save(obj: Any, path: str) -> None:
    with open(path, "wb") as out:
        pickle.dump(obj, out)


def _torch_load(path: str) -> Any:
    with open(path, "rb") as src:
        return pickle.load(src)


@contextmanager
def _stand_ins(commit: str) -> Iterator[None]:
    fakes = {
        "torch": types.ModuleType("torch"),
        "slime": types.ModuleType("slime"),
        "slime.utils": types.ModuleType("slime.utils"),
        "slime.utils.data": data_module(commit),  # slime's own Dataset reads the train file
        "slime.utils.misc": types.ModuleType("slime.utils.misc"),
        "slime.utils.processing_utils": types.ModuleType("slime.utils.processing_utils"),
        "slime.utils.types": types.ModuleType("slime.utils.types"),
    }
    fakes["torch"].save = _torch_save  # type: ignore[attr-defined]
    fakes["torch"].load = _torch_load  # type: ignore[attr-defined]
    fakes["slime.utils.misc"].load_function = _load_function  # type: ignore[attr-defined]
    fakes["slime.utils.processing_utils"].load_tokenizer = lambda *a, **k: None  # type: ignore[attr-defined]
    fakes["slime.utils.processing_utils"].load_processor = lambda *a, **k: None  # type: ignore[attr-defined]
    fakes["slime.utils.types"].Sample = PlainSample  # type: ignore[attr-defined]
    with stand_in(fakes):
        yield


def data_source_module(commit: str) -> types.ModuleType:
    """slime's `slime.rollout.data_source` at `commit`, executed for real."""
    path = snapshot(commit)
    spec = importlib.util.spec_from_file_location(f"slime_{commit}_data_source", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with _stand_ins(commit):
        spec.loader.exec_module(module)
    return module


def dp_schedule_module(commit: str) -> types.ModuleType:
    """slime's `slime.utils.dp_schedule` at `commit`, executed for real with its two pure
    helper modules (`flops_utils`, `seqlen_balancing`) from the same snapshot: how slime's
    RolloutManager splits a step's samples into training steps by `rollout_id`."""
    utils = UPSTREAM / "slime" / commit / "slime" / "utils"
    require(utils / "dp_schedule.py", f"slime's snapshot at {commit}")
    loaded = {}
    for name in _DP_MODULES:
        spec = importlib.util.spec_from_file_location(f"slime.utils.{name}", utils / f"{name}.py")
        assert spec is not None and spec.loader is not None
        loaded[name] = (spec.loader, importlib.util.module_from_spec(spec))
    fakes = {"slime": types.ModuleType("slime"), "slime.utils": types.ModuleType("slime.utils")}
    with stand_in({**fakes, **{f"slime.utils.{n}": m for n, (_, m) in loaded.items()}}):
        for loader, module in loaded.values():  # dependencies first
            loader.exec_module(module)
    return module


_DP_MODULES = ("flops_utils", "seqlen_balancing", "dp_schedule")  # dependencies first


def slime_args(prompt_data: Path, n_samples: int, **kw: Any) -> SimpleNamespace:
    """The args slime's data sources read (slime's defaults where it has them)."""
    return SimpleNamespace(
        rollout_global_dataset=True,
        prompt_data=str(prompt_data),
        hf_checkpoint=None,
        dump_details=None,
        rollout_max_prompt_len=None,
        input_key="prompt",
        multimodal_keys=None,
        label_key=None,  # as agentrl renders: no --label-key, --tool-key at its default
        metadata_key="metadata",
        tool_key="tools",
        apply_chat_template=False,
        apply_chat_template_kwargs=None,
        rollout_seed=42,
        rollout_shuffle=False,
        n_samples_per_prompt=n_samples,
        buffer_filter_path=None,
        **kw,
    )


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    lines = [json.dumps({"prompt": f"p{i}", "metadata": r}) + "\n" for i, r in enumerate(rows)]
    path.write_text("".join(lines))
    return path


def buffered_source(commit: str, rows_file: Path, n_samples: int) -> Any:
    """slime's default data source (`RolloutDataSourceWithBuffer`) at `commit`."""
    module = data_source_module(commit)
    return module.RolloutDataSourceWithBuffer(slime_args(rows_file, n_samples))


def read_only_source(commit: str, rows_file: Path, n_samples: int) -> Any:
    """slime's `RolloutDataSource`, which refuses `add_samples`."""
    module = data_source_module(commit)
    return module.RolloutDataSource(slime_args(rows_file, n_samples))


def install_filter(monkeypatch: Any, module: str, fn: Any) -> str:
    """Makes `fn` importable as `module.<its name>` for the test (a user's filter, as
    slime's `--dynamic-sampling-filter-path` and `--buffer-filter-path` name one); the path."""
    fake = types.ModuleType(module)
    setattr(fake, fn.__name__, fn)
    monkeypatch.setitem(sys.modules, module, fake)
    return f"{module}.{fn.__name__}"
