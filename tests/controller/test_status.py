"""The pure status machine: every KubeRay jobDeploymentStatus, stickiness, conditions, events."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentrl.api.constants import ConditionType as C
from agentrl.api.constants import Phase
from agentrl.controller import conditions, progress, status

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
T2 = "2026-01-01T01:00:00Z"
CREATED = status.SpecOutcome(generation=1, rayjob_name="exp", gateway_url="http://exp-gateway")


def created() -> dict[str, Any]:
    return status.apply_observed(status.apply_spec({}, CREATED, T0), status.Observed({}), T0)


def observe(st: dict[str, Any], rj: dict[str, Any] | None, now: str = T1) -> dict[str, Any]:
    return status.apply_observed(st, status.Observed(rj), now)


@pytest.mark.parametrize(
    ("deployment", "job", "phase", "reason"),
    [
        pytest.param("", "", Phase.PENDING, "Pending", id="new"),
        pytest.param("Initializing", "", Phase.INITIALIZING, "Initializing", id="initializing"),
        pytest.param("Waiting", "", Phase.INITIALIZING, "Waiting", id="waiting"),
        pytest.param("Running", "RUNNING", Phase.RUNNING, "Running", id="running"),
        pytest.param("Running", "PENDING", Phase.RUNNING, "Running", id="running-stale-job"),
        pytest.param("Retrying", "FAILED", Phase.INITIALIZING, "Retrying", id="retrying"),
        pytest.param("Suspending", "", Phase.SUSPENDED, "Suspending", id="suspending"),
        pytest.param("Suspended", "", Phase.SUSPENDED, "Suspended", id="suspended"),
        pytest.param("Complete", "SUCCEEDED", Phase.SUCCEEDED, "Complete", id="complete-ok"),
        pytest.param("Complete", "FAILED", Phase.FAILED, "JobFailed", id="complete-failed"),
        pytest.param("Complete", "STOPPED", Phase.FAILED, "JobStopped", id="complete-stopped"),
        pytest.param("Complete", "RUNNING", Phase.SUCCEEDED, "Complete", id="complete-stale"),
        pytest.param("Failed", "RUNNING", Phase.FAILED, "DeadlineExceeded", id="failed-stale"),
        pytest.param("ValidationFailed", "", Phase.FAILED, "DeadlineExceeded", id="validation"),
    ],
)
def test_every_deployment_status(deployment: str, job: str, phase: Phase, reason: str) -> None:
    rj: dict[str, Any] = {"jobDeploymentStatus": deployment, "jobStatus": job}
    if deployment in ("Failed", "ValidationFailed"):
        rj["reason"] = "DeadlineExceeded"
    st = observe(created(), rj)
    assert st["phase"] == phase
    cond = {Phase.RUNNING: C.RUNNING, Phase.SUSPENDED: C.SUSPENDED, Phase.SUCCEEDED: C.SUCCEEDED,
            Phase.FAILED: C.FAILED}.get(phase)  # fmt: skip
    if cond is not None:
        got = conditions.get(st, cond)
        assert got is not None and got["status"] == "True" and got["reason"] == reason
    if phase.is_terminal:
        assert st["completionTime"] == T1
    if deployment:
        assert st["rayJob"]["jobDeploymentStatus"] == deployment


@pytest.mark.parametrize("terminal", ["Complete", "Failed"])
@pytest.mark.parametrize("later", ["Running", "Initializing", "Retrying", "", "Suspended"])
def test_terminal_phases_are_sticky(terminal: str, later: str) -> None:
    done = observe(created(), {"jobDeploymentStatus": terminal, "jobStatus": "SUCCEEDED"})
    again = observe(done, {"jobDeploymentStatus": later, "jobStatus": "RUNNING"}, T2)
    assert again["phase"] == done["phase"]
    assert again["completionTime"] == done["completionTime"]


def test_unknown_deployment_status_keeps_phase() -> None:
    running = observe(created(), {"jobDeploymentStatus": "Running"})
    assert observe(running, {"jobDeploymentStatus": "Exploding"})["phase"] == Phase.RUNNING


def test_attempts_from_counters_and_retrying() -> None:
    st = observe(created(), {"jobDeploymentStatus": "Running"})
    assert st["attempts"] == 1
    st = observe(st, {"jobDeploymentStatus": "Retrying", "failed": 1})
    assert st["attempts"] == 2
    st = observe(st, {"jobDeploymentStatus": "Running", "failed": 1})
    assert st["attempts"] == 2
    st = observe(st, {"jobDeploymentStatus": "Failed", "failed": 2, "reason": "AppFailed"})
    assert st["attempts"] == 2 and st["phase"] == Phase.FAILED
    assert conditions.get(st, C.FAILED)["reason"] == "AppFailed"  # type: ignore[index]


def test_times_urls_and_mirror() -> None:
    rj = {
        "jobDeploymentStatus": "Running",
        "jobStatus": "RUNNING",
        "startTime": T0,
        "rayClusterName": "exp-raycluster-abc",
        "dashboardURL": "exp-head-svc.ns.svc:8265",
    }
    st = observe(created(), rj)
    assert st["startTime"] == T0 and st["gatewayURL"] == "http://exp-gateway"
    assert st["rayClusterName"] == "exp-raycluster-abc"
    assert st["dashboardURL"] == "exp-head-svc.ns.svc:8265"
    done = observe(st, {**rj, "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
                        "endTime": T1}, T2)  # fmt: skip
    assert done["completionTime"] == T1


def test_mirror_keeps_phase_when_rayjob_unseen() -> None:
    running = observe(created(), {"jobDeploymentStatus": "Running"})
    assert observe(running, None, T2)["phase"] == Phase.RUNNING


def test_invalid_spec_fails_once_and_recovers_when_fixed() -> None:
    bad = status.SpecOutcome(generation=1, problems=["spec.grpo.numRollouts: must be >= 1"])
    st = observe(status.apply_spec({}, bad, T0), None, T0)
    assert st["phase"] == Phase.FAILED
    valid = conditions.get(st, C.VALID)
    assert valid is not None and valid["status"] == "False"
    assert "numRollouts" in valid["message"] and valid["observedGeneration"] == 1
    events = conditions.events_between({}, st)
    assert [e.reason for e in events] == ["InvalidSpec"]
    # The same problem seen again: nothing changes, nothing is posted.
    again = observe(status.apply_spec(st, bad, T1), None, T1)
    assert status.diff(st, again) is None and conditions.events_between(st, again) == []
    fixed = status.SpecOutcome(generation=2, rayjob_name="exp")
    ok = observe(status.apply_spec(st, fixed, T2), {}, T2)
    assert ok["phase"] == Phase.PENDING and ok["observedGeneration"] == 2
    assert conditions.is_true(ok, C.VALID)


def test_name_conflict_fails_without_rayjob() -> None:
    clash = status.SpecOutcome(generation=1, conflict="ConfigMap ns/exp-config is not ours")
    st = observe(status.apply_spec({}, clash, T0), None, T0)
    assert st["phase"] == Phase.FAILED
    assert conditions.get(st, C.FAILED)["reason"] == "NameConflict"  # type: ignore[index]
    assert [e.reason for e in conditions.events_between({}, st)] == ["NameConflict"]


def test_immutable_change_is_a_condition_not_a_phase() -> None:
    running = observe(created(), {"jobDeploymentStatus": "Running"})
    refused = status.SpecOutcome(generation=2, immutable=["model"], rayjob_name="exp")
    st = observe(status.apply_spec(running, refused, T1), None, T1)
    assert st["phase"] == Phase.RUNNING
    cond = conditions.get(st, C.IMMUTABLE_FIELD_CHANGED)
    assert cond is not None and cond["status"] == "True" and "spec.model" in cond["message"]
    assert [e.reason for e in conditions.events_between(running, st)] == ["ImmutableFieldChanged"]
    reverted = status.SpecOutcome(generation=3, rayjob_name="exp")
    back = observe(status.apply_spec(st, reverted, T2), None, T2)
    assert conditions.get(back, C.IMMUTABLE_FIELD_CHANGED)["status"] == "False"  # type: ignore[index]


REFUSED_CM = status.Rejection(
    status.FAILED_CREATE,
    "the API server refused creating ConfigMap ns/exp-config (HTTP 422 Invalid): too long",
)


def test_a_refused_create_fails_the_generation_with_the_api_servers_words() -> None:
    out = status.SpecOutcome(generation=1, rejection=REFUSED_CM)
    st = observe(status.apply_spec({}, out, T0), None, T0)
    assert st["phase"] == Phase.FAILED
    cond = conditions.get(st, C.CHILD_REJECTED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "FailedCreate"
    assert cond["message"].startswith(REFUSED_CM.message)
    assert "not retried" in cond["message"] and "generation 1" in cond["message"]
    failed = conditions.get(st, C.FAILED)
    assert failed is not None and failed["reason"] == "FailedCreate"
    assert failed["message"] == cond["message"]
    # One Warning event that explains the failure; the phase change adds none.
    assert [(e.type, e.reason) for e in conditions.events_between({}, st)] == [
        ("Warning", "FailedCreate")
    ]
    # The same refusal again (an operator restart reconciles once more): nothing new.
    again = observe(status.apply_spec(st, out, T1), None, T1)
    assert status.diff(st, again) is None and conditions.events_between(st, again) == []
    # A new generation is tried again and clears it.
    fixed = status.SpecOutcome(generation=2, rayjob_name="exp")
    ok = observe(status.apply_spec(st, fixed, T2), {}, T2)
    assert ok["phase"] == Phase.PENDING
    cleared = conditions.get(ok, C.CHILD_REJECTED)
    assert cleared is not None and cleared["status"] == "False"
    assert conditions.get(ok, C.FAILED)["status"] == "False"  # type: ignore[index]


def test_a_refused_create_of_a_new_generation_posts_again() -> None:
    st = observe(status.apply_spec({}, status.SpecOutcome(1, rejection=REFUSED_CM), T0), None, T0)
    two = observe(status.apply_spec(st, status.SpecOutcome(2, rejection=REFUSED_CM), T1), None)
    assert [e.reason for e in conditions.events_between(st, two)] == ["FailedCreate"]


def test_a_refused_update_is_a_condition_not_a_phase() -> None:
    running = observe(created(), {"jobDeploymentStatus": "Running"})
    refused = status.Rejection(status.FAILED_UPDATE, "the API server refused updating RayJob")
    out = status.SpecOutcome(generation=2, rayjob_name="exp", rejection=refused)
    st = observe(status.apply_spec(running, out, T1), {"jobDeploymentStatus": "Running"})
    assert st["phase"] == Phase.RUNNING
    cond = conditions.get(st, C.CHILD_REJECTED)
    assert cond is not None and cond["reason"] == "FailedUpdate"
    assert "keeps its previous values" in cond["message"]
    assert [(e.type, e.reason) for e in conditions.events_between(running, st)] == [
        ("Warning", "FailedUpdate")
    ]


def test_a_finished_run_is_not_failed_by_a_refusal() -> None:
    done = observe(created(), {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
    refused = status.Rejection(status.FAILED_CREATE, "refused")
    st = observe(status.apply_spec(done, status.SpecOutcome(2, rejection=refused), T2), None, T2)
    assert st["phase"] == Phase.SUCCEEDED


def test_stalled_names_pod_and_reason() -> None:
    st = observe(created(), {"jobDeploymentStatus": "Initializing"})
    seen = status.Observed(
        {"jobDeploymentStatus": "Initializing"},
        stuck=[("exp-head-x", "ImagePullBackOff", "container ray-head")],
    )
    stalled = status.apply_observed(st, seen, T1)
    cond = conditions.get(stalled, C.STALLED)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "ImagePullBackOff"
    assert "exp-head-x" in cond["message"]
    clear = status.apply_observed(stalled, status.Observed({"jobDeploymentStatus": "Running"}), T2)
    assert conditions.get(clear, C.STALLED)["status"] == "False"  # type: ignore[index]


@pytest.mark.parametrize(
    ("now", "stalled"),
    [pytest.param(T1, False, id="within"), pytest.param(T2, True, id="past")],
)
def test_startup_deadline(now: str, stalled: bool) -> None:
    seen = status.Observed({"jobDeploymentStatus": "Initializing"}, created=T0,
                           startup_deadline=600)  # fmt: skip
    st = status.apply_observed(created(), seen, now)
    assert conditions.is_true(st, C.STALLED) is stalled
    if stalled:
        assert conditions.get(st, C.STALLED)["reason"] == "StartupDeadlineExceeded"  # type: ignore[index]


def test_a_rayjob_no_kuberay_acted_on_says_so_at_the_deadline() -> None:
    """KubeRay v1.6.2's first reconcile of a RayJob writes Initializing, startTime and the
    cluster's name (rayjob_controller.go, initRayJobStatusIfNeed), Kueue or not. A RayJob
    with no status at the startup deadline has no pods: "check the pods' events" sent the
    user looking for what does not exist; no KubeRay operator acts on it."""
    untouched = status.Observed({}, created=T0, startup_deadline=600)
    cond = conditions.get(status.apply_observed(created(), untouched, T2), C.STALLED)
    assert cond is not None and cond["reason"] == "StartupDeadlineExceeded"
    assert "KubeRay has not acted on RayJob exp (it has no status)" in cond["message"]
    assert "KubeRay operator is running and watches this namespace" in cond["message"]
    # Back to New after a retry or a resume: KubeRay's marks stay, and so does the old text.
    renewed = status.Observed({"startTime": T0, "failed": 1}, created=T0, startup_deadline=600)
    cond = conditions.get(status.apply_observed(created(), renewed, T2), C.STALLED)
    assert cond is not None and "check the pods' events" in cond["message"]


def test_stalled_messages_are_stable_and_name_the_first_stuck_pod() -> None:
    """A gang whose pods get stuck one after another, and a deadline that keeps passing,
    change nothing once Stalled: one write, one event."""
    st = observe(created(), {"jobDeploymentStatus": "Initializing"})
    first = [("exp-worker-b", "ImagePullBackOff", "container ray-worker")]
    seen = status.Observed({"jobDeploymentStatus": "Initializing"}, stuck=first)
    stalled = status.apply_observed(st, seen, T1)
    more = status.Observed(seen.rayjob, stuck=[*first, ("exp-worker-a", "ErrImagePull", "x")])
    assert status.apply_observed(stalled, more, T2) == stalled
    late = status.Observed({"jobDeploymentStatus": "Initializing"}, created=T0,
                           startup_deadline=600)  # fmt: skip
    overdue = status.apply_observed(st, late, T2)
    cond = conditions.get(overdue, C.STALLED)
    assert cond is not None and cond["lastTransitionTime"] == "2026-01-01T00:10:00Z"  # T0 + 600s
    assert T0 in cond["message"] and "startupDeadlineSeconds=600" in cond["message"]
    later = "2026-01-03T00:00:00Z"
    assert status.apply_observed(overdue, late, later) == overdue
    assert conditions.events_between(overdue, status.apply_observed(overdue, late, later)) == []


def test_running_without_the_ray_job_past_the_deadline_is_a_submitter_that_never_started() -> None:
    running = {"jobDeploymentStatus": "Running", "startTime": T0}
    seen = status.Observed(running, created=T0, startup_deadline=600)
    st = status.apply_observed(created(), seen, T2)
    assert st["phase"] == Phase.RUNNING
    assert conditions.get(st, C.STALLED)["reason"] == "SubmitterNotStarted"  # type: ignore[index]
    started = status.Observed({**running, "jobStatus": "PENDING"}, created=T0,
                              startup_deadline=600)  # fmt: skip
    assert not conditions.is_true(status.apply_observed(st, started, T2), C.STALLED)
    unlimited = status.Observed(running, created=T0, startup_deadline=None)
    assert not conditions.is_true(status.apply_observed(created(), unlimited, T2), C.STALLED)


@pytest.mark.parametrize("active_deadline", [None, 86400])
def test_a_submitter_that_never_started_says_the_gpus_stay_held(
    active_deadline: int | None,
) -> None:
    """KubeRay v1.6.2 leaves such a RayJob Running: in K8sJobMode it fails one only when Ray
    reports the job ended, the submitter Job failed or finished, or activeDeadlineSeconds
    passed; preRunningDeadlineSeconds is checked in Initializing and Waiting only
    (rayjob_controller.go). The message said where to look, not that the Ray cluster keeps
    its GPUs meanwhile, for ever without activeDeadlineSeconds, nor how to release them."""
    running = {"jobDeploymentStatus": "Running", "startTime": T0}
    seen = status.Observed(running, created=T0, startup_deadline=600,
                           active_deadline=active_deadline)  # fmt: skip
    message = conditions.get(status.apply_observed(created(), seen, T2), C.STALLED)["message"]  # type: ignore[index]
    assert "its Ray cluster holds its GPUs" in message
    assert "set spec.suspend to true to release them" in message
    if active_deadline is None:
        assert "with no spec.activeDeadlineSeconds, until you act" in message
    else:
        assert "until spec.activeDeadlineSeconds=86400 after the attempt's start" in message


@pytest.mark.parametrize(
    ("pod", "reason", "jobs", "held"),
    [
        pytest.param("demo-sub", "Unschedulable", "", True, id="submitter-unschedulable"),
        pytest.param("demo-sub", "ImagePullBackOff", "", True, id="submitter-image"),
        pytest.param("demo-head", "Unschedulable", "", False, id="another-pod"),
        pytest.param("demo-sub", "Unschedulable", "PENDING", False, id="ray-has-the-job"),
        pytest.param("demo-sub", "CrashLoopBackOff", "", False, id="fails-and-is-counted"),
    ],
)
def test_a_stuck_submitter_pod_says_the_gpus_stay_held(
    pod: str, reason: str, jobs: str, held: bool
) -> None:
    """KubeRay's submitter pod cannot start (no node for it, an image it cannot pull): Ray
    never gets the job, the submitter Job never fails (a pod that does not start counts
    towards no backoffLimit, and KubeRay gives the Job no deadline: createNewK8sJob at
    v1.6.2), and KubeRay keeps the RayJob Running, its Ray cluster on its GPUs, as for a pod
    the Job controller cannot create. The stuck pod's words said nothing of that."""
    running = {"jobDeploymentStatus": "Running", "jobStatus": jobs, "startTime": T0}
    seen = status.Observed(running, stuck=[(pod, reason, "0/4 nodes are available")],
                           created=T0, startup_deadline=600, active_deadline=None,
                           submitter_pods=frozenset({"demo-sub"}))  # fmt: skip
    cond = conditions.get(status.apply_observed(created(), seen, T1), C.STALLED)
    assert cond is not None and cond["reason"] == reason
    assert cond["message"].startswith(f"pod {pod}: {reason}: 0/4 nodes are available")
    says = "It is KubeRay's submitter pod, so Ray never gets the job. KubeRay does not end"
    assert (says in cond["message"]) is held
    if held:
        assert cond["message"].endswith("with no spec.activeDeadlineSeconds, until you act; set "
                                        "spec.suspend to true to release them while you fix "
                                        "it")  # fmt: skip


