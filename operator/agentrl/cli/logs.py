"""`agentrl logs NAME`: an experiment's driver output, from wherever it still is.

Where KubeRay (v1.6, v1.7, K8sJobMode) leaves the output of slime's driver:

- the head pod, while the Ray cluster lives: Ray's job log, complete, read with
  `ray job logs` inside the head container;
- the submitter pod: KubeRay's submitter Job runs `ray job submit --no-wait`, then
  agentrl's follower prints the driver's output from its first line, once, following the
  log again from where it stopped whenever the stream ends before the job
  (agentrl.render.rayjob.submitter_script). KubeRay
  keeps that Job after the run (with `shutdownAfterJobFinishes` it deletes only the Ray
  cluster, `ttlSecondsAfterFinished` seconds after the end) until the RayJob is deleted,
  and deletes it before each retry. kubelet rotates container logs (10 MiB by default),
  so on a long run its log holds the tail only;
- the checkpoint volume, when `spec.checkpoint.path` is set: the launcher keeps each
  launch's output in `<path>/logs/<experiment>-attempt-<N>-<UTC time>.log`; `--attempt N`
  reads it through the head pod, which mounts the volume.

The CLI shells out to `kubectl`: it honours the user's kubeconfig, contexts and exec auth
plugins, and the cli layer stays free of a Kubernetes client (import-linter). `choose` is
pure (objects in, a kubectl command or an explanation out); `cmd_logs` does the I/O.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from agentrl.api.constants import (
    GROUP,
    KIND,
    LABEL_COMPONENT,
    LABEL_EXPERIMENT,
    LAUNCH_LOG_DIR,
    LAUNCH_LOG_NAME,
    PLURAL,
    RAY_DASHBOARD_PORT,
)
from agentrl.api.formats import DNS1035_LABEL, DNS1123_LABEL, DNS1123_LABEL_MAX, FORMATS
from agentrl.cli.completion import mark
from agentrl.render.rayjob import (
    COMPONENT_HEAD,
    COMPONENT_SUBMITTER,
    HEAD_CONTAINER,
    SUBMITTER_CONTAINER,
)

Obj = Mapping[str, Any]

# Labels KubeRay and Kubernetes put on the pods (KubeRay: ray-operator/controllers/ray/utils/
# constant.go; the Job controller labels its pods with the Job's name).
RAY_CLUSTER_LABEL = "ray.io/cluster"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
RAYJOB_RESOURCE = "rayjobs.ray.io"
EXPERIMENT_RESOURCE = f"{PLURAL}.{GROUP}"
EXIT_USAGE = 2  # a wrong command line, as argparse exits
KUBELET_LOG_MAX = "10 MiB"  # kubelet's default containerLogMaxSize
# Reads one attempt's file on the volume (positional args; nothing is interpolated).
ATTEMPT_SCRIPT = (
    'dir=$1 name=$2 n=$3 follow=$4 lines=${5:-+1}; for f in "$dir/$name-attempt-$n-"*.log; do '
    'if [ ! -e "$f" ]; then echo "agentrl logs: $dir holds no log file of attempt $n; '
    'it holds:" >&2; ls "$dir" 2>/dev/null | grep -- "^$name-attempt-" >&2; exit 3; fi; '
    'if [ "$follow" = 1 ]; then exec tail -n "$lines" -f "$f"; fi; '
    'exec tail -n "$lines" "$f"; done'
)
# `ray job logs` has no --tail; the last lines of its output, in the head container.
HEAD_TAIL_SCRIPT = 'ray job logs --address "$1" "$2" | tail -n "$3"'
# kubectl's --since: a Go duration (5s, 2m, 1h30m).
DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


@dataclass(frozen=True)
class Stream:
    """Run `kubectl <argv>` and let its output through; `note` says what it is."""

    argv: list[str]
    note: str
    shown: list[str] | None = None  # what to print instead of argv, when argv is unreadable


@dataclass(frozen=True)
class Nothing:
    """No pod holds what was asked for; `message` says why and where to look."""

    message: str


def add_parser(sub: Any) -> None:
    """Register `agentrl logs` on the root parser's subcommands."""
    p = sub.add_parser(
        "logs",
        help="print an experiment's driver output (head pod, submitter pod or volume)",
        description=(
            "Print slime's driver output of an experiment through kubectl and your "
            "kubeconfig: from the head pod while the Ray cluster lives, else from KubeRay's "
            "submitter pod; --attempt N reads attempt N's file on the checkpoint volume."
        ),
    )
    mark(p.add_argument("name", type=_experiment_name, help="RLExperiment name"), "experiment")
    mark(
        p.add_argument(
            "-n", "--namespace", type=_namespace, help="namespace (default: the context's)"
        ),
        "namespace",
    )
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming new output")
    p.add_argument(
        "--attempt",
        type=_whole_number(1),
        metavar="N",
        help="attempt N's log file on the checkpoint volume (status.attempts counts them)",
    )
    p.add_argument(
        "--tail",
        type=_whole_number(0),
        metavar="N",
        help="only the last N lines (as kubectl logs --tail)",
    )
    p.add_argument(
        "--since",
        type=_duration,
        metavar="DURATION",
        help="only lines newer than DURATION, e.g. 10m or 2h (as kubectl logs --since; "
        "from the submitter pod, whose log has kubelet's timestamps)",
    )
    mark(p.add_argument("--context", help="kubeconfig context to use"), "context")
    p.set_defaults(func=cmd_logs)


