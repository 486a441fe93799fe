"""Run a rehearsal: the pods' episode path on this machine, against a real SGLang engine.

Nothing here plays an episode: the gateway is `GatewayServer` (the hub's, started the way
the hub starts it), the rollout talks to it through `GatewayClient` over the admin API,
the agent backend is `build_backend`'s for the spec, and every episode is
`rollout.batch.run_groups` -> `run_episode` (turns merged by `traces.merge_turns`), with
rewards post-processed by slime's hook (`rewards.post_process_rewards`, reading the
runtime config from a file as in the pods) and groups judged by the spec's dynamic-sampling
filter. This module picks the inputs, wires the parts, and reads what the observers saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import ipaddress
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
from yarl import URL

from agentrl.api.constants import SPLIT_TRAIN
from agentrl.api.formats import base_url_problem
from agentrl.api.models import HttpAgent
from agentrl.api.rules import credential_in_value, is_local_path, looks_secret, loopback
from agentrl.api.runtime import RuntimeConfig
from agentrl.bundle.agents.agentcore import runtime_endpoint
from agentrl.bundle.agents.base import received_reward
from agentrl.bundle.agents.http import HttpAgentBackend
from agentrl.bundle.gateway import GatewayClient, GatewayServer, GatewaySettings
from agentrl.bundle.gateway.hub import hub_answers
from agentrl.bundle.gateway.tokenizer import hub_family
from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.rehearse.checks import (
    Finding,
    ToolCallCheck,
    callback_findings,
    context_findings,
)
from agentrl.bundle.rehearse.observe import Observations, ObservedBackend, ObservedSessions, Seen
from agentrl.bundle.rehearse.options import (
    Options,
    Plan,
    check_hub_tokenizer,
    plan_inputs,
    slime_args,
)
from agentrl.bundle.rehearse.report import (
    EpisodeReport,
    EpisodeView,
    GroupReport,
    RehearsalError,
    Report,
    Span,
    json_type,
)
from agentrl.bundle.rewards import post_process_rewards
from agentrl.bundle.rollout.batch import RolloutContext, run_groups
from agentrl.bundle.rollout.driver import settle_engines
from agentrl.bundle.rollout.episode import EpisodeOutcome
from agentrl.bundle.rollout.filters import (
    FilterError,
    GroupFilter,
    has_reward_variance,
    load_filter,
    reward_std,
)
from agentrl.bundle.rollout.runtime import build_context
from agentrl.bundle.rollout.sampling import SamplingPlan, group_verdict
from agentrl.bundle.rollout.types import SampleFields, slime_types, to_sample
from agentrl.slimecmd.flags import sglang_model_args

ENGINE_TIMEOUT_S = 10.0
WILDCARDS = ("0.0.0.0", "::", "")
SAMPLES_FILE, CONFIG_FILE, LOG_FILE = "samples.jsonl", "runtime-config.json", "rehearse.log"


def rehearse(config: RuntimeConfig, options: Options) -> Report:
    """Run the rehearsal; RehearsalError when it cannot start (the CLI exits 2), with nothing
    written: `options.out` is created once the engine, the gateway and the agent backend are
    up, and the log up to then is held in memory."""
    http = config.spec.agent.http
    # Where the pods' rollout sends episodes, when --agent-url sends the rehearsal's elsewhere.
    pods_agent = str(http.url) if http and options.agent_url not in (None, str(http.url)) else None
    config = with_agent_url(config, options.agent_url)
    check_gateway_url(options.gateway_url)
    check_out(options.out)
    check_runtime_reaches_gateway(config, options)
    # The prompts' count, the checks and the gateway's start read a hub id's files: the hub
    # is asked once for the whole run.
    with hub_answers():
        return _run(config, options, pods_agent)


def check_out(out: Path) -> None:
    """`--out` must be a directory, or nothing yet: refused before anything starts, rather
    than when the rehearsal would begin writing there."""
    if out.exists() and not out.is_dir():
        raise RehearsalError(
            f"--out {out}: a file, not a directory; name a directory for samples.jsonl, "
            "report.json and the log (it is created when the rehearsal starts)"
        )


class RunLog(logging.Handler):
    """The rehearsal's log: held in memory until the rehearsal can run, so that one which
    cannot (no engine, no tokenizer, an agent backend that cannot be built) leaves no
    `--out` directory behind; then written to `<out>/rehearse.log`, what came before first."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []
        self.file: logging.FileHandler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.file is None:
            self.held.append(record)
        else:
            self.file.handle(record)

    def open(self, out: Path) -> None:
        """Create `out` and the log file in it, and write what was held."""
        try:
            out.mkdir(parents=True, exist_ok=True)
            file = logging.FileHandler(out / LOG_FILE, mode="w", encoding="utf-8")
        except OSError as exc:
            raise RehearsalError(f"--out {out}: cannot write there ({exc})") from None
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for record in self.held:
            file.handle(record)
        self.held, self.file = [], file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        super().close()


