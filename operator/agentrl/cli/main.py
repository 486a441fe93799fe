"""`agentrl render | validate | crd`: what the operator would do, without a cluster.

`-f` reads files, directories and stdin as `kubectl apply -f` does (multi-document YAML,
`kind: List`, `--recursive`). Everything that is wrong goes to stderr, each line starting with
the document it is about; stdout carries only results (the OK lines of `validate`, the
objects of `render`). A user mistake (missing file, bad YAML, an invalid spec) ends with
exit status 1, never a traceback; exit status 2 is a wrong command line (argparse's
convention). Operator defaults come from flags, then env, then the documented defaults. So does
the policy the spec is judged by (`--policy FILE`, then `AGENTRL_POLICY`, then the operator's
own default, baseline), so `validate` refuses what the cluster's operator would refuse. With no
Ray pod image from anywhere (agentrl publishes none yet), `render` refuses (it has nothing to
put in the pods) and `validate` warns (the cluster's operator may have a default of its own).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from agentrl import __version__
from agentrl.api.crd import crd
from agentrl.api.images import DefaultImage
from agentrl.api.models import RLExperiment
from agentrl.api.policy import BASELINE, Policy, PolicyError, load_policy, policy_warnings
from agentrl.api.validation import Problem, errors, parse_experiment
from agentrl.cli import completion, logs, rehearse, summary
from agentrl.cli.load import (
    Document,
    LoadError,
    input_name,
    load_document,
    load_documents,
    unset_type,
)
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all
from agentrl.render.defaults import DEFAULT_IMAGE
from agentrl.slimecmd import preview, wandb_run_name

ENV_IMAGE = "AGENTRL_IMAGE"
ENV_BUNDLE_VERSION = "AGENTRL_BUNDLE_VERSION"
ENV_RAY_VERSION = "AGENTRL_RAY_VERSION"
ENV_POLICY = "AGENTRL_POLICY"  # JSON, as the operator reads it
EXIT_OK = 0
EXIT_INVALID = 1  # an invalid spec, or an input that cannot be read
EXIT_USAGE = 2  # argparse: a wrong command line
EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  every RLExperiment is valid (warnings do not fail)
  {EXIT_INVALID}  a spec is invalid, or an input cannot be read; the reasons are on stderr
  {EXIT_USAGE}  the command line is wrong
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args, sys.stdout, sys.stderr)
    except (LoadError, PolicyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:  # `agentrl render | head`
        return 0
    return code


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    image = DefaultImage(args.image or None, missing="warning")
    if args.output == "json":
        notes = io.StringIO()
        try:
            parsed = _parse(args, notes, image)
        except (LoadError, PolicyError) as exc:
            # A document all the same, for tools; main() puts the message on stderr too.
            out.write(json.dumps(_unread(args, exc, notes.getvalue()), indent=2) + "\n")
            raise
        out.write(json.dumps(_report(args, parsed, notes.getvalue()), indent=2) + "\n")
        return EXIT_OK if all(exp is not None for _, exp, _ in parsed) else EXIT_INVALID
    code = EXIT_OK
    for source, exp, problems in _parse(args, err, image):
        for problem in problems:
            print(f"{source}: {problem}", file=err)
        if exp is None:
            count = len(errors(problems))
            print(f"{source}: {count} error(s); nothing would be created", file=err)
            code = EXIT_INVALID
            continue
        res = exp.spec.resources
        print(
            f"{source}: OK (RLExperiment {exp.metadata.namespace}/{exp.metadata.name}: "
            f"{res.nodes} node(s) x {res.gpus_per_node} GPUs; policy: {_policy_name(args)})",
            file=out,
        )
    return code


def _report(args: argparse.Namespace, parsed: Parsed, notes: str) -> dict[str, Any]:
    """`validate -o json`: one document of every experiment's problems, for tools."""
    documents = []
    for source, exp, problems in parsed:
        entry: dict[str, Any] = {"source": source, "valid": exp is not None}
        if exp is not None:
            entry.update(namespace=exp.metadata.namespace, name=exp.metadata.name)
        entry["problems"] = [
            {"path": p.path, "message": p.message, "hint": p.hint, "severity": p.severity}
            for p in problems
        ]
        documents.append(entry)
    return {
        "valid": all(d["valid"] for d in documents),
        "policy": _policy_name(args),
        "documents": documents,
        "notes": notes.splitlines(),  # skipped documents, policy warnings
    }