def _kube_name(pattern: str, what: str, why: str) -> Callable[[str], str]:
    """An argparse type: a name of `pattern` (agentrl.api.formats), at most 63 characters.
    `why`: what a wrong one would do, were it passed on."""
    hint = FORMATS[pattern].hint

    def check(text: str) -> str:
        if len(text) > DNS1123_LABEL_MAX or not re.match(pattern, text):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} ({hint}); {why}")
        return text

    return check


# Anything else is not an experiment's name, e.g. a kubectl flag.
_experiment_name = _kube_name(
    DNS1035_LABEL, "an RLExperiment name", "agentrl logs passes no flags to kubectl"
)
# Checked here, not by the API server: kubectl would take any word to it, and its answer (a
# NotFound for the experiment) would not say the namespace was the mistake.
_namespace = _kube_name(DNS1123_LABEL, "a namespace name", "give it as kubectl get ns lists it")


def _whole_number(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `least` on."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {least} on, not {text!r}"
            )
        return value

    return parse


def _duration(text: str) -> str:
    if not DURATION.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 10m or 1h30m")
    return text


# ---- pure: which pod, which command -----------------------------------------------------


def usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line whatever the cluster holds, else None. Checked
    before the first kubectl call: a refusal needs no cluster (with none, the connection
    error came first and hid it) and costs no round trip."""
    if args.attempt is not None and args.since is not None:
        return f"error: {since_with_attempt(args.attempt)}"
    return None


def since_with_attempt(attempt: int) -> str:
    """Why `--since` cannot go with `--attempt` (refused by `usage_error`, and by `choose`
    for a caller that skips it)."""
    return (
        f"--since cannot go with --attempt {attempt}: attempt files carry no timestamps; use "
        "--tail N for the file's last lines, or drop --attempt to read the current run's log "
        "with --since"
    )


def choose(
    exp: Obj,
    rayjob: Obj | None,
    pods: Sequence[Obj],
    attempt: int | None,
    follow: bool,
    *,
    tail: int | None = None,
    since: str | None = None,
) -> Stream | Nothing:
    """Where to read and with which kubectl command. With `tail` or `since` the submitter
    pod is preferred: kubelet keeps its log with timestamps, and kubectl cuts it."""
    meta, spec, status = exp["metadata"], exp.get("spec") or {}, exp.get("status") or {}
    name, ns = meta["name"], meta["namespace"]
    ckpt = (spec.get("checkpoint") or {}).get("path")
    head = head_pod(status, pods)
    if attempt is not None:
        if since is not None:  # cmd_logs refuses it before kubectl (usage_error)
            return Nothing(since_with_attempt(attempt))
        return _attempt(exp, ckpt, head, attempt, follow, tail=tail)
    job_id = ((rayjob or {}).get("status") or {}).get("jobId")
    window = tail is not None or since is not None
    if (
        head is not None
        and job_id
        and window
        and submitter_pod(status.get("rayJobName") or name, pods)[0] is None
    ):
        return _head_tail(ns, name, head, job_id, follow=follow, tail=tail, since=since)
    if head is not None and job_id and not window:
        address = f"http://127.0.0.1:{RAY_DASHBOARD_PORT}"
        cmd = ["ray", "job", "logs", "--address", address, *(["--follow"] if follow else [])]
        return Stream(
            ["exec", "-n", ns, head, "-c", HEAD_CONTAINER, "--", *cmd, job_id],
            f"{ns}/{name}: driver output of Ray job {job_id}, from head pod {head} "
            "(complete while the Ray cluster lives)",
        )
    rayjob_name = status.get("rayJobName") or name
    submitter, waiting = submitter_pod(rayjob_name, pods)
    if submitter is not None:
        kept = (
            f"every launch's whole output is in {_volume_files(exp, '<N>')}"
            if ckpt
            else "set spec.checkpoint.path to keep the whole output"
        )
        return Stream(
            [
                "logs",
                "-n",
                ns,
                submitter,
                "-c",
                SUBMITTER_CONTAINER,
                *(["--follow"] if follow else []),
                *([f"--tail={tail}"] if tail is not None else []),
                *([f"--since={since}"] if since is not None else []),
            ],
            f"{ns}/{name}: driver output from KubeRay's submitter pod {submitter} (kubelet keeps "
            f"the newest {KUBELET_LOG_MAX} of it; {kept})",
        )
    return Nothing(_nothing_left(exp, head is not None, waiting))


def _head_tail(
    ns: str, name: str, head: str, job_id: str, *, follow: bool, tail: int | None,
    since: str | None,
) -> Stream | Nothing:  # fmt: skip
    """The last lines of Ray's job log in the head pod (no submitter pod is left to cut)."""
    if since is not None or follow:
        flag = "--since" if since is not None else "--tail with --follow"
        return Nothing(
            f"{ns}/{name}: {flag} needs the submitter pod's log (kubelet's timestamps and "
            "stream), and none is left; the head pod's Ray job log can give --tail N alone"
        )
    address = f"http://127.0.0.1:{RAY_DASHBOARD_PORT}"
    exec_in_head = ["exec", "-n", ns, head, "-c", HEAD_CONTAINER, "--"]
    return Stream(
        [*exec_in_head, "sh", "-c", HEAD_TAIL_SCRIPT, "agentrl-logs", address, job_id, str(tail)],
        f"{ns}/{name}: the last {tail} lines of Ray job {job_id}'s driver output, from head pod "
        f"{head}",
        shown=[*exec_in_head, "sh", "-c", f"ray job logs {job_id} | tail -n {tail}"],
    )


