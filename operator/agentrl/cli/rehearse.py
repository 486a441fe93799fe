"""`agentrl rehearse`: an experiment's own episode path on this machine, before any GPU.

A thin entry. It reads and judges the spec as `validate` does, builds the runtime config the
operator would write into the pods (`render.objects.runtime_config`), and hands both to
`agentrl.bundle.rehearse`, which runs the bundle's gateway, agent backend, rollout and reward
code against the SGLang server given with `--engine`. The bundle is imported only when the
verb runs: the core install (pydantic, pyyaml) has none of its dependencies, and every other
verb must keep working there; without them this verb says which extra to install.

Exit status, as `validate`'s convention: 0 every episode finished with a numeric reward,
1 an episode failed (each one named in the report), 2 the rehearsal could not run (a wrong
command line, an unreadable or invalid spec, no engine at `--engine`, a path only the pods
have), with nothing written to `--out`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final, TextIO

from agentrl.api.constants import REHEARSE_FAILED, REHEARSE_OK, REHEARSE_USAGE, SPLIT_TRAIN
from agentrl.api.validation import errors, parse_experiment
from agentrl.cli.load import LoadError, load_documents, unset_type
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.objects import runtime_config

EXTRA: Final = "pip install 'agentrl[bundle]'"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = REHEARSE_OK, REHEARSE_FAILED, REHEARSE_USAGE
EXIT_CODES: Final = f"""\
exit status:
  {EXIT_OK}  every episode finished with a numeric reward and passed the checks
  {EXIT_FAILED}  an episode failed; the report names each one and why
  {EXIT_USAGE}  the rehearsal could not run: the command line, the spec, the engine or a path
"""


def add_parser(sub: Any) -> None:
    """Register `agentrl rehearse` on the root parser's subcommands."""
    p = sub.add_parser(
        "rehearse",
        help="run a few episodes of an experiment on this machine, before any GPU is scheduled",
        description=(
            "Run the experiment's own episode path (gateway, agent backend, rollout, trace "
            "merging, reward post-processing) for the first prompts of its data against an "
            "SGLang server you started, and report every episode, every group and the network "
            "path. Start the server with: python -m sglang.launch_server --model-path <the "
            "spec's model>. See docs/rehearse.md."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-f", "--file", required=True, metavar="PATH", help="the RLExperiment YAML")
    p.add_argument(
        "--engine",
        metavar="URL",
        help="the SGLang server's URL, e.g. http://127.0.0.1:30000 (required)",
    )
    p.add_argument("--prompts", type=int, default=1, metavar="N", help="first N rows (default 1)")
    p.add_argument(
        "--samples",
        type=int,
        metavar="K",
        help="episodes per prompt (default: grpo.samplesPerPrompt, or the eval set's)",
    )
    p.add_argument(
        "--split",
        default=SPLIT_TRAIN,
        metavar="train|eval:NAME",
        help="the data and sampling to rehearse (default train)",
    )
    p.add_argument(
        "--data", type=Path, metavar="PATH", help="a local copy of the split's JSONL file"
    )
    p.add_argument(
        "--model-dir",
        type=Path,
        metavar="DIR",
        help="a local copy of the checkpoint (tokenizer and chat template); default: "
        "spec.model.path when readable here",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where samples.jsonl, report.json and the log go (default rehearsal/<name>); "
        "created once the engine, gateway and agent are ready: a rehearsal that cannot run "
        "writes nothing",
    )
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="episode deadline (default: the agent's timeoutSeconds)",
    )
    p.add_argument(
        "--agent-url",
        metavar="URL",
        help="HTTP agents: the episode endpoint where the agent runs now (default agent.http.url)",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1",
        metavar="HOST",
        help="interface of the gateway and the callback listener (default 127.0.0.1; "
        "0.0.0.0 for agents on other machines)",
    )
    p.add_argument("--gateway-port", type=int, default=0, metavar="PORT", help="default: any free")
    p.add_argument(
        "--gateway-url",
        metavar="URL",
        help="how agents reach the gateway, if not at the listen address (a tunnel); HTTP "
        "agents post their results there too, as in the cluster",
    )
    p.set_defaults(func=cmd_rehearse)


def cmd_rehearse(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        docs = [d for d in load_documents([args.file]) if d.is_experiment]
    except LoadError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    if len(docs) != 1:
        print(f"error: {args.file}: rehearse runs one RLExperiment, found {len(docs)}", file=err)
        return EXIT_USAGE
    (doc,) = docs
    exp, problems = (None, doc.problems) if doc.problems else parse_experiment(doc.body)
    unset = unset_type(doc.body) if exp is not None else []
    if unset:
        exp, problems = None, [*unset, *problems]
    for problem in problems:
        print(f"{doc.source}: {problem}", file=err)
    if exp is None:
        print(f"{doc.source}: {len(errors(problems))} error(s); nothing rehearsed", file=err)
        return EXIT_USAGE
    try:
        # Lazy on purpose: the core install has none of the bundle's dependencies.
        from agentrl.bundle import rehearse
    except ImportError as exc:
        if (exc.name or "").startswith("agentrl"):
            raise  # our own code is broken: not a missing extra
        print(
            f"error: agentrl rehearse runs the bundle's code (gateway, agent backends), which "
            f"needs the bundle extra ({exc.name} is not installed): {EXTRA}",
            file=err,
        )
        return EXIT_USAGE
    config = runtime_config(exp, OperatorDefaults(image=None))
    options = rehearse.Options(
        engine=args.engine or "",
        out=args.out or Path("rehearsal") / exp.metadata.name,
        prompts=args.prompts,
        samples=args.samples,
        split=args.split,
        data=args.data,
        model_dir=args.model_dir,
        timeout_s=args.timeout,
        agent_url=args.agent_url,
        listen=args.listen,
        gateway_port=args.gateway_port,
        gateway_url=args.gateway_url,
        pod_env={e.name: e.value for e in exp.spec.runtime.env if e.value is not None},
    )
    if not args.engine:
        # After the spec: the command names its model and the SGLang flags it implies.
        print(
            "error: --engine is required: the URL of an SGLang server for the spec's model. "
            "Start one (a workstation GPU, or SGLang's CPU backend) with\n"
            f"  {rehearse.engine_command(config, options)}\n"
            "and pass --engine http://127.0.0.1:30000",
            file=err,
        )
        return EXIT_USAGE
    try:
        report = rehearse.rehearse(config, options)
    except rehearse.RehearsalError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    if args.output == "json":
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        out.write(report.text())
    return int(report.exit_code)
