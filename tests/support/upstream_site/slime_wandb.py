"""Runs slime's own W&B start on agentrl's flags (test support).

Started by `tests/support/slime_upstream.slime_wandb` with this directory on PYTHONPATH and
AGENTRL_UPSTREAM_ROOTS naming one slime row's source. Reads a JSON argv on stdin, parses it
with the row's own parser (Megatron's, slime's and SGLang's arguments, as slime's parse_args
builds it; defaults for everything not given), then runs the row's own `init_wandb_primary`
on the result. Only `wandb` itself is recorded instead of called: the keyword arguments slime
passes to `wandb.init` are what W&B names the run and its group by. Prints them as one JSON
object (with `error` instead, if slime raised).
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from typing import Any

from slime_parser import build_parser


class _Run:
    id = "run0001"


def _recorder(calls: dict[str, Any]) -> types.ModuleType:
    """The `wandb` name of slime's wandb_utils: `init` records, the rest accepts anything."""
    wandb = types.ModuleType("wandb")

    def init(**kwargs: Any) -> _Run:
        calls.update(kwargs)
        wandb.run = _Run()  # type: ignore[attr-defined]
        return wandb.run  # type: ignore[attr-defined, no-any-return]

    def anything(*args: Any, **kwargs: Any) -> None:
        return None

    wandb.init = init  # type: ignore[attr-defined]
    wandb.login = anything  # type: ignore[attr-defined]
    wandb.define_metric = anything  # type: ignore[attr-defined]
    wandb.Settings = lambda **kwargs: kwargs  # type: ignore[attr-defined]
    wandb.util = types.SimpleNamespace(generate_id=lambda: "rand01")  # type: ignore[attr-defined]
    return wandb


def main() -> None:
    argv = json.loads(sys.stdin.read())
    parser = build_parser()
    for action in parser._actions:  # only the W&B flags are given; the rest keep defaults
        action.required = False
    args, _ = parser.parse_known_args(argv)
    args.rank = 0
    for name in ("slime.observability.wandb_utils", "slime.utils.wandb_utils"):
        try:
            utils = importlib.import_module(name)
            break
        except ImportError:
            continue
    calls: dict[str, Any] = {}
    utils.wandb = _recorder(calls)
    try:
        utils.init_wandb_primary(args)
    except Exception as err:  # what slime raises is the finding
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}))
        return
    print(json.dumps({k: calls.get(k) for k in ("entity", "project", "group", "name")}))


if __name__ == "__main__":
    main()