def head_pod(status: Obj, pods: Sequence[Obj]) -> str | None:
    """The running head pod, preferring the cluster the experiment's status names."""
    heads = [p for p in pods if _component(p) == COMPONENT_HEAD and _running(p)]
    cluster = status.get("rayClusterName")
    current = [p for p in heads if _labels(p).get(RAY_CLUSTER_LABEL) == cluster]
    return _newest(current or heads)


def submitter_pod(rayjob_name: str, pods: Sequence[Obj]) -> tuple[str | None, str | None]:
    """(the newest started submitter pod of the RayJob, else the name of one still waiting).

    A newer pod of KubeRay's submitter Job is a retry of the log follower, which prints the
    driver's output again from its first line; a pod being deleted is a previous attempt's.
    """
    ours = [
        p
        for p in pods
        if _component(p) == COMPONENT_SUBMITTER
        and all(_labels(p).get(k, rayjob_name) == rayjob_name for k in JOB_NAME_LABELS)
    ]
    alive = [p for p in ours if not p["metadata"].get("deletionTimestamp")] or ours
    started = [p for p in alive if _phase(p) in ("Running", "Succeeded", "Failed")]
    return _newest(started), _newest(alive)


def _attempt(
    exp: Obj, ckpt: str | None, head: str | None, n: int, follow: bool, *, tail: int | None = None
) -> Stream | Nothing:
    name, ns = exp["metadata"]["name"], exp["metadata"]["namespace"]
    if not ckpt:
        return Nothing(
            f"{ns}/{name} keeps no per-attempt log files: spec.checkpoint.path is unset. "
            f"Run `agentrl logs {name} -n {ns}` (without --attempt) for the current output."
        )
    if head is None:
        return Nothing(
            f"Attempt {n}'s output is on the checkpoint volume: {_volume_files(exp, n)}. "
            f"No pod of {ns}/{name} mounts that volume now: {_cluster_gone(exp)}. Read the "
            "file from any pod that mounts it."
        )
    directory = f"{ckpt.rstrip('/')}/{LAUNCH_LOG_DIR}"
    script = ["sh", "-c", ATTEMPT_SCRIPT, "agentrl-logs", directory, name, str(n)]
    exec_in_head = ["exec", "-n", ns, head, "-c", HEAD_CONTAINER, "--"]
    lines = "+1" if tail is None else str(tail)
    reader = f"tail -n {lines}" + (" -f" if follow else "") if tail or follow else "cat"
    return Stream(
        [*exec_in_head, *script, "1" if follow else "0", lines],
        f"{ns}/{name}: attempt {n}'s log file {_volume_files(exp, n)}, read through head pod "
        f"{head}",
        shown=[*exec_in_head, "sh", "-c", f"{reader} {_volume_files(exp, n)}"],
    )