def test_a_retry_gets_its_own_startup_clock() -> None:
    """backoffLimit retries start a fresh Ray cluster; KubeRay stamps the attempt's startTime,
    and the startup deadline counts from it, not from the experiment's creation."""
    retry = {"jobDeploymentStatus": "Initializing", "startTime": "2026-01-01T00:58:00Z"}
    seen = status.Observed(retry, created=T0, startup_deadline=600)
    st = status.apply_observed(created(), seen, T2)  # an hour after creation, 2 min into it
    assert not conditions.is_true(st, C.STALLED)
    late = status.Observed({**retry, "startTime": "2026-01-01T00:40:00Z"}, created=T0,
                           startup_deadline=600)  # fmt: skip
    st = status.apply_observed(created(), late, T2)
    assert conditions.get(st, C.STALLED)["reason"] == "StartupDeadlineExceeded"  # type: ignore[index]


def test_a_retry_after_a_long_run_is_not_stalled_while_kuberay_tears_it_down() -> None:
    """While KubeRay tears a failed attempt's cluster down (Retrying, then New), its status
    still carries that attempt's startTime: after ten hours of training, the next attempt
    was reported Stalled at once, with a Warning event and a transition time nine hours in
    the past. The end of the Running attempt starts the next one's clock."""
    began = "2026-01-01T00:00:30Z"
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "startTime": began}
    st = status.apply_observed(created(), status.Observed(running, created=T0,
                               startup_deadline=3600), T1)  # fmt: skip
    ended = "2026-01-01T10:00:00Z"
    for deployment, job in (("Retrying", "FAILED"), ("", "")):
        between = {"jobDeploymentStatus": deployment, "jobStatus": job, "failed": 1,
                   "startTime": began}  # fmt: skip
        seen = status.Observed(between, created=T0, startup_deadline=3600)
        after = status.apply_observed(st, seen, ended)
        assert after["phase"] in (Phase.INITIALIZING, Phase.PENDING)
        assert not conditions.is_true(after, C.STALLED), conditions.get(after, C.STALLED)
        assert "Stalled" not in [e.reason for e in conditions.events_between(st, after)]
        st = after
    # The teardown itself has the whole deadline: stuck in it for longer is Stalled.
    late = status.apply_observed(st, seen, "2026-01-01T11:00:01Z")
    cond = conditions.get(late, C.STALLED)
    assert cond is not None and cond["status"] == "True"
    assert cond["lastTransitionTime"] == "2026-01-01T11:00:00Z" and ended in cond["message"]


