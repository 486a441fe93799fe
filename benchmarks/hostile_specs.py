"""Run a corpus of hostile RLExperiment specs through `agentrl validate` and `agentrl render`
and print issue 12's table: how many were refused naming the field, warned, answered
vaguely, crashed or hung, or silently accepted.

    python benchmarks/hostile_specs.py                      # tests/api/hostile, isolated
    python benchmarks/hostile_specs.py --corpus DIR --show  # another corpus, case by case
    python benchmarks/hostile_specs.py --quick --json       # in-process, counts as JSON
    python benchmarks/hostile_specs.py --apiserver          # + the real kube-apiserver tier

The apiserver tier (the default when hack/setup.sh has built kube-apiserver; `--no-apiserver`
skips it) applies every case `validate` admits to a real kube-apiserver with the real
kubectl: the file itself as kubectl reads it, then every object `render` prints and the pods
KubeRay would make from the RayJob, all as server-side dry runs. A case the API server
refuses there is one `validate` let through to fail later; the table counts them.

A case is a .yaml/.yml/.json file. It may start with comment lines that say what it is and
what should happen (a .json file keeps them in FILE.json.expect):

    # hostile: a 9-level YAML alias bomb inside affinity
    # class: crash
    # expect: refused spec.resources.affinity*     (or: warned PATH; '*' = path prefix;
    #                                                 '.' = the document itself)

and `{{repeat 'x' 30000}}` in its text stands for 30,000 x's. Files without a header are
judged by the CLI's own words: refused naming a field, warned, or neither.

By default every case runs in its own process under resource limits (CPU seconds and
address space), so a hang or a memory blow-up is counted as such, not waited for; `--quick`
runs them in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the apiserver tier uses the tests' harness (tests.support.kube)
    sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "tests" / "api" / "hostile"
IMAGE = "registry.invalid/agentrl/runtime@sha256:" + "0" * 64  # render needs some image
CPU_SECONDS = 60
ADDRESS_SPACE = 3 * 1024**3

REFUSED = "refused naming the field"
WARNED = "warned"
VAGUE = "vague"
CRASHED = "crashed or hung"
ACCEPTED = "silently accepted"
OUTCOMES = (REFUSED, WARNED, VAGUE, CRASHED, ACCEPTED)
_REPEAT = re.compile(r"\{\{repeat '([^']+)' (\d+)\}\}")
_FIELD = re.compile(r"^(metadata|spec|apiVersion|kind)\b")


@dataclass(frozen=True)
class Case:
    path: Path
    title: str = ""
    klass: str = "unlabelled"
    expect: str | None = None  # "refused" | "warned"
    expect_path: str | None = None  # wire path; "." = the document; trailing "*" = prefix

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class Run:
    """What `validate` and `render` did with one case."""

    validate: tuple[int, str, str] = (0, "", "")  # exit status, stdout, stderr
    render: tuple[int, str, str] = (0, "", "")
    crash: str = ""  # a traceback, a signal, or the resource limit that stopped it


@dataclass
class Verdict:
    case: Case
    outcome: str
    detail: str
    render_agrees: bool = True
    lines: list[str] = field(default_factory=list)


def load_corpus(directory: Path) -> list[Case]:
    cases = []
    for path in sorted(directory.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
            continue
        sidecar = path.with_name(path.name + ".expect")
        header = sidecar.read_text() if sidecar.exists() else path.read_text(errors="replace")
        meta = dict(re.findall(r"^# (hostile|class|expect): (.*)$", header[:2000], re.M))
        expect, _, where = meta.get("expect", "").partition(" ")
        cases.append(
            Case(
                path,
                meta.get("hostile", ""),
                meta.get("class", "unlabelled"),
                expect or None,
                where.strip() or None,
            )
        )
    return cases


def expand(text: str) -> str:
    return _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), text)


def _materialise(case: Case, directory: str) -> str:
    target = Path(directory) / case.name
    target.write_text(expand(case.path.read_text(encoding="utf-8")), encoding="utf-8")
    return str(target)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from agentrl.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def run_here(file: str) -> Run:
    """Both commands in this process (a Python exception is a crash)."""
    run = Run()
    try:
        run.validate = _cli(["validate", "-f", file, "--image", IMAGE])
        run.render = _cli(["render", "-f", file, "--image", IMAGE])
    except BaseException as exc:  # any escape, SystemExit included, is what this counts
        run.crash = f"{type(exc).__name__}: {exc}"[:300]
    return run


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS + 5))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_isolated(file: str) -> Run:
    """Both commands in a child process under CPU and memory limits."""
    proc = subprocess.run(
        [sys.executable, __file__, "--run-one", file],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_limits,  # setrlimit only; runs in the child before exec
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    if proc.returncode != 0:
        reason = (
            f"killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode < 0
            else f"exit {proc.returncode}"
        )
        return Run(crash=f"{reason}: {proc.stderr.strip()[-300:]}")
    data = json.loads(proc.stdout)
    return Run(tuple(data["validate"]), tuple(data["render"]), data["crash"])


def _problem_lines(err: str, source: str) -> Iterator[tuple[bool, str]]:
    """(is a warning, text after the source) for each problem line of stderr."""
    for line in err.splitlines():
        if not line.startswith(source):
            continue
        rest = line[len(source) :].lstrip("#0123456789[]").removeprefix(": ")
        if rest.startswith("warning: "):
            yield True, rest.removeprefix("warning: ")
        elif not rest.endswith("nothing would be created") and " (not an RLExperiment)" not in rest:
            yield False, rest


def _names(case: Case, rest: str) -> bool:
    where = case.expect_path
    if where is None:
        return bool(_FIELD.match(rest))
    if where == ".":
        return True
    if where.endswith("*"):
        return rest.startswith(where[:-1])
    return rest.startswith(where + ": ")


def classify(case: Case, run: Run, file: str) -> Verdict:
    if run.crash or "Traceback" in run.validate[2] + run.render[2]:
        return Verdict(case, CRASHED, run.crash or run.validate[2][-300:])
    for command, (code, _, _) in (("validate", run.validate), ("render", run.render)):
        if code not in (0, 1):
            return Verdict(case, CRASHED, f"{command} exited {code}")
    code, _, err = run.validate
    lines = list(_problem_lines(err, file))
    errors = [text for warning, text in lines if not warning]
    warnings = [text for warning, text in lines if warning]
    shown = [text for _, text in lines]
    render_code, render_out, _ = run.render
    if code == 1:
        agrees = render_code == 1 and render_out == ""
        named = [e for e in errors if _names(case, e)]
        if named:
            return Verdict(case, REFUSED, named[0], agrees, shown)
        fallback = errors[0] if errors else err.strip()[-300:]
        return Verdict(case, VAGUE, fallback, agrees, shown)
    agrees = render_code == 0
    named = [w for w in warnings if _names(case, w)]
    if named or (warnings and case.expect is None):
        return Verdict(case, WARNED, (named or warnings)[0], agrees, shown)
    return Verdict(case, ACCEPTED, warnings[0] if warnings else "no problem reported", agrees)


def judge(cases: list[Case], isolated: bool) -> list[Verdict]:
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            file = _materialise(case, tmp)
            run = run_isolated(file) if isolated else run_here(file)
            verdicts.append(classify(case, run, file))
    return verdicts


def table(verdicts: list[Verdict]) -> str:
    counts = Counter(v.outcome for v in verdicts)
    rows = [
        "| specs tried | " + " | ".join(OUTCOMES) + " |",
        "| --- |" + " --- |" * len(OUTCOMES),
        f"| {len(verdicts)} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |",
        "",
        "| class | tried | " + " | ".join(OUTCOMES) + " |",
        "| --- | --- |" + " --- |" * len(OUTCOMES),
    ]
    for klass in sorted({v.case.klass for v in verdicts}):
        mine = [v for v in verdicts if v.case.klass == klass]
        per = Counter(v.outcome for v in mine)
        rows.append(
            f"| {klass} | {len(mine)} | " + " | ".join(str(per[o]) for o in OUTCOMES) + " |"
        )
    return "\n".join(rows)


def summary(verdicts: list[Verdict]) -> dict[str, object]:
    counts = Counter(v.outcome for v in verdicts)
    return {
        "tried": len(verdicts),
        **{o.replace(" ", "_"): counts[o] for o in OUTCOMES},
        "render_disagrees": sum(not v.render_agrees for v in verdicts),
        "unexpected": sorted(v.case.name for v in verdicts if not expected(v)),
    }


def expected(verdict: Verdict) -> bool:
    """The outcome the case's header asks for (cases without one: anything but a crash)."""
    want = {"refused": REFUSED, "warned": WARNED}.get(verdict.case.expect or "")
    if want is None:
        return verdict.outcome != CRASHED
    return verdict.outcome == want and verdict.render_agrees


