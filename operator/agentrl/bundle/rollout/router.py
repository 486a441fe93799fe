"""Which of slime's SGLang routers the gateway samples from: the trained policy's.

slime starts one router per model of a `--sglang-config` file (`sglang_model_routers`,
name -> (host, port)) and writes only the first model's into `sglang_router_ip`/`_port`,
whatever that model is. Its weight updates go to the first model whose `update_weights`
holds (`RolloutManager._get_updatable_server`; a model that leaves it unset receives them
when its model path is `--hf-checkpoint`). A config that lists a frozen model first (a
reference or reward model) would have every agent turn sampled by that model, whose
weights never change, and trained as if the policy had sampled it. So the gateway talks to
the router of the model slime updates, found by slime's own reading of the file; a config
in which no model is updated is refused (the policy's tokens would never change).
https://github.com/THUDM/slime/blob/fa3c990af6f18efd3fd9922698bf4bf4048d1263/slime/ray/rollout.py#L1089-L1226
https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/ray/rollout.py#L987-L1124
https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/slime/backends/sglang_utils/sglang_config.py
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

ConfigLoader = Callable[[str], Any]  # path -> slime's SglangConfig (its `models`)


def _slime_loader(path: str) -> Any:
    from slime.backends.sglang_utils.sglang_config import SglangConfig

    return SglangConfig.from_yaml(path)


def updated_model(args: Any, load: ConfigLoader | None = None) -> str | None:
    """The name of the model of `args.sglang_config` that slime's weight updates reach (the
    first whose `update_weights` holds once resolved as slime resolves it), None without a
    config file. Raises ValueError when no model is updated."""
    path = getattr(args, "sglang_config", None)
    if not path:
        return None
    config = (load or _slime_loader)(str(path))
    for entry in config.models:
        model = copy.deepcopy(entry)  # `resolve` fills in defaults in place
        model.resolve(args)
        if model.update_weights:
            return str(model.name)
    names = ", ".join(str(m.name) for m in config.models) or "none"
    raise ValueError(
        f"no model of --sglang-config {path} receives weight updates (models: {names}): "
        "every agent turn would be sampled by weights that training never changes; set "
        "update_weights: true on the policy's model (or give it --hf-checkpoint's path)"
    )


def router_url(args: Any, load: ConfigLoader | None = None) -> str:
    """The base URL of the router of the model slime trains (the only router without a
    `--sglang-config` file)."""
    name = updated_model(args, load)
    if name is not None:
        routers: Mapping[str, Any] = getattr(args, "sglang_model_routers", None) or {}
        if name not in routers:
            raise ValueError(
                f"slime started no router for model {name!r} of --sglang-config, the one it "
                f"updates (routers: {', '.join(routers) or 'none'})"
            )
        ip, port = routers[name]
    else:
        ip, port = (
            getattr(args, "sglang_router_ip", None),
            getattr(args, "sglang_router_port", None),
        )
    if not ip or not port:
        raise ValueError("slime args lack sglang_router_ip/port; the gateway needs slime's router")
    return f"http://{ip}:{port}"