def _unread(args: argparse.Namespace, exc: Exception, notes: str) -> dict[str, Any]:
    """`validate -o json` when an input cannot be read (or the policy is wrong): the report's
    shape, with the unreadable input as the one invalid document."""
    if isinstance(exc, LoadError):
        source, message = exc.source, exc.reason
    else:
        source = args.policy or ENV_POLICY
        message = str(exc).removeprefix(f"{source}: ")
    problem = {"path": "", "message": message, "hint": "", "severity": "error"}
    return {
        "valid": False,
        "policy": _policy_name(args),
        "documents": [{"source": source, "valid": False, "problems": [problem]}],
        "notes": notes.splitlines(),
    }


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    image = DefaultImage(args.image or None, missing="warning" if args.show_command else "error")
    parsed = _parse(args, err, image)
    if not (args.show_command or args.summary):  # objects to apply by hand, no operator
        parsed = [(source, None, [*problems, found]) if exp is not None
                  and (found := _resume_needs_uid(exp)) is not None
                  else (source, exp, problems)
                  for source, exp, problems in parsed]  # fmt: skip
    for source, _, problems in parsed:
        for problem in problems:
            print(f"{source}: {problem}", file=err)
    experiments = [exp for _, exp, _ in parsed if exp is not None]
    if len(experiments) != len(parsed):
        # All or nothing: the output is meant for `kubectl apply`, and half an input
        # applied is harder to clean up than none.
        print("error: invalid RLExperiment(s); nothing rendered", file=err)
        return EXIT_INVALID
    if args.show_command and args.output == "json":
        commands = [
            {
                "namespace": e.metadata.namespace,
                "name": e.metadata.name,
                "command": _command_argv(e),
            }
            for e in experiments
        ]
        out.write(json.dumps({"experiments": commands}, indent=2) + "\n")
        return EXIT_OK
    if args.show_command:
        for exp in experiments:
            if len(experiments) > 1:
                out.write(f"# {exp.metadata.namespace}/{exp.metadata.name}\n")
            out.write(_command_text(exp))
        return EXIT_OK
    defaults = _defaults(args)
    bundle_files = collect_bundle_files()
    rendered = [(exp, list(render_all(exp, defaults, bundle_files))) for exp in experiments]
    if args.summary and args.output == "json":
        experiments_data = [summary.data(e, c, _command_argv(e)) for e, c in rendered]
        out.write(json.dumps({"experiments": experiments_data}, indent=2) + "\n")
        return EXIT_OK
    if args.summary:
        for exp, children in rendered:
            out.write(summary.text(exp, children, _command_text(exp)))
        return EXIT_OK
    out.write(dump_objects([obj for _, children in rendered for obj in children], args.output))
    return EXIT_OK


def _resume_needs_uid(exp: RLExperiment) -> Problem | None:
    """`checkpoint.resume: false` rendered for `kubectl apply` without the operator: only the
    API server assigns the uid the launcher tells this run's own saves by (`slimecmd.checkpoint`,
    RUN_MARK), so every KubeRay retry and every resume after a suspend would start over from
    the model and save over the saves of the attempts before it."""
    ckpt = exp.spec.checkpoint
    if exp.metadata.uid or not ckpt.path or ckpt.resume:
        return None
    return Problem(
        "spec.checkpoint.resume",
        f"false needs the experiment's uid, which the API server assigns: rendered here, each "
        f"KubeRay retry (spec.backoffLimit) and each resume after spec.suspend would start "
        f"over from the model and save over this run's own checkpoints in {ckpt.path}",
        "apply the RLExperiment itself with `kubectl apply -f` for the operator to run it, "
        "or remove spec.checkpoint.resume and give the run a checkpoint directory of its own",
    )