def test_events_on_transitions_only() -> None:
    st = created()
    assert conditions.events_between({}, st) == []  # the first Pending is not news
    running = observe(st, {"jobDeploymentStatus": "Running"})
    assert [(e.type, e.reason) for e in conditions.events_between(st, running)] == [
        ("Normal", "Running")
    ]
    failed = observe(running, {"jobDeploymentStatus": "Failed", "reason": "AppFailed"}, T2)
    (event,) = conditions.events_between(running, failed)
    assert event.type == "Warning" and "AppFailed" in event.message


def test_condition_transition_time_moves_only_on_flip() -> None:
    st: dict[str, Any] = {}
    conditions.put(st, "X", True, reason="a", message="", now=T0)
    conditions.put(st, "X", True, reason="b", message="m", now=T1)
    assert conditions.get(st, "X")["lastTransitionTime"] == T0  # type: ignore[index]
    conditions.put(st, "X", False, reason="c", message="", now=T2)
    assert conditions.get(st, "X")["lastTransitionTime"] == T2  # type: ignore[index]


def test_diff_is_a_merge_patch() -> None:
    old = {"phase": "Running", "rayJob": {"jobStatus": "RUNNING", "reason": "x"}, "attempts": 1}
    new = {"phase": "Running", "rayJob": {"jobStatus": "SUCCEEDED"}, "progress": {"rollout": 3}}
    assert status.diff(old, new) == {
        "attempts": None,
        "progress": {"rollout": 3},
        "rayJob": {"jobStatus": "SUCCEEDED", "reason": None},
    }
    assert status.diff(new, new) is None


