"""What slime's own parser makes of each option string given (test support): the attribute of
`args` it sets and the kind of value, as `agentrl.bundle.rehearse.slime_flags` names kinds.

argv: the option strings; prints `{option: [dest, kind] or null}` as JSON (null: the row's
parser has no such option).
"""

from __future__ import annotations

import argparse
import json
import sys

from slime_parser import build_parser


def kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "true"
    if isinstance(action, argparse._StoreFalseAction):
        return "false"
    if action.nargs == 0:
        return f"const:{action.const!r}"
    name = getattr(action.type, "__name__", None)
    if "human_readable_int" in repr(action.type):  # SGLang's int that also reads "32k"
        name = "int"
    if "AttnBackend" in repr(action.type):  # Megatron's enum: a member, not the text
        name = "enum"
    scalar = {
        None: "str", "str": "str", "int": "int", "human_readable_int": "int",
        "float": "float", "loads": "json", "enum": "enum",
    }.get(name, f"other:{name or action.type!r}")  # fmt: skip
    if action.choices is not None and scalar == "other:None":
        scalar = "str"
    listed = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    return f"list:{scalar}" if listed else scalar


def main() -> None:
    actions = build_parser()._option_string_actions
    out = {
        o: None if o not in actions else [actions[o].dest, kind(actions[o])] for o in sys.argv[1:]
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