def _run(config: RuntimeConfig, options: Options, pods_agent: str | None = None) -> Report:
    plan = plan_inputs(config.spec, options)
    log = RunLog()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(log)  # the report says everything once; details go to the log
    root.setLevel(logging.INFO)
    try:
        return asyncio.run(_rehearse(config, options, plan, log, pods_agent))
    finally:
        root.removeHandler(log)
        root.setLevel(old_level)
        log.close()


async def _rehearse(
    config: RuntimeConfig, options: Options, plan: Plan, log: RunLog, pods_agent: str | None
) -> Report:
    started = time.perf_counter()
    spec = config.spec
    engine_model = await check_engine(options.engine, config, options)
    # Before the gateway: it would stop on the same, without naming --model-dir.
    check_hub_tokenizer(spec.model.path, options.model_dir)
    server = await _start_gateway(config, options)
    client = GatewayClient(_http(_loopback(options.listen), server.admin_port),
                           server.settings.admin_token)  # fmt: skip
    ctx = None
    try:
        # The pods' own builder: the spec's backend and its one maxConcurrent semaphore.
        ctx = await _context(config, options, client)
        # Everything that can refuse the rehearsal has passed: from here it runs, and writes.
        log.open(options.out)
    except BaseException:
        if ctx is not None:
            await ctx.backend.aclose()
        await client.aclose()
        await server.stop()
        raise
    seen = Observations()
    assert server.frontend is not None
    backend = ctx.backend
    observed = ObservedBackend(backend, seen)
    # Observed on the way, not changed: the episodes talk to the same client and backend.
    ctx.sessions = ObservedSessions(client, server.store, seen)
    ctx.backend = observed
    try:
        outcomes = await run_groups(ctx, plan.groups, plan.episode, plan.split)
        await settle_engines(ctx, "Rehearsal", 0)
    finally:
        await observed.aclose()
        await client.aclose()
        await server.stop()
    runner = server.frontend.runner
    tools = ToolCallCheck(runner.renderer, runner.tokenizer, _parsing(server.settings))
    http = backend if isinstance(backend, HttpAgentBackend) else None
    context = server.context_length  # the spec's, else the checkpoint's config.json
    episodes = [
        _episode(
            o, seen[o.session_id], tools, http.callback_url(o.session_id) if http else None, context
        )
        for group in outcomes
        for o in group
    ]
    samples_path = _write_samples(config, options, outcomes)
    report = Report(
        experiment=f"{config.namespace}/{config.experiment}",
        split=plan.label,
        engine=options.engine,
        engine_model=engine_model,
        gateway=server.url,
        agent=_agent(config),
        episodes=episodes,
        groups=_groups(outcomes, plan, config),
        seconds=time.perf_counter() - started,
        samples_path=str(samples_path),
        log_path=str(options.out / LOG_FILE),
        view=_view(outcomes, seen, runner.tokenizer),
        notes=[
            *plan.notes,
            *_notes(outcomes, plan, config, engine_model),
            *_context_notes(config, server.settings.tokenizer_path, context),
            *env_notes(config, options.pod_env, os.environ),
        ],
        pods_gateway=pods_gateway(config, options),
        pods_agent=pods_agent,
    )
    (options.out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


def _notes(
    outcomes: Sequence[Sequence[EpisodeOutcome]],
    plan: Plan,
    config: RuntimeConfig,
    engine_model: str,
) -> list[str]:
    """What fails no episode but wastes a run: responses cut at the budget, another model."""
    notes = []
    merges = [o.merge for g in outcomes for o in g if o.failure is None and o.merge is not None]
    clipped = [m for m in merges if m.clipped_segments]
    if clipped:
        budget, lost = plan.episode.max_response_len, sum(m.clipped_tokens for m in clipped)
        notes.append(
            f"{len(clipped)} episode(s) outgrew the response budget ({budget} tokens, "
            f"grpo.maxResponseLength): {lost} sampled token(s) after it train nothing"
        )
    deadline = plan.pods_timeout_s
    slow = [o for g in outcomes for o in g if deadline is not None and o.seconds > deadline]
    if slow:
        notes.append(
            f"{len(slow)} episode(s) ran longer than the agent's timeoutSeconds ({deadline:g}s), "
            f"which --timeout replaced here ({plan.episode.timeout_s:g}s): in the pods each "
            "would fail as timeout unless it runs faster there (the pods' engines are GPUs)"
        )
    spec_model = config.spec.model.path.rstrip("/").rsplit("/", 1)[-1].lower()
    served = engine_model.rstrip("/").rsplit("/", 1)[-1].lower()
    if served and served != spec_model:
        notes.append(
            f"the engine serves {engine_model!r}, the spec names {config.spec.model.path!r}: "
            "the rehearsal runs what the engine serves"
        )
    return notes


# The prefixes of the env variables the pods' agent path reads through its libraries:
# huggingface_hub and transformers (the gateway's tokenizer and config.json: HF_ENDPOINT,
# HF_HUB_OFFLINE, HF_TOKEN...), boto3 (the AgentCore backend and its S3 results: AWS_REGION,
# AWS_ENDPOINT_URL_BEDROCK_AGENTCORE...) and agentrl's own (AGENTRL_BIND_HOST, the HTTP
# agents' callback listener).
AGENT_PATH_ENV_PREFIXES = ("HF_", "HUGGING_FACE_", "TRANSFORMERS_", "AWS_", "AGENTRL_")


def env_notes(
    config: RuntimeConfig, pod_env: Mapping[str, str], here: Mapping[str, str]
) -> list[str]:
    """`spec.runtime.env` variables the agent path reads that the rehearsal ran without:
    the pods' containers get them, the rehearsal runs in this machine's environment (a
    mirror, a VPC endpoint or a region of the pods' is not necessarily reachable from here,
    so they are not applied). A plain value that differs from this machine's, and a
    Secret's variable this machine does not set, are named. This machine's values never
    are: one of them may be a credential (a local HF_TOKEN), and the report is printed and
    written to --out."""
    differ = [
        f"{_shown_env(name, value)} (here: {'unset' if name not in here else 'another value'})"
        for name, value in pod_env.items()
        if name.startswith(AGENT_PATH_ENV_PREFIXES) and here.get(name) != value
    ]
    unset = [
        name
        for name in config.runtime_secret_envs
        if name.startswith(AGENT_PATH_ENV_PREFIXES) and name not in here
    ]
    if not differ and not unset:
        return []
    parts = [*differ, *(f"{name} (from a Secret; here: unset)" for name in unset)]
    return [
        "spec.runtime.env sets variables the pods' gateway or agent backend read, which this "
        f"rehearsal ran without: {', '.join(parts)}; set them here to rehearse with them"
    ]


def _shown_env(name: str, value: str) -> str:
    """A pods' plain env value for the report, unless its name marks a secret (`HF_TOKEN`,
    `AWS_SECRET_ACCESS_KEY`: `looks_secret`) or its value is one (`credential_in_value`: a
    mirror's URL with a password, a `Bearer` value), both of which validation warns of in
    plain text: the report is printed and written to --out, and a token there outlives the
    rehearsal."""
    if looks_secret(name) or credential_in_value(value) is not None:
        return f"{name} (its plain value in spec.runtime.env, not shown)"
    return f"{name}={value!r}"


def _context_notes(config: RuntimeConfig, tokenizer_path: str, context: int | None) -> list[str]:
    """The context budget the rehearsal's gateway never had, where the pods' gateway has one:
    without `spec.model.contextLength` both read the checkpoint's config.json (the same
    `checkpoint_context_length`), and the pods' launcher refuses a local checkpoint without
    one, while `--model-dir` needs only the tokenizer's files. Then no call here had its
    `max_new_tokens` capped at the room left and no episode was judged against the context
    (`context_exceeded`), where in the pods every call is capped."""
    if context is not None or config.spec.model.context_length is not None:
        return []
    return [
        f"the model's context is unknown here: spec.model.contextLength is unset and "
        f"{tokenizer_path} has no readable config.json naming one, so this rehearsal capped "
        "no call's max_new_tokens and checked no episode against the context, while in the "
        "pods the gateway caps every call at the context of the checkpoint's config.json; "
        "copy config.json next to the tokenizer files (--model-dir), or set "
        "spec.model.contextLength"
    ]


# -- the engine -------------------------------------------------------------------------


def engine_command(config: RuntimeConfig, options: Options) -> str:
    """How to start an SGLang engine for this spec on this machine: a hub id as the spec
    names it (`--model-dir` may hold only the tokenizer's files, which SGLang cannot serve);
    a path in the pods as its local copy, `--model-dir`."""
    path = config.spec.model.path
    model = str(options.model_dir) if options.model_dir and is_local_path(path) else path
    spec_flags = [
        *sglang_model_args(config.spec),
        *extra_sglang_args(config.spec.runtime.extra_args),
    ]
    flags = [a.replace("--sglang-", "--", 1) for a in spec_flags]
    return " ".join(["python -m sglang.launch_server --model-path", model, *flags, "--port 30000"])


def extra_sglang_args(extra_args: Sequence[str]) -> list[str]:
    """The `--sglang-*` flags of `runtime.extraArgs`, each with its values: slime starts the
    pods' engines with them (speculative decoding, whose reserved tokens shrink every call's
    room in the context; the KV cache's size, which caps a request below the context), so the
    rehearsal's engine gets them too. agentrl's recipe flags (memory fraction, CUDA graphs,
    log levels) fit the pods' GPUs, not this machine's, and are left out."""
    out: list[str] = []
    taking = False
    for arg in extra_args:
        if arg.startswith("--"):
            taking = arg.startswith("--sglang-")
        if taking:
            out.append(arg)
    return out


async def check_engine(url: str, config: RuntimeConfig, options: Options) -> str:
    """The model the engine serves; RehearsalError (with the command to start one) if it
    cannot be reached or is no SGLang server."""
    hint = (
        f"start one (a workstation GPU, or SGLang's CPU backend) with\n"
        f"  {engine_command(config, options)}\n"
        "and pass --engine http://127.0.0.1:30000"
    )
    timeout = aiohttp.ClientTimeout(total=ENGINE_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(url.rstrip("/") + "/get_model_info") as resp,
        ):
            body = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise RehearsalError(
            f"--engine {url}: no SGLang engine answers there ({type(exc).__name__}: "
            f"{str(exc)[:200]}); {hint}"
        ) from None
    if status != 200:
        raise RehearsalError(
            f"--engine {url}: GET /get_model_info answered HTTP {status}, so it is no SGLang "
            f"server; {hint}"
        )
    try:
        info = orjson.loads(body)
    except orjson.JSONDecodeError:
        info = {}
    return str(info.get("model_path", "")) if isinstance(info, dict) else ""


# -- gateway and backend ----------------------------------------------------------------


def _loopback(host: str) -> str:
    """Where this machine reaches a listener bound to `host`. aiohttp binds "::" to IPv6
    alone (asyncio sets IPV6_V6ONLY), so 127.0.0.1 would find nothing there."""
    if host == "::":
        return "::1"
    return "127.0.0.1" if host in WILDCARDS else host


def _http(host: str, port: int | None = None) -> str:
    """`http://host:port`, an IPv6 address in brackets (`http://::1:80` is no URL)."""
    return str(URL.build(scheme="http", host=host, port=port))


# Documentation prefixes (RFC 5737, RFC 3849): a UDP `connect` to one picks the source
# address of the route there and sends nothing.
_ROUTE_PROBES = ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1"))


def _advertised(listen: str) -> str:
    """The address agents are handed: the listen address, or this machine's own. Its own is
    the source address of its default route (a UDP `connect` picks it and sends nothing);
    the host name is no guide: Debian's /etc/hosts maps it to 127.0.1.1, and many machines
    map it to 127.0.0.1, which agents elsewhere would call as their own loopback."""
    if listen not in WILDCARDS:
        return listen
    # "0.0.0.0" serves IPv4 alone and "::" IPv6 alone (asyncio binds it IPV6_V6ONLY): an
    # address of the other family would reach nothing. "" binds both.
    families = {"0.0.0.0": (socket.AF_INET,), "::": (socket.AF_INET6,)}.get(
        listen, (socket.AF_INET, socket.AF_INET6)
    )
    candidates: list[str] = []
    for family, target in _ROUTE_PROBES:
        if family not in families:
            continue
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((target, 9))
            candidates.append(str(probe.getsockname()[0]))
    if socket.AF_INET in families:
        with contextlib.suppress(OSError):
            candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    if socket.AF_INET6 in families:
        with contextlib.suppress(OSError):
            found = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET6)
            candidates += [str(info[4][0]) for info in found]
    for address in candidates:
        ip = ipaddress.ip_address(address)
        if not (ip.is_loopback or ip.is_link_local):  # fe80:: needs a zone agents lack
            return str(address)
    raise RehearsalError(
        f"--listen {listen}: this machine has no address but loopback to hand agents on "
        "other machines; pass --gateway-url with the URL they reach the gateway at"
    )


