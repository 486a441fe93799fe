"""The submitter's command outlives a log stream that ends before the Ray job.

Ray's head closes a job's log tail cleanly whenever its relay from the driver node's agent
ends, and `ray job logs --follow` then exits 0 with the job still RUNNING. KubeRay v1.6.2's
own submitter command ends with that one follow: its Job completes, and KubeRay fails the
RayJob 30 s later and deletes the cluster. These tests run the rendered bash script with the
real `ray` command line (as subprocesses) against a stand-in dashboard that closes the log
tail the way Ray's head does (tests/support/ray_dashboard.py), and KubeRay's own command
against the same, which shows the failure. Submission itself stays KubeRay's: the same flags
as Ray's parser reads them, and only when `ray job status` does not know the job.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support import kuberay_cli
from tests.support.ray_dashboard import DashboardState, serve

from agentrl.api.validation import parse_experiment
from agentrl.render import OperatorDefaults, collect_bundle_files, render_all
from agentrl.render.rayjob import ENTRYPOINT, SUBMITTER_REFOLLOW_SECONDS, submitter_script
from conftest import TEST_IMAGE, minimal_body

BIN = Path(sys.executable).parent
JOB_ID = "exp-abcde"


def rayjob(body: dict[str, Any]) -> dict[str, Any]:
    exp, problems = parse_experiment(body)
    assert exp is not None, problems
    return render_all(exp, OperatorDefaults(image=TEST_IMAGE), collect_bundle_files()).rayjob


def script() -> str:
    """The rendered script, without its pause between follows (seconds of test time)."""
    job = rayjob(minimal_body())
    (container,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert container["command"] == ["/bin/bash", "-c"]
    (text,) = container["args"]
    assert text == submitter_script()
    pause = f'"$addr" "$id" {SUBMITTER_REFOLLOW_SECONDS}'
    assert text.endswith(pause)
    return text.removesuffix(pause) + '"$addr" "$id" 0'


def run_in_pod(command: str, address: str) -> subprocess.CompletedProcess[str]:
    """bash as KubeRay's submitter container runs it, with the env KubeRay gives it (the
    dashboard URL without a scheme, as KubeRay stores it)."""
    env = {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "PYTHONUNBUFFERED": "1",
        "RAY_DASHBOARD_ADDRESS": address,
        "RAY_JOB_SUBMISSION_ID": JOB_ID,
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    argv = ["/bin/bash", "-c", command]
    return subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=300)


def test_kuberays_own_command_completes_while_the_job_still_runs() -> None:
    """What KubeRay v1.6.2's command does when the log tail closes under a running job: exit
    0, so the submitter Job completes and KubeRay fails the RayJob and deletes the cluster."""
    job = rayjob(minimal_body())
    state = DashboardState(submission_id=JOB_ID, exists=True)
    with serve(state) as address:
        command = kuberay_cli.k8s_job_command(
            job["spec"], str(BIN / "ray"), f"http://{address}", JOB_ID
        )
        done = run_in_pod(command, address)
    assert done.returncode == 0, done.stderr
    assert (state.status, state.tails) == ("RUNNING", 1)


@pytest.mark.parametrize("final", ["SUCCEEDED", "FAILED", "STOPPED"])
def test_the_submitter_follows_again_until_the_job_ends(final: str) -> None:
    """Whatever the job's end, the submitter exits 0 once Ray reports it: KubeRay reads the
    outcome from Ray, as after its own command's follow."""
    state = DashboardState(submission_id=JOB_ID, exists=True, closes_before_end=2, final=final)
    with serve(state) as address:
        done = run_in_pod(script(), address)
    assert done.returncode == 0, done.stderr
    # Two tails closed under the running job, the third one saw it end.
    assert (state.status, state.tails) == (final, 3)
    assert state.submissions == []  # a known job is never submitted again
    # Each tail starts over from the first line; the pod's log holds each line once.
    assert [line for line in done.stdout.splitlines() if line.startswith("training step")] == [
        "training step 1",
        "training step 2",
        "training step 3",
    ]
    assert done.stdout.splitlines()[-1] == f"agentrl: Ray job {JOB_ID} ended: {final}"
    ended = f"the log stream of Ray job {JOB_ID} ended cleanly while it is RUNNING"
    assert done.stderr.count(ended) == 2


def test_the_submitter_submits_once_with_kuberays_flags() -> None:
    job = rayjob(minimal_body())
    state = DashboardState(submission_id=JOB_ID, exists=False, closes_before_end=0)
    with serve(state) as address:
        first = run_in_pod(script(), address)
        second = run_in_pod(script(), address)  # the Job's retry of the pod
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    (sent,) = state.submissions
    assert sent["submission_id"] == JOB_ID
    assert sent["entrypoint"] == ENTRYPOINT == job["spec"]["entrypoint"]
    ours = kuberay_cli.parsed_submit_options(submit_words(script()))
    kuberays = kuberay_cli.submit_options(job["spec"])
    for option in ("runtime_env", "entrypoint_resources", "no_wait"):
        assert ours[option] == kuberays[option], option
    assert sent["runtime_env"] == kuberays["runtime_env"]
    assert sent["entrypoint_resources"] == kuberays["entrypoint_resources"]


def submit_words(text: str) -> list[str]:
    """The words of the script's `ray job submit` after `submit`, as bash splits them."""
    (line,) = [x for x in text.splitlines() if "ray job submit" in x]
    command = line.strip().removesuffix("|| exit 1").replace('"$addr"', "http://head:8265")
    words = kuberay_cli.shell_words(command.replace('"$id"', JOB_ID))
    return words[3:]


@pytest.mark.parametrize("exists", [True, False])
def test_an_unreachable_dashboard_fails_the_pod_for_a_retry(exists: bool) -> None:
    """Neither submitted nor followed: the pod fails and the submitter Job retries it, as
    when KubeRay's own command failed."""
    state = DashboardState(submission_id=JOB_ID, exists=exists)
    with serve(state) as address:
        pass  # closed again: nothing listens there any more
    done = run_in_pod(script(), address)
    assert done.returncode == 1, done.stdout + done.stderr
