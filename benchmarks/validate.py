"""What validating an RLExperiment costs, against baselines measured in the same run.

The operator validates every new generation of every experiment (`parse_experiment`), and
`render_all` checks the typed spec again (`validate_experiment`). Printed ratios:

- `full_vs_pydantic`: parse_experiment (bounds, strict types, every rule, core/v1 checks of
  pass-through objects) / pydantic's bare `model_validate` of the same bodies: what the fail-
  closed checks add to the plain structural parse;
- `bounds_vs_json`: the document-bounds walk / `json.loads` of the same document, for a
  spec near the 1.5 MiB object limit (the walk must stay a small multiple of reading it);
- `hostile_ms`: the worst time over a set of hostile bodies (deep nesting, a wide alias DAG,
  an oversized object), each refused by the bounds before any parser sees it.

    python benchmarks/validate.py            # ~10 s
    python benchmarks/validate.py --quick    # a few iterations (the test runs this)
    python benchmarks/validate.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "operator"))

from agentrl.api import bounds  # noqa: E402
from agentrl.api.models import RLExperiment  # noqa: E402
from agentrl.api.validation import parse_experiment  # noqa: E402


def examples() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples").glob("*.yaml"))]


def per_call(fn: Callable[[], object], repeat: int) -> float:
    """Best of three timings of `repeat` calls, in seconds per call."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def big_spec() -> dict[str, Any]:
    body = copy.deepcopy(examples()[0])
    body["spec"].setdefault("runtime", {})["extraArgs"] = ["x" * 1000] * 250  # ~1.2 MiB
    body["spec"]["runtime"]["env"] = [{"name": f"E{i}", "value": "v" * 500} for i in range(100)]
    return body


def hostile() -> list[Any]:
    deep: Any = "leaf"
    for _ in range(20_000):
        deep = {"a": deep}
    wide: Any = ["x"] * 10
    for _ in range(8):
        wide = [wide] * 10
    base = examples()[0]
    return [
        {**base, "spec": {**base["spec"], "resources": {"affinity": deep}}},
        {**base, "spec": {**base["spec"], "resources": {"tolerations": wide}}},
        {**base, "spec": {**base["spec"], "runtime": {"extraArgs": ["y" * 100_000] * 20}}},
    ]


def measure(quick: bool) -> dict[str, float]:
    n = 20 if quick else 400
    bodies = examples()

    def full() -> None:
        for body in bodies:
            parse_experiment(body)

    def bare() -> None:
        for body in bodies:
            RLExperiment.model_validate(body, by_alias=True, by_name=False)

    big = big_spec()
    text = json.dumps(big)
    full_s, bare_s = per_call(full, n), per_call(bare, n)
    walk_s = per_call(lambda: bounds.check_document(big), max(3, n // 20))
    load_s = per_call(lambda: json.loads(text), max(3, n // 20))
    worst = 0.0
    for body in hostile():
        start = time.perf_counter()
        exp, problems = parse_experiment(body)
        worst = max(worst, time.perf_counter() - start)
        assert exp is None and problems, "a hostile body was accepted"
    return {
        "parse_us": round(full_s / len(bodies) * 1e6, 1),
        "pydantic_us": round(bare_s / len(bodies) * 1e6, 1),
        "full_vs_pydantic": round(full_s / bare_s, 2),
        "bounds_ms": round(walk_s * 1e3, 2),
        "json_loads_ms": round(load_s * 1e3, 2),
        "bounds_vs_json": round(walk_s / load_s, 2),
        "hostile_ms": round(worst * 1e3, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few iterations")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.quick)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"parse_experiment        {result['parse_us']:8.1f} us per example spec")
    print(f"pydantic model_validate {result['pydantic_us']:8.1f} us (baseline)")
    print(f"  ratio                 {result['full_vs_pydantic']:8.2f}x")
    print(f"bounds walk, 1.3 MiB    {result['bounds_ms']:8.2f} ms")
    print(f"json.loads, same        {result['json_loads_ms']:8.2f} ms (baseline)")
    print(f"  ratio                 {result['bounds_vs_json']:8.2f}x")
    print(f"worst hostile body      {result['hostile_ms']:8.1f} ms (refused)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