async def _start_gateway(config: RuntimeConfig, options: Options) -> GatewayServer:
    model = config.spec.model
    family = model.renderer_family or "auto"
    tokenizer = str(options.model_dir) if options.model_dir else model.path
    if options.model_dir and family == "auto":
        # `auto` resolves from the hub id, which a local copy's path no longer is: the
        # hand-written family it names, else the checkpoint's chat template.
        family = hub_family(model.path) or "default"
    settings = dataclasses.replace(
        GatewaySettings.from_runtime_config(config, options.engine, host=options.listen),
        tokenizer_path=tokenizer,
        renderer_family=family,
        port=options.gateway_port,
        public_base_url=options.gateway_url,
        admin_token=secrets.token_urlsafe(32),
    )
    advertised = None
    if not options.gateway_url and options.listen in WILDCARDS:
        advertised = _advertised(options.listen)  # before anything binds: it may refuse
    server = GatewayServer(settings, BundleMetrics())
    try:
        await server.start()
    except Exception as exc:
        await server.stop()
        raise RehearsalError(
            f"the gateway could not start: {type(exc).__name__}: {str(exc)[:500]}"
        ) from None
    if advertised is not None:
        # Bound to every interface: agents get this machine's address, not 0.0.0.0.
        url = _http(advertised, server.port)
        server.settings = dataclasses.replace(server.settings, public_base_url=url)
    return server


