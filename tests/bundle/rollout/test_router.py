"""The gateway samples from the router of the model slime updates, under `--sglang-config`.

slime's own `slime/backends/sglang_utils/sglang_config.py` at each pinned commit reads the
file and resolves each model's `update_weights` (it needs only yaml); it runs here as
`slime.backends.sglang_utils.sglang_config`, the module the rollout imports in the pods.
slime writes the first model's router into `sglang_router_ip`/`_port` and every model's
into `sglang_model_routers` (slime/ray/rollout.py, `start_rollout_servers`).
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support.shared import UPSTREAM, require
from tests.support.stand_ins import stand_in

from agentrl.bundle.rollout.router import router_url

from .slime_upstream import COMMITS

ROUTERS = {"ref": ("10.0.0.1", 3001), "actor": ("10.0.0.2", 3002)}


@pytest.fixture(params=COMMITS)
def slime_config(request: pytest.FixtureRequest) -> Iterator[None]:
    """slime's sglang_config module at the commit, importable under its own name."""
    commit = request.param
    path = require(
        UPSTREAM / "slime" / commit / "slime" / "backends" / "sglang_utils" / "sglang_config.py",
        f"slime's snapshot at {commit}",
    )
    spec = importlib.util.spec_from_file_location(f"slime_{commit}_sglang_config", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    packages = ("slime", "slime.backends", "slime.backends.sglang_utils")
    fakes = {name: types.ModuleType(name) for name in packages}
    fakes["slime.backends.sglang_utils.sglang_config"] = module
    with stand_in(fakes):
        yield


def slime_args(tmp_path: Path, config: str | None) -> SimpleNamespace:
    path = None
    if config is not None:
        path = tmp_path / "sglang.yaml"
        path.write_text(config)
    return SimpleNamespace(
        sglang_config=None if path is None else str(path),
        sglang_router_ip=ROUTERS["ref"][0],  # slime writes the first model's router here
        sglang_router_port=ROUTERS["ref"][1],
        sglang_model_routers=ROUTERS if config is not None else {"default": ROUTERS["ref"]},
        hf_checkpoint="/models/actor",
        rollout_num_gpus_per_engine=1,
    )


FROZEN_FIRST = """
sglang:
  - name: ref
    model_path: /models/ref
    update_weights: false
    server_groups:
      - worker_type: regular
        num_gpus: 1
  - name: actor
    server_groups:
      - worker_type: regular
        num_gpus: 1
"""


@pytest.mark.usefixtures("slime_config")
def test_a_frozen_model_listed_first_is_not_the_policy(tmp_path: Path) -> None:
    """A reference model first in the file: slime's `sglang_router_ip` is its router, so
    every agent turn was sampled by weights training never changes and trained as the
    policy's. The actor (no model_path: --hf-checkpoint's, so updated) is the one."""
    assert router_url(slime_args(tmp_path, FROZEN_FIRST)) == "http://10.0.0.2:3002"


@pytest.mark.usefixtures("slime_config")
def test_update_weights_is_inferred_from_the_model_path_as_slime_does(tmp_path: Path) -> None:
    """No `update_weights`: slime updates the model whose path is --hf-checkpoint's."""
    config = FROZEN_FIRST.replace("    update_weights: false\n", "").replace(
        "  - name: actor\n", "  - name: actor\n    model_path: /models/actor\n"
    )
    assert router_url(slime_args(tmp_path, config)) == "http://10.0.0.2:3002"


@pytest.mark.usefixtures("slime_config")
def test_a_config_where_no_model_is_updated_is_refused(tmp_path: Path) -> None:
    config = FROZEN_FIRST.replace(
        "  - name: actor\n", "  - name: actor\n    update_weights: false\n"
    )
    with pytest.raises(ValueError, match=r"no model of --sglang-config .* receives weight updates"):
        router_url(slime_args(tmp_path, config))


def test_without_a_config_file_the_one_router_is_used(tmp_path: Path) -> None:
    assert router_url(slime_args(tmp_path, None)) == "http://10.0.0.1:3001"


def test_args_without_a_router_are_refused() -> None:
    with pytest.raises(ValueError, match="lack sglang_router_ip"):
        router_url(SimpleNamespace())


def test_the_loader_is_slimes_reading_of_the_file(tmp_path: Path) -> None:
    """A loader passed in (no slime here) is what decides, not the order of the file."""
    models = [
        SimpleNamespace(name="ref", update_weights=False, resolve=lambda args: None),
        SimpleNamespace(name="actor", update_weights=True, resolve=lambda args: None),
    ]

    def load(path: str) -> Any:
        return SimpleNamespace(models=models)

    args = slime_args(tmp_path, FROZEN_FIRST)
    assert router_url(args, load) == "http://10.0.0.2:3002"
