"""The operator on kmock, after creation: RayJob status, updates, stuck pods, progress."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp.web
import pytest
from prometheus_client import generate_latest
from tests.conftest import minimal_body

from agentrl.api.constants import LABEL_EXPERIMENT, ConditionType
from agentrl.bundle.hub import Hub
from agentrl.controller import conditions
from agentrl.controller.config import OperatorConfig
from agentrl.controller.status import parse_time

from .conftest import Api, FakeClock, OperatorRun, wait_for
from .test_operator_kmock import EXP, NS, RAYJOBS, created, status_of

# (jobDeploymentStatus, jobStatus, expected phase): KubeRay's life of one RayJob, in order,
# ending in each of the terminal outcomes.
JOURNEYS = {
    "succeeds": [
        ("", "", "Pending"),
        ("Initializing", "", "Initializing"),
        ("Running", "PENDING", "Running"),
        ("Running", "RUNNING", "Running"),
        ("Complete", "SUCCEEDED", "Succeeded"),
        ("Running", "RUNNING", "Succeeded"),
    ],
    "retries-then-fails": [
        ("Initializing", "", "Initializing"),
        ("Running", "RUNNING", "Running"),
        ("Retrying", "FAILED", "Initializing"),
        ("Running", "RUNNING", "Running"),
        ("Failed", "RUNNING", "Failed"),
        ("Running", "RUNNING", "Failed"),
    ],
    "suspends": [
        ("Initializing", "", "Initializing"),
        ("Suspending", "", "Suspended"),
        ("Suspended", "", "Suspended"),
        ("Initializing", "", "Initializing"),
        ("Waiting", "", "Initializing"),
        ("Running", "RUNNING", "Running"),
        ("Complete", "STOPPED", "Failed"),
    ],
    "invalid-for-kuberay": [("ValidationFailed", "", "Failed")],
}


@pytest.mark.parametrize("journey", list(JOURNEYS))
async def test_phase_follows_job_deployment_status(
    api: Api, operator: OperatorRun, journey: str
) -> None:
    await created(api)
    for deployment, job, phase in JOURNEYS[journey]:
        rj_status = {"jobDeploymentStatus": deployment, "jobStatus": job}
        if deployment == "Retrying":
            rj_status["failed"] = 1  # type: ignore[assignment]
        await api.patch(RAYJOBS, NS, "demo", {"status": rj_status}, sub="status")
        await wait_for(
            lambda p=phase: status_of(api).get("phase") == p,  # type: ignore[misc]
            what=f"{journey}: {deployment}/{job} -> {phase}",
        )
        if deployment:
            await wait_for(
                lambda d=deployment: (
                    status_of(api)
                    .get("rayJob", {})  # type: ignore[misc]
                    .get("jobDeploymentStatus")
                    == d
                ),
                what="mirror",
            )
    st = status_of(api)
    terminal = st["phase"] in ("Succeeded", "Failed")
    assert terminal
    assert conditions.is_true(st, st["phase"])
    assert st.get("completionTime")
    if journey == "retries-then-fails":
        assert st["attempts"] == 2
    # Events follow the status writes they describe: wait for the last one to land.
    await wait_for(lambda: api.reasons("demo")[-1:] == [st["phase"]],
                   what="the terminal event")  # fmt: skip
    reasons = api.reasons("demo")
    assert reasons[-1] == st["phase"]  # one event per transition, the last one terminal
    assert len(reasons) == len(set(zip(reasons, range(len(reasons)), strict=True)))


async def test_suspend_and_resume_reach_the_rayjob(api: Api, operator: OperatorRun) -> None:
    await created(api)
    await api.patch(EXP, NS, "demo", {"spec": {"suspend": True}})
    await wait_for(
        lambda: api.get(RAYJOBS, NS, "demo")["spec"]["suspend"] is True,  # type: ignore[index]
        what="RayJob suspended",
    )
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Suspended"}}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Suspended", what="phase Suspended")
    await api.patch(EXP, NS, "demo", {"spec": {"suspend": False}})
    await wait_for(
        lambda: api.get(RAYJOBS, NS, "demo")["spec"]["suspend"] is False,  # type: ignore[index]
        what="RayJob resumed",
    )
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    st = await wait_for(lambda: status_of(api).get("phase") == "Running" and status_of(api))
    assert conditions.get(st, ConditionType.SUSPENDED)["status"] == "False"  # type: ignore[index]


async def test_lifecycle_updates_do_not_fight_other_controllers(
    api: Api, operator: OperatorRun
) -> None:
    await created(api)
    # Someone else (the autoscaler, Kueue) owns these fields of the RayJob now.
    other = {"spec": {"suspend": True, "rayClusterSpec": {"workerGroupSpecs": [{"replicas": 7}]}}}
    await api.patch(RAYJOBS, NS, "demo", other)
    await api.patch(
        EXP,
        NS,
        "demo",
        {
            "spec": {
                "activeDeadlineSeconds": 7200,
                "ttlSecondsAfterFinished": 600,
                "scheduling": {"queueName": "gpu-team"},
            }
        },
    )
    job = await wait_for(
        lambda: (
            (j := api.get(RAYJOBS, NS, "demo"))
            and j["spec"].get("activeDeadlineSeconds") == 7200
            and j
        )
    )
    assert job["spec"]["ttlSecondsAfterFinished"] == 600
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-team"
    assert job["spec"]["suspend"] is True  # Kueue's decision stands
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"] == [{"replicas": 7}]
    st = await wait_for(lambda: status_of(api).get("observedGeneration") == 2 and status_of(api))
    assert conditions.get(st, ConditionType.IMMUTABLE_FIELD_CHANGED) is None


async def test_a_run_kueue_has_not_admitted_says_so(api: Api, operator: OperatorRun) -> None:
    """Kueue suspends the RayJob until it admits the workload, possibly for days: KubeRay
    reports Suspended exactly as for `spec.suspend`, and no pod exists. The Suspended
    condition names what holds the run."""
    body = minimal_body()
    body["spec"]["scheduling"] = {"queueName": "gpu-team"}
    await created(api, body)
    await api.patch(RAYJOBS, NS, "demo", {"spec": {"suspend": True}})  # Kueue's webhook
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Suspended"}},
                    "status")  # fmt: skip
    st = await wait_for(lambda: (s := status_of(api)).get("phase") == "Suspended" and s)
    cond = conditions.get(st, ConditionType.SUSPENDED)
    assert cond is not None and cond["status"] == "True"
    assert "Kueue holds the RayJob until LocalQueue gpu-team" in cond["message"]
    # Admitted: it runs, and the words go with the Suspended phase.
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}},
                    "status")  # fmt: skip
    st = await wait_for(lambda: (s := status_of(api)).get("phase") == "Running" and s)
    assert not (conditions.get(st, ConditionType.SUSPENDED) or {}).get("message")


async def test_immutable_change_is_refused(api: Api, operator: OperatorRun) -> None:
    await created(api)
    job_before = api.get(RAYJOBS, NS, "demo")
    config_before = api.get("v1/configmaps", NS, "demo-config")
    await api.patch(EXP, NS, "demo", {"spec": {"model": {"path": "Qwen/Qwen3-8B"}}})
    st = await wait_for(
        lambda: conditions.is_true(s := status_of(api), ConditionType.IMMUTABLE_FIELD_CHANGED) and s
    )
    cond = conditions.get(st, ConditionType.IMMUTABLE_FIELD_CHANGED)
    assert cond is not None and "spec.model" in cond["message"] and cond["observedGeneration"] == 2
    await wait_for(lambda: api.reasons("demo") == ["ImmutableFieldChanged"],
                   what="one ImmutableFieldChanged event")  # fmt: skip
    assert api.get(RAYJOBS, NS, "demo")["spec"] == job_before["spec"]  # type: ignore[index]
    assert api.get("v1/configmaps", NS, "demo-config")["data"] == config_before["data"]  # type: ignore[index]
    # Reverting clears the condition.
    await api.patch(EXP, NS, "demo", {"spec": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}}})
    await wait_for(
        lambda: (
            conditions.get(status_of(api), ConditionType.IMMUTABLE_FIELD_CHANGED).get("status")
            == "False"
        ),
        what="condition cleared",
    )


RUNNING = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
CHILD_RESOURCES = ("v1/configmaps", "v1/services", RAYJOBS)


async def running(api: Api) -> None:
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": RUNNING}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")


def child_writes(api: Api, mark: int) -> list[tuple[str, str]]:
    return [(r.method, r.resource) for r in api.emu.log[mark:]
            if r.is_write and r.agent.startswith("agentrl")
            and r.resource in CHILD_RESOURCES]  # fmt: skip


def rayjob_deleted(api: Api) -> dict[str, Any] | None:
    st = status_of(api)
    failed = conditions.get(st, ConditionType.FAILED) or {}
    return st if st.get("phase") == "Failed" and failed.get("reason") == "RayJobDeleted" else None


async def test_a_rayjob_deleted_by_hand_fails_the_experiment(
    api: Api, operator: OperatorRun
) -> None:
    """`kubectl delete rayjob demo` while the run is Running: the Ray cluster goes with it.
    The experiment is Failed (RayJobDeleted), with one Warning event saying how to run it
    again, and the alerts' series; nothing is created again, sweeps later either."""
    await running(api)
    await api.delete(RAYJOBS, NS, "demo")
    mark = len(api.emu.log)  # after the test's own DELETE (its agent is agentrl-tests)
    st = await wait_for(lambda: rayjob_deleted(api), what="Failed (RayJobDeleted)")
    message = conditions.get(st, ConditionType.FAILED)["message"]  # type: ignore[index]
    assert "RayJob demo was deleted outside the operator" in message
    assert "delete this RLExperiment (`kubectl delete rlx`) and apply it again" in message
    assert not conditions.is_true(st, ConditionType.STALLED)
    await wait_for(lambda: "RayJobDeleted" in api.reasons("demo"), what="the event")
    assert operator.memo is not None
    controller = operator.memo.controller
    swept = controller.sweeps
    await wait_for(lambda: controller.sweeps >= swept + 5, what="sweeps")
    (event,) = [e for e in api.events("demo") if e["reason"] not in ("Running",)]
    assert (event["type"], event["reason"]) == ("Warning", "RayJobDeleted")
    assert event["message"] == message
    assert child_writes(api, mark) == []
    assert api.get(RAYJOBS, NS, "demo") is None
    assert status_of(api) == st
    # It read the experiment to tell this from the experiment's own deletion (RBAC: get).
    assert any(r.method == "GET" and r.resource == EXP and r.name == "demo" and not r.watch
               and r.agent.startswith("agentrl") for r in api.emu.log[mark:])  # fmt: skip
    assert _sample(operator, "agentrl_experiment_phase") == [
        {"experiment_namespace": NS, "experiment": "demo", "phase": "Failed"}
    ]
    series = {"experiment_namespace": NS, "experiment": "demo", "condition": "Failed",
              "reason": "RayJobDeleted"}  # fmt: skip
    assert series in _sample(operator, "agentrl_experiment_condition")