def pods_gateway(config: RuntimeConfig, options: Options) -> tuple[str, str]:
    """(the gateway URL agents are handed in the pods, where it comes from): the hub's own
    `GatewaySettings.from_runtime_config` of the same runtime config, so the URL is the one
    the pods hand out (`spec.gateway.publicUrl`, else the in-cluster Service). The
    rehearsal's agents call this machine's gateway instead; the report says which URL it
    did not try (`--engine` stands in for slime's router, which the URL does not depend on)."""
    url = GatewaySettings.from_runtime_config(config, options.engine).base_url
    if config.spec.gateway.public_url is not None:
        return url, "spec.gateway.publicUrl"
    return url, (
        "the gateway's in-cluster Service: spec.gateway.publicUrl is unset, and the name "
        "resolves only inside the cluster"
    )


def with_agent_url(config: RuntimeConfig, url: str | None) -> RuntimeConfig:
    """The config with the HTTP agent's endpoint where it runs now (`--agent-url`)."""
    if url is None:
        return config
    agent = config.spec.agent
    if agent.http is None:
        raise RehearsalError(
            "--agent-url applies to HTTP agents; this spec's agent is an AgentCore runtime "
            "(point boto3 elsewhere with AWS_ENDPOINT_URL_BEDROCK_AGENTCORE)"
        )
    problem = base_url_problem(url)  # what spec.agent.http.url would be told
    if problem is not None:
        raise RehearsalError(f"--agent-url {url}: {problem}")
    http = HttpAgent.model_validate({**agent.http.dump(), "url": url})
    spec = config.spec.model_copy(update={"agent": agent.model_copy(update={"http": http})})
    return config.model_copy(update={"spec": spec})


