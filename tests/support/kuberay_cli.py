"""The shell commands KubeRay's controller builds from a RayJob, rebuilt for tests.

KubeRay (v1.7.0) turns a group's `rayStartParams` into `ray start` flags, one ` --key=value `
per entry, pasted into the pod's bash command
(https://github.com/ray-project/kuberay/blob/v1.7.0/ray-operator/controllers/ray/common/pod.go,
`convertParamMap`), and in K8sJobMode runs `ray job submit --no-wait` with the RayJob's
runtime env (its YAML converted to JSON) and entrypoint resources, each quoted with Go's
`strconv.Quote`, then `-- <entrypoint>` unquoted
(https://github.com/ray-project/kuberay/blob/v1.7.0/ray-operator/controllers/ray/common/job.go,
`BuildJobSubmitCommand`). The commands are then read by bash and by Ray's own command-line
parsers, which these helpers call: what Ray ends up with is Ray's answer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from typing import Any

import yaml


def shell_words(command: str) -> list[str]:
    """The argv bash makes of a command line."""
    done = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, text=True, check=True
    )
    return done.stdout.split("\0")[:-1]


def ray_start_flags(params: Mapping[str, str]) -> str:
    """rayStartParams as KubeRay writes them into the `ray start` command line."""
    return "".join(f" --{k}={v} " for k, v in sorted(params.items()))


def ray_start_options(params: Mapping[str, str]) -> dict[str, Any]:
    """rayStartParams as Ray's own `ray start` parser reads them (resources as a dict)."""
    from ray._private.utils import parse_resources_json
    from ray.autoscaler._private.cli_logger import cf, cli_logger
    from ray.scripts.scripts import start

    ctx = start.make_context("start", shell_words(ray_start_flags(params)))
    options = dict(ctx.params)
    options["resources"] = parse_resources_json(options["resources"], cli_logger, cf)
    return options


def cluster_groups(rayjob: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A rendered RayJob's head and (single) worker group as `ray start` reads them, and the
    worker's GPU count (KubeRay's num-gpus comes from the container's GPU limit)."""
    cluster_spec = rayjob["spec"]["rayClusterSpec"]
    head = ray_start_options(cluster_spec["headGroupSpec"]["rayStartParams"])
    (group,) = cluster_spec["workerGroupSpecs"]
    worker = ray_start_options(group["rayStartParams"])
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    return head, worker, int(limits["nvidia.com/gpu"])


def kuberay_resources_map(params: Mapping[str, str]) -> Any:
    """How KubeRay reads `resources` back to add accelerators (`getResourcesMap`): surrounding
    quotes, backticks and spaces trimmed, then JSON."""
    return json.loads(params["resources"].strip("'\"` "))


def go_quote(text: str) -> str:
    """Go's strconv.Quote of the ASCII text KubeRay quotes (the same as a JSON string)."""
    assert text.isascii() and text.isprintable()
    return json.dumps(text)


def submit_command(
    job_spec: Mapping[str, Any], ray_cli: str, address: str, submission_id: str, entrypoint: str
) -> str:
    """The `ray job submit` part of KubeRay's K8sJobMode submitter command."""
    cmd = [ray_cli, "job", "submit", "--address", address, "--no-wait"]
    if job_spec.get("runtimeEnvYAML"):
        runtime_env = yaml.safe_load(job_spec["runtimeEnvYAML"])
        cmd += ["--runtime-env-json", go_quote(json.dumps(runtime_env, separators=(",", ":")))]
    cmd += ["--submission-id", submission_id]
    if job_spec.get("entrypointNumCpus"):
        cmd += ["--entrypoint-num-cpus", f"{float(job_spec['entrypointNumCpus']):f}"]
    if job_spec.get("entrypointNumGpus"):
        cmd += ["--entrypoint-num-gpus", f"{float(job_spec['entrypointNumGpus']):f}"]
    if job_spec.get("entrypointResources"):
        cmd += ["--entrypoint-resources", go_quote(job_spec["entrypointResources"])]
    return " ".join([*cmd, "--", entrypoint])


def submit_options(job_spec: Mapping[str, Any]) -> dict[str, Any]:
    """What Ray's `ray job submit` parser makes of the RayJob's submission flags: the
    runtime env and the entrypoint resources as Ray's job CLI parses them."""
    words = shell_words(submit_command(job_spec, "ray", "http://head:8265", "id", "true"))
    return parsed_submit_options(words[3:])  # after `ray job submit`


def parsed_submit_options(words: list[str]) -> dict[str, Any]:
    """Ray's `ray job submit` parser on the words after `submit`, with the runtime env and
    the entrypoint resources as Ray's job CLI parses them."""
    from ray._private.utils import parse_resources_json
    from ray.autoscaler._private.cli_logger import cf, cli_logger
    from ray.dashboard.modules.dashboard_sdk import parse_runtime_env_args
    from ray.dashboard.modules.job.cli import submit

    options = dict(submit.make_context("submit", words).params)
    if options.get("entrypoint_resources") is not None:
        options["entrypoint_resources"] = parse_resources_json(
            options["entrypoint_resources"], cli_logger, cf, command_arg="entrypoint-resources"
        )
    options["runtime_env"] = parse_runtime_env_args(
        runtime_env=None, runtime_env_json=options.get("runtime_env_json"), working_dir=None
    )
    return options


def k8s_job_command(job_spec: Mapping[str, Any], ray_cli: str, address: str, job_id: str) -> str:
    """KubeRay v1.6.2's whole K8sJobMode submitter command: submit unless `ray job status`
    knows the job, then one `ray job logs --follow`
    (https://github.com/ray-project/kuberay/blob/v1.6.2/ray-operator/controllers/ray/common/job.go,
    `BuildJobSubmitCommand`); KubeRay runs it with `bash -ce`."""
    status = f"{ray_cli} job status --address {address} {job_id} >/dev/null 2>&1"
    submit = submit_command(job_spec, ray_cli, address, job_id, job_spec["entrypoint"])
    follow = f"{ray_cli} job logs --address {address} --follow {job_id}"
    return f"if ! {status} ; then {submit} ; fi ; {follow}"