def _nothing_left(exp: Obj, head_running: bool, waiting: str | None) -> str:
    meta, status = exp["metadata"], exp.get("status") or {}
    name, ns = meta["name"], meta["namespace"]
    phase = status.get("phase") or "Pending"
    ckpt = ((exp.get("spec") or {}).get("checkpoint") or {}).get("path")
    if waiting is not None:
        return (
            f"{ns}/{name}: the submitter pod {waiting} has not started yet; run again in a "
            "moment (or `kubectl describe pod` it if it stays Pending)."
        )
    if phase in ("Pending", "Initializing", "Running") or head_running:
        return (
            f"{ns}/{name} has no driver output yet (phase {phase}): KubeRay submits the job "
            f"once the Ray cluster is ready. Watch `kubectl get rlx {name} -n {ns} -w` and "
            "run this again."
        )
    if phase == "Suspended":
        gone = "it is suspended: KubeRay deleted its Ray cluster and submitter Job"
    else:
        gone = f"the run ended ({phase}): {_cluster_gone(exp)}, and no submitter pod is left"
    where = (
        f"Every launch's whole output is on the checkpoint volume: {_volume_files(exp, '<N>')} "
        f"(status.attempts: {status.get('attempts', '?')})."
        if ckpt
        else "No copy was kept: spec.checkpoint.path is unset (set it, on a shared volume, "
        "to keep each attempt's output; a spec.ttlSecondsAfterFinished above 0 keeps the "
        "Ray cluster that long after the run)."
    )
    return f"{ns}/{name}: nothing to read in the cluster; {gone}. {where}"


def _cluster_gone(exp: Obj) -> str:
    ttl = (exp.get("spec") or {}).get("ttlSecondsAfterFinished", 0)
    return (
        f"KubeRay deletes the Ray cluster when a run ends, after spec.ttlSecondsAfterFinished "
        f"= {ttl} s, and before each retry"
    )