def check_gateway_url(url: str | None) -> None:
    """`--gateway-url` stands in for `spec.gateway.publicUrl` and is refused as it would be:
    agents are handed `<url>/sessions/<id>/v1` and `<url>/agentrl/callback/<id>`, which a
    query or fragment swallows (and a key there is in every agent's payload and log)."""
    problem = None if url is None else base_url_problem(url)
    if problem is not None:
        raise RehearsalError(f"--gateway-url {url}: {problem}")


def check_runtime_reaches_gateway(config: RuntimeConfig, options: Options) -> None:
    """An AgentCore runtime runs where it is deployed, in AWS: handed this machine's loopback
    address for the gateway, it calls its own host, and every episode fails, each after its
    invocation is paid for. Refused before anything is invoked, unless boto3 is pointed at a
    runtime on this machine (`AWS_ENDPOINT_URL_BEDROCK_AGENTCORE`: a local app, a stand-in),
    which does reach it."""
    agent_core = config.spec.agent.agent_core
    if agent_core is None or options.gateway_url is not None:
        return
    host = _advertised(options.listen)
    handed = _http(host)
    if not loopback(handed):
        return  # this machine's address: whether AWS routes to it is the user's to know
    endpoint = runtime_endpoint(agent_core.region)
    if loopback(endpoint):
        return
    raise RehearsalError(
        f"--gateway-url is required for an AgentCore agent: the runtime at {endpoint} would "
        f"be handed the gateway at {handed}:<port>, a loopback address, which it cannot reach "
        "from AWS; every episode would fail after its invocation is paid for. Pass "
        "--gateway-url with a URL the runtime can reach (a tunnel to this machine, with "
        "--gateway-port the port it forwards to)"
    )