def test_progress_updated_at_moves_only_on_change() -> None:
    st = status.apply_progress({}, {"rollout": 3, "trainReward": 0.5}, T0)
    assert st["progress"] == {"rollout": 3, "trainReward": 0.5, "updatedAt": T0}
    assert status.apply_progress(st, {"rollout": 3}, T1) == st
    assert status.apply_progress(st, {"rollout": 4}, T2)["progress"]["updatedAt"] == T2


def deleted(st: dict[str, Any], rj: dict[str, Any] | None, checkpoint: str | None = None,
            now: str = T2) -> dict[str, Any]:  # fmt: skip
    """The RayJob gone: its last status (None: none seen since a restart) and the deletion."""
    seen = status.Observed(rj, rayjob_deleted=True, checkpoint=checkpoint)
    return status.apply_observed(st, seen, now)


@pytest.mark.parametrize(
    "before",
    [
        pytest.param(None, id="pending"),
        pytest.param({"jobDeploymentStatus": "Initializing"}, id="initializing"),
        pytest.param({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, id="running"),
        pytest.param({"jobDeploymentStatus": "Suspended"}, id="suspended"),
    ],
)
def test_a_rayjob_deleted_before_the_run_finished_fails_the_experiment(
    before: dict[str, Any] | None,
) -> None:
    """`kubectl delete rayjob` while the run was not finished: the run is over (its pods are
    gone with the RayJob), so the experiment is Failed, never left Running without pods."""
    st = created() if before is None else observe(created(), before)
    # The watch's delete event carries the RayJob's last status; after a restart nothing does.
    for last in (before, None):
        gone = deleted(st, last)
        assert gone["phase"] == Phase.FAILED
        failed = conditions.get(gone, C.FAILED)
        assert failed is not None and failed["status"] == "True"
        assert failed["reason"] == conditions.RAYJOB_DELETED
        assert "RayJob exp was deleted outside the operator" in failed["message"]
        assert "kubectl delete rlx" in failed["message"]
        # Only an Initializing or Running attempt has a Ray cluster to lose (KubeRay deletes
        # it on suspend, and has made none before Initializing).
        deployment = (before or {}).get("jobDeploymentStatus")
        had_cluster = deployment in ("Initializing", "Running")
        assert ("its Ray cluster went with it" in failed["message"]) is had_cluster
        assert ("it had no Ray cluster then" in failed["message"]) is not had_cluster
        assert gone["completionTime"] == T2
        created_cond = conditions.get(gone, C.RAYJOB_CREATED)
        assert created_cond is not None and created_cond["status"] == "False"
        assert created_cond["reason"] == conditions.RAYJOB_DELETED
        assert not conditions.is_true(gone, C.STALLED)
        # One Warning event, with the words of the condition (what happened, what to do).
        (event,) = conditions.events_between(st, gone)
        assert (event.type, event.reason) == ("Warning", conditions.RAYJOB_DELETED)
        assert event.message == failed["message"]
        # The alerts' series: condition Failed, reason RayJobDeleted.
        assert (C.FAILED, conditions.RAYJOB_DELETED) in conditions.problems(gone)
        # Final: seen again (the next sync, a restart) nothing moves, nothing is posted.
        for again in (deleted(gone, None, now="2026-01-02T00:00:00Z"), observe(gone, None)):
            assert status.diff(gone, again) is None
            assert conditions.events_between(gone, again) == []
        # A later reconcile (a new operator, a spec edit) names the RayJob again, as created:
        # it is still the deleted one (nothing creates it), and Failed keeps its words.
        later = "2026-01-02T00:00:00Z"
        for gen in (1, 2):
            again = observe(status.apply_spec(gone, dataclasses.replace(CREATED, generation=gen),
                                              later), None, later)  # fmt: skip
            for ctype, cond in ((C.RAYJOB_CREATED, created_cond), (C.FAILED, failed)):
                now_cond = conditions.get(again, ctype) or {}
                assert {**now_cond, "observedGeneration": 0} == {**cond, "observedGeneration": 0}
            assert again["phase"] == Phase.FAILED
            assert conditions.events_between(gone, again) == []
        assert status.diff(gone, observe(status.apply_spec(gone, CREATED, later), None)) is None


def test_a_rayjob_deleted_after_it_finished_keeps_its_outcome() -> None:
    """KubeRay's last status before the deletion is the outcome: deleted after it finished
    (or finishing in the delete event itself), the run is not failed by the deletion."""
    running = observe(created(), {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    done = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": T1}
    gone = deleted(running, done)
    assert gone["phase"] == Phase.SUCCEEDED and gone["completionTime"] == T1
    assert conditions.is_true(gone, C.RAYJOB_CREATED)
    finished = observe(running, done)
    assert deleted(finished, None)["phase"] == Phase.SUCCEEDED
    failed = observe(running, {"jobDeploymentStatus": "Failed", "reason": "AppFailed"})
    assert conditions.get(deleted(failed, None), C.FAILED)["reason"] == "AppFailed"  # type: ignore[index]


def test_a_deleted_rayjobs_message_says_how_to_run_it_again() -> None:
    running = observe(created(), {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    with_ckpt = conditions.get(deleted(running, None, checkpoint="/ckpt/run"), C.FAILED)
    assert with_ckpt is not None
    assert "resumes from the last checkpoint saved under /ckpt/run" in with_ckpt["message"]
    without = conditions.get(deleted(running, None), C.FAILED)
    assert without is not None and "starts from the beginning" in without["message"]
    assert "checkpoint" in without["message"]  # says what would have let it resume


def test_why_an_attempt_failed_is_kept_while_kuberay_retries() -> None:
    """KubeRay v1.6.2 (rayjob_controller.go, checkBackoffLimitAndUpdateStatusIfNeeded and the
    Retrying branch) writes the failed attempt's reason and message with `Retrying`, then
    clears both (`New`, written as no jobDeploymentStatus) once its cluster is gone. Nothing
    else said why the run was on attempt 2: the Running condition and one Warning event
    carry it until the next attempt runs."""
    began = "2026-01-01T00:00:30Z"
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "startTime": began,
               "failed": 0, "succeeded": 0}  # fmt: skip
    oom = "Job entrypoint command failed with exit code 1, last available logs: CUDA OOM"
    sequence = [
        {"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED", "reason": "AppFailed",
         "message": oom, "startTime": began, "failed": 1, "succeeded": 0},
        {"startTime": began, "failed": 1, "succeeded": 0},  # New: reason, message cleared
        {"jobDeploymentStatus": "Initializing", "startTime": T2, "failed": 1, "succeeded": 0},
    ]  # fmt: skip
    st = observe(created(), running)
    warnings: list[conditions.Event] = []
    for rj in sequence:
        after = observe(st, rj, T2)
        warnings += [e for e in conditions.events_between(st, after) if e.type == "Warning"]
        cond = conditions.get(after, C.RUNNING)
        assert cond is not None and cond["status"] == "False"
        assert cond["message"] == (f"attempt 1 failed (AppFailed): {oom}; KubeRay retries it "
                                   "on a new Ray cluster (spec.backoffLimit)")  # fmt: skip
        assert after["attempts"] == 2
        st = after
    assert [(e.reason, e.message) for e in warnings] == [("AttemptFailed", cond["message"])]
    again = observe(st, {**running, "startTime": T2, "failed": 1}, T2)
    assert conditions.get(again, C.RUNNING) == {"type": "Running", "status": "True",
                                                 "reason": "Running", "observedGeneration": 1,
                                                 "lastTransitionTime": T2}  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "said", "means"),
    [
        pytest.param(
            "DeadlineExceeded",
            "The RayJob has passed the activeDeadlineSeconds. StartTime: 2026-01-01 00:00:30 "
            "+0000 UTC. ActiveDeadlineSeconds: 3600",
            "the attempt ran past spec.activeDeadlineSeconds",
            id="v1.6.2-active-deadline",
        ),
        pytest.param(
            "JobStatusCheckTimeoutExceeded",
            "Job status checks have been failing since 2026-01-01 00:10:00; exceeded timeout "
            "of 300s",
            "could not read the Ray job's status from the Ray dashboard on the head pod",
            id="v1.7.0-status-checks",
        ),
    ],
)
def test_a_failure_kuberay_does_not_retry_says_so(reason: str, said: str, means: str) -> None:
    """KubeRay retries a Failed RayJob while spec.backoffLimit allows, except for these
    reasons (checkBackoffLimitAndUpdateStatusIfNeeded: DeadlineExceeded at v1.6.2, and
    JobStatusCheckTimeoutExceeded too at v1.7.0, whose message only says that "job status
    checks" failed). The Failed condition says what the reason means and that no retry comes,
    then KubeRay's words; it keeps them once written."""
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "failed": 0}
    failed = {"jobDeploymentStatus": "Failed", "jobStatus": "RUNNING", "reason": reason,
              "message": said, "failed": 1}  # fmt: skip
    before = observe(created(), running)
    st = observe(before, failed, T2)
    cond = conditions.get(st, C.FAILED)
    assert cond is not None and cond["reason"] == reason
    assert means in cond["message"]
    retry = f"KubeRay does not retry a RayJob that failed with {reason}, whatever "
    assert retry in cond["message"]
    assert cond["message"].endswith(f". KubeRay: {said}")
    (event,) = [e for e in conditions.events_between(before, st) if e.type == "Warning"]
    assert event.message == f"phase Running -> Failed ({reason}): {cond['message']}"
    # Written once: a later sync (another release's words) keeps them.
    kept = {**st, "conditions": [{**c, "message": "older words"} if c["type"] == "Failed" else c
                                 for c in st["conditions"]]}  # fmt: skip
    again = observe(kept, failed, T2)
    assert conditions.get(again, C.FAILED)["message"] == "older words"  # type: ignore[index]
    # A failure KubeRay retries (or would, with backoffLimit) keeps KubeRay's words alone.
    app = observe(before, {**failed, "reason": "AppFailed"}, T2)
    assert conditions.get(app, C.FAILED)["message"] == said  # type: ignore[index]


# ---- EpisodesFailing: the training episodes, judged from the progress reads ---------------

EF = C.EPISODES_FAILING
ALL_FAIL = progress.Episodes(40, 38, (("agent_error", 30), ("timeout", 8)))
HEALTHY = progress.Episodes(40, 2, (("timeout", 2),))


def running() -> dict[str, Any]:
    return observe(created(), {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})


def judged(st: dict[str, Any], counted: progress.Episodes | None, now: str) -> dict[str, Any]:
    return status.apply_episodes(st, counted, "demo", now)


def test_episodes_failing_turns_true_with_the_dominant_reason_and_one_warning() -> None:
    before = running()
    st = judged(before, ALL_FAIL, T1)
    cond = conditions.get(st, EF)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "AgentError")
    assert cond["lastTransitionTime"] == T1
    assert cond["message"].startswith(
        "38 of the last 40 training episodes failed (EpisodesFailing is True from 50%): "
        "agent_error 30, timeout 8. "
    )
    assert "`agentrl logs demo`" in cond["message"]
    assert st["phase"] == Phase.RUNNING  # the run goes on: stopping it is the user's call
    assert [(e.type, e.reason, e.message) for e in conditions.events_between(before, st)] == [
        ("Warning", "EpisodesFailing", cond["message"])
    ]
    assert conditions.problems(st) == {(EF, "AgentError")}