async def test_why_an_attempt_failed_outlives_kuberay_clearing_it(
    api: Api, operator: OperatorRun
) -> None:
    """KubeRay v1.6.2's retry as it writes it: `Retrying` with the failed attempt's reason and
    message, then `New` (no jobDeploymentStatus) with both cleared, then `Initializing`. The
    experiment says why attempt 1 failed all along: the Running condition and one Warning
    event `AttemptFailed`."""
    await running(api)
    message = "Job entrypoint command failed with exit code 1, last available logs: CUDA OOM"
    retrying = {"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED", "reason": "AppFailed",
                "message": message, "failed": 1, "succeeded": 0}  # fmt: skip
    new = {"jobDeploymentStatus": None, "jobStatus": None, "reason": None, "message": None}
    initializing = {"jobDeploymentStatus": "Initializing"}
    steps = ((retrying, "Initializing"), (new, "Pending"), (initializing, "Initializing"))
    for rj_status, phase in steps:
        await api.patch(RAYJOBS, NS, "demo", {"status": rj_status}, "status")
        await wait_for(lambda p=phase: status_of(api).get("phase") == p,  # type: ignore[misc]
                       what=phase)  # fmt: skip
        cond = conditions.get(status_of(api), ConditionType.RUNNING) or {}
        assert cond.get("status") == "False"
        assert cond.get("message", "").startswith(f"attempt 1 failed (AppFailed): {message}")
    failed = [e for e in api.events("demo") if e["reason"] == "AttemptFailed"]
    assert [(e["type"], e["message"]) for e in failed] == [("Warning", cond["message"])]