async def _context(
    config: RuntimeConfig, options: Options, client: GatewayClient
) -> RolloutContext:
    """The rollout context as the pods build it (`runtime.build_context`): HTTP agents post
    results to the gateway's URL, which relays them to the backend's listener (on this
    machine: bound with the gateway, reached on loopback)."""
    try:
        return await build_context(
            config, client, listen_host=options.listen, advertise_host=_loopback(options.listen)
        )
    except ValueError as exc:
        http = config.spec.agent.http
        if http is None or not http.headers:
            raise RehearsalError(str(exc)) from None
        exports = "; ".join(
            f"export {config.http_header_envs[h.name]}=<key {h.secret_key_ref.key} of Secret "
            f"{h.secret_key_ref.name}>"
            for h in http.headers
        )
        raise RehearsalError(
            f"{exc}. In a rehearsal the pod's env vars are yours to set: {exports}"
        ) from None


def _agent(config: RuntimeConfig) -> str:
    agent = config.spec.agent
    if agent.http is not None:
        return f"http {agent.http.url}"
    assert agent.agent_core is not None
    return f"agentCore {agent.agent_core.runtime_arn}"


def _parsing(settings: GatewaySettings) -> str:
    parts = [f"rendererFamily {settings.renderer_family}"]
    if settings.renderer_family == "default" and settings.tool_call_parser:
        parts.append(f"toolCallParser {settings.tool_call_parser}")  # only `default` reads it
    return " and ".join(parts)