def cmd_crd(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    out.write(crd_yaml())
    return 0


def crd_yaml() -> str:
    """The CRD as checked in under crds/ (the drift test compares against this)."""
    header = "# Generated by `agentrl crd` from agentrl.api.models; do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)


def dump_objects(objects: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    return yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (config JSON, bundle sources) as readable `|` blocks, no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_presenter)


def _command_text(exp: RLExperiment) -> str:
    """slime's command line as the launcher will run it (pod-only values shown as <...>)."""
    argv = _command_argv(exp)
    lines, i = [], 0
    while i < len(argv):  # one flag and its values per line; "<...:>" notes start a line too
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--") and not argv[j].endswith(":>"):
            j += 1
        lines.append(" ".join(shlex.quote(a) for a in argv[i:j]))
        i = j
    return " \\\n    ".join(lines) + "\n"


def _command_argv(exp: RLExperiment) -> list[str]:
    return preview(exp.spec, wandb_run_name(exp.metadata.namespace, exp.metadata.name))


Parsed = list[tuple[str, RLExperiment | None, list[Problem]]]


def _parse(args: argparse.Namespace, err: TextIO, image: DefaultImage) -> Parsed:
    """Every RLExperiment of the inputs, parsed; other kinds are skipped with a note."""
    if args.policy == "-" and "-" in args.file:
        raise LoadError(
            "stdin",
            "-f - and --policy - both read stdin, which can be read once: give one of them "
            "as a file (e.g. --policy values.yaml)",
        )
    policy = _policy(args)
    source = args.policy or ENV_POLICY
    for warning in policy_warnings(policy):
        print(f"{source}: warning: {warning}", file=err)
    parsed: Parsed = []
    for doc in load_documents(args.file, recursive=args.recursive):
        if not doc.is_experiment:
            print(f"{doc.source}: skipped {doc.describe()} (not an RLExperiment)", file=err)
            continue
        parsed.append((doc.source, *_parse_one(doc, policy, image)))
    if not parsed:
        raise LoadError(", ".join(map(input_name, args.file)), "no RLExperiment found")
    return _once_each(parsed)


def _once_each(parsed: Parsed) -> Parsed:
    """The same namespace/name twice in one input is one object to kubectl: the later
    document would replace the earlier one, so both cannot be what the user means."""
    first: dict[tuple[str, str], str] = {}
    out: Parsed = []
    for source, exp, problems in parsed:
        if exp is not None:
            key = (exp.metadata.namespace, exp.metadata.name)
            if key in first:
                problem = Problem(
                    "metadata.name",
                    f"RLExperiment {key[0]}/{key[1]} is also defined in {first[key]}: applied "
                    "together, the later document replaces the earlier one",
                    "rename one of them, or keep one",
                )
                out.append((source, None, [*problems, problem]))
                continue
            first[key] = source
        out.append((source, exp, problems))
    return out


def _parse_one(
    doc: Document, policy: Policy, image: DefaultImage
) -> tuple[RLExperiment | None, list[Problem]]:
    if doc.problems:
        return None, doc.problems
    exp, problems = parse_experiment(doc.body, policy, default_image=image)
    unset = unset_type(doc.body)
    return (None, [*unset, *problems]) if unset else (exp, problems)


def _policy_name(args: argparse.Namespace) -> str:
    if args.policy:
        return str(args.policy)
    return ENV_POLICY if os.environ.get(ENV_POLICY, "").strip() else "the default, baseline"


def _policy(args: argparse.Namespace) -> Policy:
    """--policy FILE (a policy, or chart values holding one), else AGENTRL_POLICY, else the
    operator's default."""
    if args.policy:
        return load_policy(load_document(args.policy), args.policy)
    raw = os.environ.get(ENV_POLICY, "")
    if raw.strip():
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise PolicyError(f"{ENV_POLICY} is not JSON ({exc})") from None
        return load_policy(doc, ENV_POLICY)
    return BASELINE


def _defaults(args: argparse.Namespace) -> OperatorDefaults:
    return OperatorDefaults(
        image=args.image or None,
        bundle_version=args.bundle_version,
        ray_version=args.ray_version or None,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrl",
        description="RLExperiment tools that need no cluster.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agentrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser(
        "render",
        help="print every object the operator would create",
        description="Print every object the operator would create for each RLExperiment "
        "(nothing when any input is invalid).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _file_arg(render)
    render.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    # One of the three outputs: given both, one of them would be dropped without a word.
    instead = render.add_mutually_exclusive_group()
    instead.add_argument(
        "--show-command",
        action="store_true",
        help="print slime's command line instead (-o json: each experiment's as a list of words)",
    )
    instead.add_argument(
        "--summary",
        action="store_true",
        help="print each object's name and size, the GPU layout and slime's command instead "
        "(-o json: the same as one JSON document)",
    )
    _policy_arg(render)
    _image_arg(render)
    render.add_argument(
        "--bundle-version",
        default=os.environ.get(ENV_BUNDLE_VERSION, __version__),
        help=f"bundle version label (env {ENV_BUNDLE_VERSION}; default {__version__})",
    )
    render.add_argument(
        "--ray-version",
        default=os.environ.get(ENV_RAY_VERSION, ""),
        help=f"rayClusterSpec.rayVersion (env {ENV_RAY_VERSION}; default unset)",
    )
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser(
        "validate",
        help="list every problem of a spec",
        description="List every problem of each RLExperiment: errors and warnings on "
        "stderr, one OK line per valid experiment on stdout.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _file_arg(validate)
    _image_arg(validate)
    _policy_arg(validate)
    validate.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="json: one document on stdout with every problem (path, message, hint, severity) "
        "of every experiment; the exit status is the same",
    )
    validate.set_defaults(func=cmd_validate)

    crd = sub.add_parser("crd", help="print the RLExperiment CustomResourceDefinition")
    crd.set_defaults(func=cmd_crd)
    logs.add_parser(sub)
    rehearse.add_parser(sub)
    completion.add_parser(sub, parser)
    return parser


def _image_arg(parser: argparse.ArgumentParser) -> None:
    builtin = DEFAULT_IMAGE or "none: no agentrl release has published a Ray pod image yet"
    parser.add_argument(
        "--image",
        default=os.environ.get(ENV_IMAGE) or DEFAULT_IMAGE,
        help=f"Ray pod image when spec.runtime.image is unset, as the operator's default "
        f"(the chart's operator.runtimeImage) would be; env {ENV_IMAGE}; built-in: {builtin}",
    )


def _policy_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the operator's policy to judge the spec by: YAML/JSON like the chart's `policy` "
        f"value, or a chart values file (env {ENV_POLICY} as JSON; default: the operator's "
        "default, Kubernetes' baseline level)",
    )


def _file_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--file",
        required=True,
        action="append",
        metavar="PATH",
        help="YAML or JSON file (multi-document and kind: List too), directory of .yaml, "
        ".yml and .json files, or '-' for stdin; repeat for more (as kubectl apply -f)",
    )
    parser.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="read the directories given with -f recursively",
    )


if __name__ == "__main__":
    sys.exit(main())