def test_a_run_failing_for_days_costs_one_write_and_one_event() -> None:
    """Each read brings new counts; while the dominant reason stays, nothing is written."""
    st = judged(running(), ALL_FAIL, T1)
    for n in range(20, 60):
        again = judged(st, progress.Episodes(n, n, (("agent_error", n),)), T2)
        assert status.diff(st, again) is None
        assert conditions.events_between(st, again) == []
    # Another reason takes over: the condition says so (a status write), no new event.
    other = judged(st, progress.Episodes(40, 40, (("throttled", 40),)), T2)
    cond = conditions.get(other, EF)
    assert cond is not None and cond["reason"] == "Throttled"
    assert cond["lastTransitionTime"] == T1
    assert conditions.events_between(st, other) == []


def test_recovery_is_false_and_one_normal_event_then_nothing() -> None:
    failing = judged(running(), ALL_FAIL, T1)
    back = judged(failing, HEALTHY, T2)
    cond = conditions.get(back, EF)
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == (
        "False", "EpisodesRecovered", T2,
    )  # fmt: skip
    assert [(e.type, e.reason) for e in conditions.events_between(failing, back)] == [
        ("Normal", "EpisodesRecovered")
    ]
    assert conditions.problems(back) == frozenset()
    # Healthy reads after that write nothing: the message carries no count.
    again = judged(back, progress.Episodes(400, 0), T2)
    assert status.diff(back, again) is None