# -- reading the outcomes ---------------------------------------------------------------


def _episode(
    outcome: EpisodeOutcome,
    seen: Seen,
    tools: ToolCallCheck,
    callback_url: str | None,
    context_length: int | None,
) -> EpisodeReport:
    failed = outcome.failure is not None
    samples = [] if failed else outcome.samples
    trained = sum(sum(s.loss_mask) for s in samples)
    tool_failures, tool_findings = tools.failures(seen.turns)
    findings: list[Finding] = [
        *context_findings(seen, context_length),
        *tool_findings,
        *callback_findings(seen, callback_url),
    ]
    first = outcome.samples[0]
    return EpisodeReport(
        session_id=outcome.session_id,
        group=first.group_index if first.group_index is not None else 0,
        index=first.index if first.index is not None else 0,
        reason=outcome.failure,
        message=outcome.message,
        findings=findings,
        reward=outcome.reward,
        received=_received(seen.document),
        turns=len(seen.turns),
        prompt_tokens=len(seen.turns[0].prompt_ids) if seen.turns else 0,
        completion_tokens=sum(len(t.completion_ids) for t in seen.turns),
        sequences=len(samples),
        trained_tokens=trained,
        masked_tokens=sum(s.response_length for s in samples) - trained,
        # Every sequence of it, those that train nothing and are left out of `samples` too.
        truncated=outcome.truncated or any(t.finish_reason == "length" for t in seen.turns),
        tool_call_failures=tool_failures,
        seconds=outcome.seconds,
        base_url=seen.base_url,
        calls=seen.calls,
        answers=seen.answers,
        via=seen.via,
        callback_url=callback_url,
    )


def _received(document: Mapping[str, Any] | None) -> tuple[Any, str] | None:
    """The reward as the agent sent it (`rewards`, else `reward`), and its JSON type."""
    if document is None:
        return None
    value = received_reward(document)
    return value, json_type(value)


def _groups(
    outcomes: Sequence[Sequence[EpisodeOutcome]], plan: Plan, config: RuntimeConfig
) -> list[GroupReport]:
    """Each group's rewards, and what dynamic sampling makes of them in a train step: the
    episodes that count (`failedEpisodes`), `minValidSamplesPerGroup` and the spec's filter,
    decided by the rollout's own `group_verdict`. Eval groups are never filtered."""
    grpo = config.spec.grpo
    name = grpo.dynamic_sampling_filter if plan.split == SPLIT_TRAIN else None
    sampling = SamplingPlan.from_spec(grpo, grpo.rollout_batch_size)
    group_filter: GroupFilter | None = None
    setup_error = None
    try:
        group_filter = load_filter(name, _slime_args(config, plan))
    except FilterError as exc:
        setup_error = str(exc)
    out = []
    for i, group in enumerate(outcomes):
        counted = sampling.counted(group)
        rewards = [o.reward for o in counted]
        report = GroupReport(
            group=i,
            rewards=[o.reward for o in group],
            counted=len(counted),
            std=reward_std(rewards),
            zero_variance=not has_reward_variance(rewards),
            filter=name,
            error=setup_error,
        )
        if plan.split == SPLIT_TRAIN and setup_error is None:
            try:
                verdict = group_verdict(
                    sampling, group_filter, counted, functools.partial(_slime_samples, counted)
                )
            except FilterError as exc:
                report.error = str(exc)
            else:
                report.verdict = (
                    "skipped" if verdict is None else "kept" if verdict.keep else "dropped"
                )
                report.drop_reason = None if verdict is None else verdict.reason
        out.append(report)
    return out