def _volume_files(exp: Obj, attempt: int | str) -> str:
    ckpt = exp["spec"]["checkpoint"]["path"].rstrip("/")
    name = LAUNCH_LOG_NAME.format(experiment=exp["metadata"]["name"], attempt=attempt, time="*")
    return f"{ckpt}/{LAUNCH_LOG_DIR}/{name}"


def _labels(pod: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = pod["metadata"].get("labels") or {}
    return labels


def _component(pod: Obj) -> str | None:
    return _labels(pod).get(LABEL_COMPONENT)


def _phase(pod: Obj) -> str | None:
    phase: str | None = (pod.get("status") or {}).get("phase")
    return phase


def _running(pod: Obj) -> bool:
    return _phase(pod) == "Running" and not pod["metadata"].get("deletionTimestamp")


def _newest(pods: Sequence[Obj]) -> str | None:
    if not pods:
        return None
    key = lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"])  # noqa: E731
    newest: str = max(pods, key=key)["metadata"]["name"]
    return newest


# ---- I/O: kubectl -----------------------------------------------------------------------


class KubectlError(Exception):
    pass


@dataclass(frozen=True)
class Kubectl:
    binary: str
    context: str | None = None

    def command(self, argv: Sequence[str]) -> list[str]:
        return [self.binary, *(["--context", self.context] if self.context else []), *argv]

    def get(self, *argv: str) -> Any:
        """`kubectl get ... -o json`, parsed; KubectlError carries kubectl's own message."""
        proc = subprocess.run(
            self.command(["get", *argv, "-o", "json"]),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise KubectlError(proc.stderr.strip() or f"kubectl exited {proc.returncode}")
        return json.loads(proc.stdout)

    def namespace(self) -> str:
        """The namespace kubectl uses without -n: the context's, else `default`."""
        proc = subprocess.run(
            self.command(["config", "view", "--minify", "-o", "jsonpath={..namespace}"]),
            capture_output=True,
            text=True,
            check=False,
        )
        return (proc.stdout.strip() if proc.returncode == 0 else "") or "default"

    def stream(self, argv: Sequence[str]) -> int:
        return subprocess.call(self.command(argv))


def cmd_logs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if (wrong := usage_error(args)) is not None:
        print(wrong, file=err)
        return EXIT_USAGE
    binary = shutil.which("kubectl")
    if binary is None:
        print(
            "error: agentrl logs runs kubectl (it uses your kubeconfig and contexts), and "
            "kubectl is not on PATH: install it, see https://kubernetes.io/docs/tasks/tools/",
            file=err,
        )
        return 1
    kubectl = Kubectl(binary, args.context)
    where = ["-n", args.namespace] if args.namespace else []
    try:
        exp = kubectl.get(EXPERIMENT_RESOURCE, args.name, *where)
    except KubectlError as e:
        # kubectl's NotFound names no namespace: say which one it looked in.
        looked_in = args.namespace or (kubectl.namespace() if "(NotFound)" in str(e) else None)
        print(_experiment_error(args, str(e), looked_in), file=err)
        return 1
    if not isinstance(exp, Mapping) or exp.get("kind") != KIND or "metadata" not in exp:
        print(f"error: kubectl get rlx {args.name} did not return one RLExperiment", file=err)
        return 1
    ns = exp["metadata"]["namespace"]
    try:
        pods = kubectl.get("pods", "-n", ns, "-l", f"{LABEL_EXPERIMENT}={args.name}")["items"]
    except KubectlError as e:
        down = unreachable(str(e), args.context)
        print(down or f"error: cannot list the pods of {ns}/{args.name}: {e}", file=err)
        return 1
    rayjob_name = (exp.get("status") or {}).get("rayJobName") or args.name
    try:
        rayjob = kubectl.get(RAYJOB_RESOURCE, rayjob_name, "-n", ns)
    except KubectlError:
        rayjob = None  # deleted, or not readable: the submitter pod and the volume remain
    choice = choose(exp, rayjob, pods, args.attempt, args.follow, tail=args.tail, since=args.since)
    if isinstance(choice, Nothing):
        print(choice.message, file=err)
        return 1
    shown = " ".join(shlex.quote(a) for a in kubectl.command(choice.shown or choice.argv)[1:])
    print(f"agentrl logs: {choice.note}\n  kubectl {shown}", file=err, flush=True)
    out.flush()
    try:
        return kubectl.stream(choice.argv)
    except KeyboardInterrupt:  # Ctrl-C ends --follow
        return 130


# kubectl's own last words when it cannot talk to the API server: a refused connection, or
# any other failure to connect (DNS, timeout, TLS), after client-go's klog lines (one per
# discovery attempt, the same error each time).
_REFUSED = re.compile(r"The connection to the server (?P<server>\S+) was refused")
_UNABLE = "Unable to connect to the server"
_KLOG = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ \S+:\d+\] ")
# Where kubectl connects when no kubeconfig is found (client-go's insecure default).
_NO_KUBECONFIG_SERVER = "localhost:8080"


def unreachable(message: str, context: str | None) -> str | None:
    """The explanation when kubectl could not reach the cluster's API server, with kubectl's
    own reason (its klog repeats left out), else None."""
    said = [line for line in message.splitlines() if line.strip() and not _KLOG.match(line)]
    reason = "\n".join(said).strip()
    refused = _REFUSED.search(reason)
    if refused is None and _UNABLE not in reason:
        return None
    which = f"the context {context!r} (--context)" if context else "your current context"
    if refused is not None and refused.group("server") == _NO_KUBECONFIG_SERVER:
        check = (
            f"{_NO_KUBECONFIG_SERVER} is where kubectl connects when it finds no kubeconfig: "
            "set KUBECONFIG (or create ~/.kube/config) for your cluster, or pass --context"
        )
    else:
        check = (
            f"check that the cluster is running and that {which} points at it and is "
            "reachable from here (VPN, proxy, tunnel): `kubectl config current-context`, "
            "`kubectl cluster-info`; pass --context to use another"
        )
    return f"error: agentrl logs cannot reach the cluster's API server ({reason}); {check}"


def _experiment_error(args: argparse.Namespace, message: str, looked_in: str | None = None) -> str:
    """`looked_in`: the namespace kubectl searched, when the error is a NotFound."""
    where = f"{args.namespace}/" if args.namespace else ""
    if (down := unreachable(message, args.context)) is not None:
        return down
    if "the server doesn't have a resource type" in message:
        return (
            f"error: this cluster has no RLExperiment resource ({message}); install the "
            "agentrl chart, or pick another --context"
        )
    # Only the API server's own answer means the experiment is missing; kubectl's errors
    # (an unknown --context, no kubeconfig, an unreachable server) pass through as they are.
    if "(NotFound)" in message:
        if not args.namespace:
            # A context without a namespace makes kubectl look in `default`: the most common
            # reason an experiment that exists is "not found".
            return (
                f"error: experiment {args.name} not found in namespace {looked_in or 'default'} "
                "(your kubeconfig context's, or `default` when it sets none); pass "
                f"-n NAMESPACE, or find it with `kubectl get rlx -A | grep {args.name}` (a "
                "deleted experiment's output stays on its checkpoint volume, in "
                f"<spec.checkpoint.path>/{LAUNCH_LOG_DIR}/)"
            )
        return (
            f"error: experiment {where}{args.name} not found. A deleted experiment takes its "
            "RayJob, pods and their logs with it; each launch's output stays on its "
            f"checkpoint volume as <spec.checkpoint.path>/{LAUNCH_LOG_DIR}/"
            + LAUNCH_LOG_NAME.format(experiment=args.name, attempt="<N>", time="<UTC time>")
        )
    if "(Forbidden)" in message:
        return (
            f"error: kubectl get rlx {where}{args.name}: {message}; ask for the `view` role in "
            "that namespace (the agentrl chart adds RLExperiments to view, edit and admin; "
            "`edit` also grants pods/exec, which reading the head pod needs)"
        )
    return f"error: kubectl get rlx {where}{args.name}: {message}"