def test_a_healthy_run_never_gets_the_condition() -> None:
    st = running()
    assert judged(st, HEALTHY, T1) == st


def test_nothing_judged_leaves_the_condition_as_it_is() -> None:
    """Too few episodes, or no read yet since an operator restart: the status read back
    from the API server stands."""
    failing = judged(running(), ALL_FAIL, T1)
    assert judged(failing, None, T2) == failing
    assert judged(running(), None, T2) == running()


@pytest.mark.parametrize("rayjob", [
    {"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED"},
    {"jobDeploymentStatus": "Suspended"},
    {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"},
])  # fmt: skip
def test_a_run_no_longer_running_is_not_failing_episodes(rayjob: dict[str, Any]) -> None:
    failing = judged(running(), ALL_FAIL, T1)
    left = observe(failing, rayjob, T2)
    st = judged(left, ALL_FAIL, T2)  # a judgement left from the Running attempt: ignored
    cond = conditions.get(st, EF)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", left["phase"])
    # The phase's own event says what happened; no EpisodesRecovered for it.
    assert "EpisodesRecovered" not in [e.reason for e in conditions.events_between(failing, st)]


@pytest.mark.parametrize(
    ("reasons", "reason"),
    [
        ((("agent_error", 3),), "AgentError"),
        ((("timeout", 3),), "Timeout"),
        ((("internal_error", 3), ("timeout", 1)), "InternalError"),
        ((("other", 3), ("timeout", 1)), "EpisodesFailing"),  # labels the rollout never counts
        ((("", 3),), "EpisodesFailing"),
        ((("bad reason!", 3),), "EpisodesFailing"),
        ((("9lives", 3),), "EpisodesFailing"),
        ((("agent_error_" + "x" * 2000, 3),), "EpisodesFailing"),  # CamelCase-able, unknown
        ((), "EpisodesFailing"),
    ],
)
def test_failure_reason_is_camel_case(reasons: tuple[tuple[str, int], ...], reason: str) -> None:
    assert status.failure_reason(progress.Episodes(3, 3, reasons)) == reason


def test_every_failure_reason_of_the_bundle_is_a_documented_condition_reason() -> None:
    """Each reason the rollout counts becomes its own CamelCase reason (none falls back to
    the generic one), and docs/operator.md's condition table lists it."""
    from pathlib import Path

    from agentrl.api.constants import FAILURE_REASONS
    from agentrl.bundle.failures import REASONS

    assert tuple(REASONS) == FAILURE_REASONS  # every reason the rollout defines has a meaning
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    (row,) = [line for line in doc.splitlines() if line.startswith("| `EpisodesFailing` |")]
    for label in REASONS:
        reason = status.failure_reason(progress.Episodes(1, 1, ((label, 1),)))
        assert reason != C.EPISODES_FAILING and f"`{reason}`" in row, label


RUNNING_NO_JOB = {"jobDeploymentStatus": "Running", "jobStatus": "", "startTime": T0}


@pytest.mark.parametrize(
    ("seen", "found"),
    [
        pytest.param(
            status.Observed(RUNNING_NO_JOB, stuck=[("demo-head", "ErrImagePull", "a: b: c")]),
            status.Inherited(pod=("demo-head", "ErrImagePull", "a: b: c")),
            id="pod",
        ),
        pytest.param(
            status.Observed(
                RUNNING_NO_JOB,
                stuck=[("demo-sub", "Unschedulable", "0/4 nodes")],
                submitter_pods=frozenset({"demo-sub"}),
                active_deadline=60,
            ),
            status.Inherited(pod=("demo-sub", "Unschedulable", "0/4 nodes"), submitter_pod=True),
            id="submitter-pod",
        ),
        pytest.param(
            status.Observed(
                {"jobDeploymentStatus": "Initializing"},
                cluster=("demo-rc", "FailedCreateHeadPod", 'pods "x": forbidden'),
            ),
            status.Inherited(cluster=("FailedCreateHeadPod", 'pods "x": forbidden')),
            id="cluster",
        ),
        pytest.param(
            status.Observed(RUNNING_NO_JOB, submitter=("FailedCreate", "quota. exceeded: x")),
            status.Inherited(submitter=("FailedCreate", "quota. exceeded: x")),
            id="submitter-job",
        ),
        pytest.param(
            status.Observed(RUNNING_NO_JOB, rayjob_held=(T0, ("ray.io/rayjob-finalizer", "b/c"))),
            status.Inherited(rayjob_held=(T0, ("ray.io/rayjob-finalizer", "b/c"))),
            id="rayjob-held",
        ),
        pytest.param(
            status.Observed(RUNNING_NO_JOB, created=T0, startup_deadline=60),
            status.Inherited(),  # the status alone says it again
            id="deadline",
        ),
        pytest.param(status.Observed(RUNNING_NO_JOB), status.Inherited(), id="not-stalled"),
    ],
)
def test_an_inherited_stalled_reads_back_what_wrote_it(
    seen: status.Observed, found: status.Inherited
) -> None:
    """A new operator takes the Stalled condition it inherits as observed (`inherited`): the
    observations read back are those that wrote it, so writing with them changes nothing."""
    st = status.apply_observed(created(), seen, T1)
    assert status.inherited(st) == found
    again = dataclasses.replace(
        seen, stuck=[found.pod] if found.pod else seen.stuck, submitter=found.submitter,
        cluster=(seen.cluster[0], *found.cluster) if seen.cluster and found.cluster else None,
        rayjob_held=found.rayjob_held,
    )  # fmt: skip
    assert status.apply_observed(st, again, T2) == st