# ---- the apiserver tier ----------------------------------------------------------------


def apiserver_available() -> bool:
    from tests.support.kube import apiserver_binary

    return apiserver_binary().is_file()


def admitted(verdicts: list[Verdict]) -> list[Verdict]:
    """The cases `validate` let through (exit status 0): warned or accepted."""
    return [v for v in verdicts if v.outcome in (WARNED, ACCEPTED)]


def apiserver_refusals(kube: Any, cases: list[Case], workdir: str) -> dict[str, str]:
    """case name -> what the API server said, for every case it refuses: the file as kubectl
    reads it, the rendered objects, the pods KubeRay would make (server-side dry runs)."""
    refused: dict[str, str] = {}
    for case in cases:
        file = _materialise(case, workdir)
        objects = _rendered(file)
        _prerequisites(kube, objects)
        proc = kube.kubectl("apply", "--server-side", "--dry-run=server", "-f", file, check=False)
        if proc.returncode != 0:
            refused[case.name] = f"the file: {proc.stderr.strip()[:300]}"
            continue
        # The objects as the operator applies them (server-side apply); the pods as KubeRay
        # creates them (a plain create: KubeRay builds them from typed Go structs, so a
        # numeric quantity in the template is fine, which server-side apply would refuse).
        pods = [o for o in objects if o["kind"] == "Pod"]
        for verb, group in (("apply", [o for o in objects if o["kind"] != "Pod"]),
                            ("create", pods)):  # fmt: skip
            flags = ["--server-side", "--force-conflicts"] if verb == "apply" else []
            stream = "---\n".join(json.dumps(o) + "\n" for o in group)
            proc = kube.kubectl(verb, *flags, "--dry-run=server", "-f", "-", input=stream,
                                check=False)  # fmt: skip
            if proc.returncode != 0:
                what = "rendered objects" if verb == "apply" else "pods"
                refused[case.name] = f"{what}: {proc.stderr.strip()[:300]}"
                break
    return refused


