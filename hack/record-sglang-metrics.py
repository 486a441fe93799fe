#!/usr/bin/env python3
"""Write tests/support/recorded/sglang-engine.prom from SGLang's own metric declarations.

The dashboard's engine row reads SGLang's metrics as each engine serves them (slime starts
every engine with `enable_metrics`; the hub relays them, see agentrl.bundle.engine_metrics).
No GPU runs here, so the sample exposition the tests serve from stub engines is recorded from
SGLang's source instead: this script takes every SGLang release the supported slime rows build
on (images/upstream.toml's [pypi.sglang] versions, unpacked from PyPI's wheels into
~/.cache/agentrl/upstream by hack/setup.sh, or here when missing), reads
`sglang/srt/observability/metrics_collector.py` as an AST, and for each family the dashboard
uses takes its type and the labels of the collector that declares it: a scheduler's
(`model_name`, `engine_type`, `tp_rank`, `pp_rank`, `moe_ep_rank`, as
`SchedulerMetricsCollector.init_new` builds them) or the tokenizer manager's (`model_name`,
`engine_type`), plus the family's own extra labels. It fails when a release lacks a family
or declares it differently, so the dashboard never reads a name some supported engine does
not export. Values are a plausible engine's; only names, types and labels are SGLang's.

    .venv/bin/python hack/record-sglang-metrics.py          # rewrite the recording
    .venv/bin/python hack/record-sglang-metrics.py --check  # fail if it is out of date
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import upstream  # noqa: E402  (the pins and the cache: one home)

VERSIONS = tuple(str(v) for v in upstream.sglang_pin()["versions"])  # type: ignore[attr-defined]
SOURCE = "sglang/srt/observability/metrics_collector.py"
OUT = ROOT / "tests/support/recorded/sglang-engine.prom"
# The labels each collector gives its metrics (the `labels` dict its caller builds) for a
# plain engine: no disaggregation, no data-parallel attention, no priority scheduling.
COLLECTOR_LABELS = {
    "SchedulerMetricsCollector": {
        "model_name": "qwen2.5-7b",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    },
    "TokenizerMetricsCollector": {"model_name": "qwen2.5-7b", "engine_type": "unified"},
}
# The families the dashboard reads, and a value (or, for histograms, observations).
FAMILIES: dict[str, object] = {
    "sglang:num_running_reqs": 42,
    "sglang:num_queue_reqs": 7,
    "sglang:gen_throughput": 1834.5,
    "sglang:cache_hit_rate": 0.62,
    "sglang:token_usage": 0.71,
    "sglang:prompt_tokens_total": 912345,
    "sglang:generation_tokens_total": 2034567,
    "sglang:cached_tokens_total": {"device": 565654},
    "sglang:time_to_first_token_seconds": (0.05, 0.12, 0.4, 2.5),
}


Declared = tuple[str, str, tuple[str, ...], str]  # class, type, extra labels, documentation


def declarations(text: str) -> dict[str, Declared]:
    """name -> (collector class, metric type, extra label names, help) of every `sglang:`
    metric."""
    out: dict[str, Declared] = {}
    for cls in ast.parse(text).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in ast.walk(cls):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            name = kw.get("name")
            if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
                continue
            extra: tuple[str, ...] = ()
            labels = kw.get("labelnames")
            if isinstance(labels, ast.BinOp):  # list(labels.keys()) + ["cache_source"]
                extra = tuple(e.value for e in labels.right.elts)  # type: ignore[attr-defined]
            elif isinstance(labels, ast.List):  # [*labels.keys(), "source"]
                extra = tuple(e.value for e in labels.elts if isinstance(e, ast.Constant))
            doc = kw.get("documentation")
            text_doc = str(doc.value) if isinstance(doc, ast.Constant) else ""
            out[str(name.value)] = (cls.name, node.func.id.lower(), extra, text_doc)
    return out


def source(version: str) -> str:
    return (upstream.fetch_sglang(version) / SOURCE).read_text(encoding="utf-8")


def render(decl: dict[str, Declared]) -> str:
    lines = [
        f"# Recorded by hack/record-sglang-metrics.py from SGLang {', '.join(VERSIONS)}'s",
        f"# {SOURCE}: names, types and labels as those releases declare them (values made up).",
    ]
    for name, value in FAMILIES.items():
        cls, kind, extra, doc = decl[name]
        base = COLLECTOR_LABELS[cls]
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        if kind == "histogram":
            observed = list(value)  # type: ignore[call-overload]
            labels = ",".join(f'{k}="{v}"' for k, v in base.items())
            for bound in (0.1, 0.5, 1.0, 5.0):
                count = sum(1 for o in observed if o <= bound)
                lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {count}')
            lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {len(observed)}')
            lines.append(f"{name}_count{{{labels}}} {len(observed)}")
            lines.append(f"{name}_sum{{{labels}}} {sum(observed)}")
            continue
        values = value if isinstance(value, dict) else {None: value}
        for extra_value, v in values.items():
            pairs = dict(base)
            if extra:
                pairs[extra[0]] = str(extra_value)
            labels = ",".join(f'{k}="{val}"' for k, val in pairs.items())
            lines.append(f"{name}{{{labels}}} {v}")
    return "\n".join(lines) + "\n"


def main() -> int:
    found = {v: declarations(source(v)) for v in VERSIONS}
    first = found[VERSIONS[0]]
    for version, decl in found.items():
        for name in FAMILIES:
            if name not in decl:
                print(f"SGLang {version} declares no {name}", file=sys.stderr)
                return 1
            if decl[name] != first[name]:
                print(f"{name}: {version} declares {decl[name]}, {VERSIONS[0]} {first[name]}",
                      file=sys.stderr)  # fmt: skip
                return 1
            if decl[name][0] not in COLLECTOR_LABELS:
                print(f"{name} comes from {decl[name][0]}, whose labels are not known here",
                      file=sys.stderr)  # fmt: skip
                return 1
    text = render(first)
    if "--check" in sys.argv:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run hack/record-sglang-metrics.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
