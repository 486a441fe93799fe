"""slime's own parser on an argv (test support): `vars(args)` as its parser sets them.

stdin: the argv's options as a JSON list; prints `{"args": {...}, "rest": [...]}` as JSON
(values JSON cannot hold, such as Megatron's enums, as their repr).
"""

from __future__ import annotations

import json
import sys

from slime_parser import build_parser


def main() -> None:
    args, rest = build_parser().parse_known_args(json.loads(sys.stdin.read()))
    print(json.dumps({"args": vars(args), "rest": rest}, default=repr))


if __name__ == "__main__":
    main()