# KubeRay v1.6.2's two writes of a stopped Ray job (rayjob_controller.go): once the submitter
# has finished, `Complete` with Ray's own message and no reason; when it has not within the
# transition grace period, `Complete` with KubeRay's reason and message in place of Ray's.
GRACE = "JobDeploymentStatusTransitionGracePeriodExceeded"
GRACE_MESSAGE = ("JobDeploymentStatus does not transition to Complete or Failed within the "
                 "grace period after JobStatus reaches a terminal state.")  # fmt: skip
STOPPED = {
    "submitter-finished": ({"message": "Job was intentionally stopped."},
                           "; Ray: Job was intentionally stopped."),
    "grace-period": ({"reason": GRACE, "message": GRACE_MESSAGE},
                     f"; KubeRay: {GRACE}: {GRACE_MESSAGE}"),
}  # fmt: skip


@pytest.mark.parametrize("how", list(STOPPED))
async def test_a_stopped_ray_job_says_so(api: Api, operator: OperatorRun, how: str) -> None:
    """`ray job stop` under a Running run: the experiment is Failed with reason JobStopped and
    a message saying what that means (not retried) with KubeRay's or Ray's words, and its one
    Warning event says the same, not a bare `phase Running -> Failed`."""
    await running(api)
    written, said = STOPPED[how]
    rj_status = {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED", **written}
    await api.patch(RAYJOBS, NS, "demo", {"status": rj_status}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Failed", what="phase Failed")
    failed = conditions.get(status_of(api), ConditionType.FAILED) or {}
    assert failed["reason"] == "JobStopped"
    assert failed["message"].startswith("Ray reports the job STOPPED: it was stopped before it "
                                        "ended (`ray job stop`")  # fmt: skip
    assert "KubeRay does not retry a stopped job" in failed["message"]
    assert failed["message"].endswith(said)
    await wait_for(lambda: "Failed" in api.reasons("demo"), what="the event")
    (event,) = [e for e in api.events("demo") if e["reason"] == "Failed"]
    assert event["type"] == "Warning"
    assert event["message"] == f"phase Running -> Failed (JobStopped): {failed['message']}"


async def test_a_rayjob_deleted_while_no_operator_ran_is_not_created_again(
    api: Api, operator: OperatorRun
) -> None:
    """The same deletion while the operator was down: the next one finds the status naming a
    RayJob that is gone. Same outcome as the watch's, and no new children (no new cluster)."""
    await running(api)
    await operator.stop()
    await api.delete(RAYJOBS, NS, "demo")
    mark = len(api.emu.log)
    await operator.start()
    st = await wait_for(lambda: rayjob_deleted(api), what="Failed (RayJobDeleted)")
    await wait_for(lambda: "RayJobDeleted" in api.reasons("demo"), what="the event")
    await operator.stop()  # let the resumed work finish
    # The restart path: the reconcile read the RayJob the status names and found none.
    assert any(r.method == "GET" and r.resource == RAYJOBS and r.name == "demo" and not r.watch
               and r.agent.startswith("agentrl") for r in api.emu.log[mark:])  # fmt: skip
    assert child_writes(api, mark) == []
    assert api.get(RAYJOBS, NS, "demo") is None
    assert api.reasons("demo").count("RayJobDeleted") == 1
    assert status_of(api) == st
    # And a later restart changes nothing: the outcome is final.
    mark = len(api.emu.log)
    await operator.start()
    await wait_for(lambda: any(r.resource == EXP and r.watch for r in api.emu.log[mark:]),
                   what="the experiments watched again")  # fmt: skip
    assert operator.memo is not None
    controller = operator.memo.controller
    await wait_for(lambda: controller.sweeps >= 3, what="sweeps")
    writes = [r for r in api.emu.log[mark:] if r.is_write and r.agent.startswith("agentrl")]
    assert writes == [], writes


def stuck_pod(
    name: str, waiting: dict[str, Any] | None, unschedulable: bool = False
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if waiting:
        status["containerStatuses"] = [{"name": "ray-head", "state": {"waiting": waiting}}]
    if unschedulable:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                # Long past AGENTRL_STUCK_UNSCHEDULABLE_SECONDS: no node came for it.
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "status": status,
        "metadata": {"name": name, "namespace": NS, "labels": {LABEL_EXPERIMENT: "demo"}},
    }


@pytest.mark.parametrize(
    ("waiting", "unschedulable", "reason"),
    [
        pytest.param(
            {"reason": "ImagePullBackOff", "message": "Back-off pulling"},
            False,
            "ImagePullBackOff",
            id="image-pull-backoff",
        ),
        pytest.param({"reason": "ErrImagePull"}, False, "ErrImagePull", id="err-image-pull"),
        pytest.param({"reason": "CrashLoopBackOff"}, False, "CrashLoopBackOff", id="crash-loop"),
        pytest.param(None, True, "Unschedulable", id="unschedulable"),
    ],
)
async def test_stuck_pods_stall_the_experiment(
    api: Api,
    operator: OperatorRun,
    waiting: dict[str, Any] | None,
    unschedulable: bool,
    reason: str,
) -> None:
    await created(api)
    await api.patch(
        RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Initializing"}}, "status"
    )
    await api.create(stuck_pod("demo-head-abc", waiting, unschedulable))
    st = await wait_for(
        lambda: conditions.is_true(s := status_of(api), ConditionType.STALLED) and s
    )
    cond = conditions.get(st, ConditionType.STALLED)
    assert cond is not None and cond["reason"] == reason and "demo-head-abc" in cond["message"]
    await wait_for(lambda: api.reasons("demo")[-1:] == ["Stalled"],
                   what="the Stalled event")  # fmt: skip
    await api.patch(
        "v1/pods",
        NS,
        "demo-head-abc",
        {
            "status": {
                "containerStatuses": [{"name": "ray-head", "state": {"running": {}}}],
                "conditions": [],
            }
        },
    )
    await wait_for(
        lambda: not conditions.is_true(status_of(api), ConditionType.STALLED),
        what="Stalled cleared",
    )


async def test_startup_deadline_on_a_fake_clock(
    api: Api, operator: OperatorRun, clock: FakeClock
) -> None:
    exp = await created(api, minimal_body(startupDeadlineSeconds=600))
    await api.patch(
        RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Initializing"}}, "status"
    )
    await wait_for(lambda: status_of(api).get("phase") == "Initializing")
    swept = operator.memo.controller.sweeps
    await wait_for(lambda: operator.memo.controller.sweeps > swept + 2)
    assert not conditions.is_true(status_of(api), ConditionType.STALLED)
    # The deadline runs from creationTimestamp, which the emulator stamped from the real
    # clock after the fake one was made: move relative to it, not to the fake clock's start.
    clock.set(parse_time(exp["metadata"]["creationTimestamp"]) + timedelta(seconds=601))
    st = await wait_for(
        lambda: conditions.is_true(s := status_of(api), ConditionType.STALLED) and s
    )
    assert conditions.get(st, ConditionType.STALLED)["reason"] == "StartupDeadlineExceeded"  # type: ignore[index]


METRICS_TEMPLATE = """\
# TYPE agentrl_rollout_step gauge
agentrl_rollout_step {rollout}
# TYPE agentrl_batch_reward_mean gauge
agentrl_batch_reward_mean{{split="train"}} 0.625
agentrl_batch_reward_mean{{split="gsm8k"}} 0.5
# TYPE agentrl_episodes_total counter
agentrl_episodes_total{{split="train",outcome="succeeded"}} {ok}
agentrl_episodes_total{{split="train",outcome="failed"}} {failed}
agentrl_episodes_total{{split="gsm8k",outcome="failed"}} 50
# TYPE agentrl_failed_sessions_total counter
agentrl_failed_sessions_total{{split="train",reason="timeout"}} {failed}
"""
METRICS_TEXT = METRICS_TEMPLATE.format(rollout=4, ok=90, failed=10)


class MetricsServer:
    """A real HTTP server speaking the Prometheus text format, like the head pod's."""

    def __init__(self) -> None:
        self.text = METRICS_TEXT
        self.up = True
        self.hits: list[str] = []

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        self.hits.append(request.path)
        if not self.up:
            return aiohttp.web.Response(status=503)
        return aiohttp.web.Response(text=self.text, content_type="text/plain")


@pytest.fixture
async def metrics_server() -> AsyncIterator[tuple[MetricsServer, int]]:
    server = MetricsServer()
    app = aiohttp.web.Application()
    app.router.add_get("/{ns}/{name}/metrics", server.handle)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield server, port
    finally:
        await runner.cleanup()


@pytest.fixture
def op_config(metrics_server: tuple[MetricsServer, int]) -> OperatorConfig:
    url = f"http://127.0.0.1:{metrics_server[1]}/{{namespace}}/{{name}}/metrics"
    return OperatorConfig(
        metrics_port=0,
        liveness_endpoint="",
        sweep_interval=0.1,
        scrape_timeout=1.0,
        metrics_url=url,
        image="runtime@sha256:" + "1" * 64,  # the Ray pods' default: a test value
    )


async def test_progress_scrape(
    api: Api, operator: OperatorRun, metrics_server: tuple[MetricsServer, int]
) -> None:
    server, _ = metrics_server
    await created(api)
    assert server.hits == []  # not Running: nothing to scrape
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    st = await wait_for(lambda: status_of(api).get("progress"), what="progress")
    assert server.hits[0] == "/rl/demo/metrics"
    progress = status_of(api)["progress"]
    assert {k: v for k, v in progress.items() if k != "updatedAt"} == {
        "rollout": 4,
        "totalRollouts": 10,
        "rolloutText": "5/10",
        "trainReward": 0.625,
        "evalReward": 0.5,
        "failedSessionRatio": 0.1,
    }
    # Unreachable: progress stays, no writes, no errors, scraping goes on. (Writes are counted
    # from after the Running event, which follows the status write that may carry progress.)
    await wait_for(lambda: api.reasons("demo") == ["Running"], what="the Running event")
    server.up = False
    mark, hits = len(api.emu.log), len(server.hits)
    await wait_for(lambda: len(server.hits) > hits + 3, what="more scrapes")
    assert status_of(api)["progress"] == st
    writes = [r for r in api.emu.log[mark:] if r.is_write]
    assert writes == []
    # Back with new numbers: the ratio covers only the episodes since the last good scrape.
    server.text = METRICS_TEMPLATE.format(rollout=5, ok=140, failed=60)
    server.up = True
    await wait_for(lambda: status_of(api)["progress"].get("rollout") == 5, what="rollout 5")
    assert status_of(api)["progress"]["failedSessionRatio"] == 0.5  # 50 of 100 new episodes
    assert status_of(api)["progress"]["rolloutText"] == "6/10"


def hub_metrics(passed: bool, reason: str, message: str) -> str:
    """What the hub's /metrics serves once the launcher published its preflight result."""
    hub = Hub(None, "127.0.0.1", 0)
    hub.publish_preflight(passed, reason, message)
    return generate_latest(hub.metrics.registry).decode()


def preflight_of(api: Api) -> dict[str, Any] | None:
    return conditions.get(status_of(api), ConditionType.PREFLIGHT)


async def test_the_gang_preflight_result_becomes_the_preflight_condition(
    api: Api, operator: OperatorRun, metrics_server: tuple[MetricsServer, int]
) -> None:
    server, _ = metrics_server
    problem = (
        "pod rlx-gpu-worker-2 on node ip-10-0-1-7: Shm: /dev/shm holds 64.0 MiB, "
        "spec.resources.shmSize asks for 64Gi (64.0 GiB) (and 1 more problem)"
    )
    server.text = hub_metrics(False, "Shm", problem)
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    cond = await wait_for(lambda: preflight_of(api), what="the Preflight condition")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Shm", problem)
    await wait_for(lambda: "PreflightFailed" in api.reasons("demo"), what="its event")
    # A retry's launcher passes: the condition turns True with what it measured.
    passed = "4 GPU workers, 32 GPUs checked in 41.0 s; nccl all-reduce busbw 310.20 GB/s"
    server.text = hub_metrics(True, "Passed", passed)
    cond = await wait_for(
        lambda: (c := preflight_of(api)) and c["status"] == "True" and c, what="Preflight True"
    )
    assert (cond["reason"], cond["message"]) == ("Passed", passed)


async def test_step_time_and_eta_on_a_fake_clock(
    api: Api, operator: OperatorRun, metrics_server: tuple[MetricsServer, int], clock: FakeClock
) -> None:
    server, _ = metrics_server
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(lambda: status_of(api).get("progress", {}).get("rollout") == 4)
    # Rollout 4 was reached some time before the first read: only a move starts the clock.
    start = clock.now
    clock.set(start + timedelta(seconds=30))
    server.text = METRICS_TEMPLATE.format(rollout=5, ok=90, failed=10)
    await wait_for(lambda: status_of(api)["progress"].get("rollout") == 5)
    assert "stepSeconds" not in status_of(api)["progress"]
    # Two steps in 240 s: 120 s per step; rollout ids 8 and 9 remain.
    clock.set(start + timedelta(seconds=270))
    server.text = METRICS_TEMPLATE.format(rollout=7, ok=90, failed=10)
    progress = await wait_for(
        lambda: (p := status_of(api)["progress"]).get("rollout") == 7 and p, what="rollout 7"
    )
    assert progress["stepSeconds"] == 120.0 and progress["rolloutText"] == "8/10"
    eta = parse_time(progress["eta"])
    assert eta == start + timedelta(seconds=270 + 2 * 120)
    # Reads without a move change nothing, however much time passes (no status writes).
    await wait_for(lambda: api.reasons("demo") == ["Running"], what="the Running event")
    mark, hits = len(api.emu.log), len(server.hits)
    clock.set(start + timedelta(seconds=900))
    await wait_for(lambda: len(server.hits) > hits + 3, what="more scrapes")
    assert [r for r in api.emu.log[mark:] if r.is_write] == []


def _sample(operator: OperatorRun, family: str) -> list[dict[str, str]]:
    """The label sets of one operator metric family with value 1."""
    assert operator.memo is not None
    registry = operator.memo.controller.metrics.registry
    return [s.labels for m in registry.collect() if m.name == family for s in m.samples
            if s.value == 1]  # fmt: skip


async def test_phase_and_ray_dashboard_series_follow_the_experiment(
    api: Api, operator: OperatorRun
) -> None:
    """One phase series and one dashboard-link series per experiment, moved with it and
    removed with it (the dashboard's filters, annotation and run links read them)."""
    await created(api)
    url = "demo-raycluster-x-head-svc.rl.svc.cluster.local:8265"
    status = {"jobDeploymentStatus": "Running", "dashboardURL": url}
    await api.patch(RAYJOBS, NS, "demo", {"status": status}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Running", what="phase Running")
    phases = await wait_for(lambda: _sample(operator, "agentrl_experiment_phase"))
    assert phases == [{"experiment_namespace": NS, "experiment": "demo", "phase": "Running"}]
    links = await wait_for(lambda: _sample(operator, "agentrl_experiment_info"))
    assert links == [
        {"experiment_namespace": NS, "experiment": "demo", "ray_dashboard_url": f"http://{url}"}
    ]
    await api.delete(EXP, NS, "demo")
    await wait_for(lambda: not _sample(operator, "agentrl_experiment_info"), what="link removed")
    assert _sample(operator, "agentrl_experiment_phase") == []


# The W&B run in status: read from the run's metrics, like progress.
RUN = 'agentrl_wandb_run_info{{url="https://wandb.ai/ml/gsm8k/runs/{run}",group="rl/demo"}} 1\n'


async def test_the_run_url_reaches_status_and_follows_each_attempt(
    api: Api, operator: OperatorRun, metrics_server: tuple[MetricsServer, int]
) -> None:
    server, _ = metrics_server
    server.text = METRICS_TEXT + "# TYPE agentrl_wandb_run_info gauge\n" + RUN.format(run="a1")
    await created(api)
    await api.patch(RAYJOBS, NS, "demo", {"status": {"jobDeploymentStatus": "Running"}}, "status")
    await wait_for(
        lambda: status_of(api).get("wandbRunURL") == "https://wandb.ai/ml/gsm8k/runs/a1",
        what="status.wandbRunURL",
    )
    # A retry logs a new run (same name, same group); the link follows it.
    server.text = server.text.replace("runs/a1", "runs/b2")
    await wait_for(
        lambda: status_of(api).get("wandbRunURL") == "https://wandb.ai/ml/gsm8k/runs/b2",
        what="the retry's run",
    )
    # Metrics without the run (the head restarting): the last one known stays.
    server.text = METRICS_TEXT
    hits = len(server.hits)
    await wait_for(lambda: len(server.hits) > hits + 3, what="more scrapes")
    assert status_of(api)["wandbRunURL"] == "https://wandb.ai/ml/gsm8k/runs/b2"


async def test_a_lowered_ttl_after_the_run_ended_reaches_the_rayjob(
    api: Api, operator: OperatorRun
) -> None:
    """KubeRay reads `ttlSecondsAfterFinished` on every reconcile of a finished RayJob
    (`handleShutdownAfterJobFinishes` at v1.6.2), and after a deadline the Ray job trains on,
    on the GPUs, until it expires: lowering it on the ended experiment must reach the RayJob,
    so the cluster goes now. Nothing is created, and a restart reads nothing again."""
    await created(api, minimal_body(ttlSecondsAfterFinished=86400))
    ended = {"jobDeploymentStatus": "Failed", "jobStatus": "RUNNING",
             "reason": "DeadlineExceeded", "endTime": "2026-01-01T05:00:00Z"}  # fmt: skip
    await api.patch(RAYJOBS, NS, "demo", {"status": ended}, "status")
    await wait_for(lambda: status_of(api).get("phase") == "Failed", what="phase Failed")
    mark = len(api.emu.log)
    await api.patch(EXP, NS, "demo", {"spec": {"ttlSecondsAfterFinished": 0}})
    await wait_for(
        lambda: api.get(RAYJOBS, NS, "demo")["spec"]["ttlSecondsAfterFinished"] == 0,  # type: ignore[index]
        what="the lowered TTL on the RayJob",
    )
    assert child_writes(api, mark) == [("PATCH", RAYJOBS)]
    st = await wait_for(lambda: status_of(api).get("observedGeneration") == 2 and status_of(api))
    assert st["phase"] == "Failed"
    await operator.stop()
    mark = len(api.emu.log)
    await operator.start()
    assert operator.memo is not None
    swept = operator.memo.controller.sweeps
    await wait_for(lambda: operator.memo.controller.sweeps >= swept + 2, what="sweeps")  # type: ignore[union-attr]
    assert not [r for r in api.emu.log[mark:]
                if r.agent.startswith("agentrl") and r.resource == RAYJOBS and r.name == "demo"
                and not r.watch]  # fmt: skip