def _slime_samples(group: Sequence[EpisodeOutcome]) -> list[Any]:
    types = slime_types(prefer_plain=True)
    return [to_sample(s, types) for o in group for s in o.samples]


def _slime_args(config: RuntimeConfig, plan: Plan) -> SimpleNamespace:
    """The slime args a user filter is called with: the pods' (`options.slime_args`), the
    group size the rehearsal's (`--samples`), as its groups are that size."""
    args = slime_args(config.spec, f"{config.namespace}/{config.experiment}")
    args.n_samples_per_prompt = plan.samples_per_prompt
    return args


def _write_samples(
    config: RuntimeConfig, options: Options, outcomes: Sequence[Sequence[EpisodeOutcome]]
) -> Path:
    """The merged samples slime would train on, one JSON line each, with the advantage the
    reward post-processing gives them (slime's hook, reading the runtime config file)."""
    config_path = options.out / CONFIG_FILE
    config_path.write_text(config.to_json() + "\n", encoding="utf-8")
    fields = [s for group in outcomes for o in group for s in o.samples]
    types = slime_types(prefer_plain=True)
    args = SimpleNamespace(agentrl_config_path=str(config_path), reward_key=None)
    raw, advantages = post_process_rewards(args, [to_sample(s, types) for s in fields])
    path = options.out / SAMPLES_FILE
    with path.open("wb") as out:
        for s, reward, advantage in zip(fields, raw, advantages, strict=True):
            out.write(orjson.dumps(_sample_json(s, reward, advantage)) + b"\n")
    return path


def _sample_json(s: SampleFields, reward: float, advantage: float) -> dict[str, Any]:
    return {
        "session_id": s.session_id,
        "group": s.group_index,
        "index": s.index,
        "segment": s.metadata.get("segment_index", 0),
        "status": s.status.value,
        "episode_error": s.metadata.get("episode_error"),
        "reward": reward,
        "advantage": advantage,
        "num_turns": s.metadata.get("num_turns", 0),
        "prompt_length": len(s.tokens) - s.response_length,
        "response_length": s.response_length,
        "tokens": s.tokens,
        "loss_mask": s.loss_mask,
        "rollout_log_probs": s.rollout_log_probs,
    }


def _view(
    outcomes: Sequence[Sequence[EpisodeOutcome]], seen: Observations, tokenizer: Any
) -> EpisodeView | None:
    """The first episode that trains something, else the first that called the model."""
    flat = [o for g in outcomes for o in g]
    pick = next((o for o in flat if o.failure is None), None) or next(
        (o for o in flat if seen[o.session_id].turns), None
    )
    if pick is None:
        return None
    turns = seen[pick.session_id].turns
    spans: list[Span] = []
    if pick.failure is None:
        sample = pick.samples[0]
        prompt = len(sample.tokens) - sample.response_length
        spans.append(Span("prompt", prompt, tokenizer.decode(sample.tokens[:prompt])))
        response = sample.tokens[prompt:]
        start = 0
        for i in range(1, len(response) + 1):
            if i == len(response) or sample.loss_mask[i] != sample.loss_mask[start]:
                kind = "trained" if sample.loss_mask[start] else "masked"
                spans.append(Span(kind, i - start, tokenizer.decode(response[start:i])))
                start = i
    return EpisodeView(
        session_id=pick.session_id,
        turns=[(len(t.prompt_ids), len(t.completion_ids), t.finish_reason) for t in turns],
        sequences=len(pick.samples) if pick.failure is None else 0,
        spans=spans,
    )