def _rendered(file: str) -> list[dict[str, Any]]:
    """What `render` prints for the file, and the pods of its RayJob's templates."""
    from tests.kube_checks import pod_templates

    code, out, err = _cli(["render", "-f", file, "--image", IMAGE, "-o", "json"])
    if code != 0:
        raise RuntimeError(f"{file}: validate admitted it, render did not: {err[-300:]}")
    objects: list[dict[str, Any]] = json.loads(out)["items"]
    for obj in list(objects):
        if obj["kind"] != "RayJob":
            continue
        for template in pod_templates(obj):
            meta = dict(template.get("metadata") or {})
            component = meta.get("labels", {}).get("agentrl.io/component", "pod")
            meta.update(name=f"{obj['metadata']['name']}-{component}",
                        namespace=obj["metadata"]["namespace"])  # fmt: skip
            objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                            "spec": template["spec"]})  # fmt: skip
    return objects


def _prerequisites(kube: Any, objects: list[dict[str, Any]]) -> None:
    """What a cluster has before an experiment: its namespace, the ServiceAccounts and
    PriorityClasses the pods name (the admission plugins check that they exist)."""
    needed: list[dict[str, Any]] = []
    for obj in objects:
        ns = obj["metadata"]["namespace"]
        kube.ensure_namespace(ns)
        spec = obj.get("spec") or {}
        if obj["kind"] == "Pod":
            account = spec.get("serviceAccountName") or "default"
            needed.append({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": account, "namespace": ns}})  # fmt: skip
            if spec.get("priorityClassName"):
                needed.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                               "metadata": {"name": spec["priorityClassName"]},
                               "value": 1000})  # fmt: skip
    if needed:
        kube.kubectl("apply", "-f", "-", input="---\n".join(json.dumps(o) for o in needed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="directory of cases")
    parser.add_argument("--quick", action="store_true", help="run in this process")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--show", action="store_true", help="print every case's verdict")
    tier = parser.add_mutually_exclusive_group()
    tier.add_argument("--apiserver", action="store_true", default=None,
                      help="apply every admitted case to a real kube-apiserver (default: "
                      "when hack/setup.sh built one)")  # fmt: skip
    tier.add_argument("--no-apiserver", dest="apiserver", action="store_false")
    parser.add_argument("--run-one", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        run = run_here(args.run_one)
        print(json.dumps({"validate": run.validate, "render": run.render, "crash": run.crash}))
        return 0
    verdicts = judge(load_corpus(args.corpus), isolated=not args.quick)
    if args.show:
        for v in verdicts:
            mark = "" if expected(v) else "  <-- unexpected"
            print(f"{v.case.klass:9} {v.case.name:48} {v.outcome:26} {v.detail[:110]}{mark}")
        print()
    counts = summary(verdicts)
    use_apiserver = apiserver_available() if args.apiserver is None else args.apiserver
    refused: dict[str, str] | None = None
    if use_apiserver:
        from tests.support.kube import running_harness

        with running_harness() as kube, tempfile.TemporaryDirectory() as tmp:
            refused = apiserver_refusals(kube, [v.case for v in admitted(verdicts)], tmp)
        counts["apiserver_tier"] = {
            "admitted_applied": len(admitted(verdicts)),
            "refused_by_the_apiserver": sorted(refused),
        }
    if args.json:
        print(json.dumps(counts))
        return 0
    print(table(verdicts))
    if refused is not None:
        print(
            f"\napiserver tier (kube-apiserver + kubectl, server-side dry run): "
            f"{len(admitted(verdicts))} admitted cases applied with their rendered objects "
            f"and pods; {len(refused)} refused by the API server"
        )
        for name, reason in sorted(refused.items()):
            print(f"  {name}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
