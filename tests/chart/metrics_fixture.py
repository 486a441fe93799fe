"""A process exporting agentrl's real metric registries with a troubled experiment's values.

`python metrics_fixture.py` builds `BundleMetrics` (what the Ray head pod serves) and
`OperatorMetrics`, sets every family (both splits), serves each on 127.0.0.1 on a free port,
and keeps counters and histograms moving so rates are non-zero. The values trip every alert on
purpose: the test proves each expression evaluates. AgentRLExperimentFailed reports new
failures, so another experiment fails every few seconds.

Beside them: the head's real hub serving /engine-metrics for two stub SGLang engines behind
the stub router (their families recorded from SGLang's source), and a dcgm-exporter page
(recorded from its templates) whose GPUs belong to the experiment's worker pod, which the
operator maps to the experiment. Prints `bundle=<port> operator=<port> hub=<port> dcgm=<port>`.
"""

from __future__ import annotations

import asyncio
import http.server
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from prometheus_client import start_http_server

from agentrl.bundle.metrics import BundleMetrics
from agentrl.bundle.traces import BREAK_REASONS
from agentrl.controller.metrics import OperatorMetrics

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.support: the stub engines and router
from tests.support.sglang_stub import StubEngine, StubRouter  # noqa: E402

from agentrl.bundle.hub import Hub  # noqa: E402

DCGM_PAGE = ROOT / "tests/support/recorded/dcgm-exporter.prom"
WORKER_POD = "demo-x7k2q-gpu-worker-abcde"  # the pod dcgm-exporter's page names
TICK_SECONDS = 0.25
FAIL_EVERY_TICKS = 20  # a new Failed experiment every 5 s (the test's failure window: 10 s)


def set_gauges(bundle: BundleMetrics, operator: OperatorMetrics) -> None:
    bundle.rollout_step.set(42)  # and it stays there: AgentRLProgressStalled's case
    bundle.batch_reward_mean.labels("train").set(0.61)
    bundle.batch_reward_mean.labels("eval").set(0.55)
    bundle.sessions_in_flight.labels("train").set(48)
    bundle.sessions_in_flight.labels("eval").set(8)
    bundle.connection_pool_size.set(64)
    bundle.connection_pool_in_use.set(61)  # 95%: saturated
    bundle.zero_variance_group_share.set(0.3)
    bundle.episode_length_bias.set(-0.08)
    bundle.excluded_episode_share.set(0.3)
    bundle.rollout_total_steps.set(200)
    bundle.wandb_run_info.labels(
        "https://wandb.ai/ml-research/agentrl-swe/runs/abc123", "rl/demo"
    ).set(1)
    operator.link(("rl", "a"), None, "http://a-raycluster-x-head-svc.rl.svc.cluster.local:8265")
    # Another team's experiment of the same name.
    operator.link(("rl-b", "a"), None, "http://a-raycluster-y-head-svc.rl-b.svc.cluster.local:8265")
    for name, reward in (("gsm8k-test", 0.58), ("math-hard", 0.21)):
        bundle.eval_reward_mean.labels(name).set(reward)
    for name, phase in (("a", "Running"), ("b", "Running"), ("c", "Failed"), ("d", "Succeeded")):
        operator.move(None, phase, ("rl", name))
    operator.flag(("rl", "c"), frozenset(), frozenset({("Failed", "AppFailed")}))
    for pod, component in (("demo-x7k2q-head-q2w3e", "head"), (WORKER_POD, "worker")):
        operator.pod(("rl", "demo"), pod, None, component)
    operator.flag(("rl", "e"), frozenset(), frozenset({("Stalled", "ImagePullBackOff")}))


def tick(bundle: BundleMetrics, operator: OperatorMetrics, n: int) -> None:
    """One rollout's worth of traffic: 30% of train episodes fail, eval 20%."""
    for split, ok, failed in (("train", 7, 3), ("eval", 4, 1)):
        bundle.episodes.labels(split, "succeeded").inc(ok)
        bundle.episodes.labels(split, "failed").inc(failed)
        bundle.failed_sessions.labels(split, "timeout").inc(failed - 1)
        bundle.failed_sessions.labels(split, "agent_error").inc(1)
        for i in range(ok + failed):
            bundle.episode_reward.labels(split).observe(0.0 if i < failed else (i % 10) / 10)
    bundle.connection_pool_discarded.inc()
    for api, seconds in (("openai", (0.04, 0.3, 1.2, 7.5)), ("anthropic", (0.08, 0.9, 3.0))):
        for s in seconds:
            bundle.gateway_request_seconds.labels(api).observe(s)
        bundle.gateway_requests.labels(api, "200").inc(len(seconds))
    bundle.gateway_requests.labels("openai", "500").inc()
    bundle.gateway_callbacks.labels("delivered").inc(7)  # HTTP agents' results, one lost
    bundle.gateway_callbacks.labels("unreachable").inc()
    bundle.generated_tokens.inc(5120)
    bundle.samples.inc(12)
    bundle.truncated_samples.inc(1)
    bundle.trace_breaks.labels(BREAK_REASONS[n % len(BREAK_REASONS)]).inc()
    # A train step that over-samples, filters and cuts; an eval pass.
    for outcome, groups in (("kept", 8), ("filtered", 2), ("carried_over", 1)):
        bundle.groups.labels(outcome).inc(groups)
    bundle.aborted_episodes.labels("train", "batch_full").inc(3)
    # The failed train episodes of trained groups, left out of their groups' statistics.
    bundle.excluded_episodes.labels("timeout").inc(2)
    bundle.excluded_episodes.labels("agent_error").inc(1)
    bundle.groups.labels("skipped").inc(1)
    for lag in (0, 0, 0, 0, 0, 0, 0, 1):  # one carried-over episode among eight
        bundle.policy_lag.observe(lag)
    bundle.stale_tokens.labels("masked").inc(900)
    bundle.stale_episodes_restarted.inc(1)
    bundle.context_full_turns.inc(1)
    for reason, seconds in (("cut", 400.0), ("filtered", 900.0)):
        bundle.discarded_episode_seconds.labels(reason).inc(seconds)
    for split, seconds in (("train", (60.0, 180.0, 900.0)), ("eval", (30.0, 120.0))):
        for s in seconds:
            bundle.episode_seconds.labels(split).observe(s)
        bundle.rollout_step_seconds.labels(split).observe(sum(seconds))
    for length in (120, 900, 3100, 8000):
        bundle.response_tokens.observe(length)
    # An eval pass every few ticks moves each set's step (the dashboard draws points there),
    # and slime saves a checkpoint (the tracker's iteration moves).
    if n % 8 == 0:
        bundle.checkpoint_iteration.set(20 * (n // 8 + 1))
        # A step's wall time, observed directly: the step gauge stays at 42 for
        # AgentRLProgressStalled, so the gauge's own clock never observes one.
        bundle.rollout_step_interval_seconds.observe(540.0)
        for name in ("gsm8k-test", "math-hard"):
            bundle.eval_step.labels(name).set(42 + n // 8)
    if n % FAIL_EVERY_TICKS == FAIL_EVERY_TICKS - 1:
        operator.move(None, "Failed", ("rl", f"failed-{n}"))
        operator.flag(("rl", f"failed-{n}"), frozenset(), frozenset({("Failed", "AppFailed")}))
    operator.reconcile_total.labels("ok").inc()
    operator.reconcile_seconds.observe(0.02 + (n % 5) / 100)


class _DcgmPage(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = DCGM_PAGE.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def start_engines(loop: asyncio.AbstractEventLoop) -> int:
    """Two stub engines behind the stub router, and the hub relaying them; the hub's port."""

    async def start() -> int:
        urls = [await StubEngine().start() for _ in range(2)]
        router = StubRouter(urls)
        await router.start()
        hub = Hub(None, "127.0.0.1", 0)
        port = await hub.start_metrics()
        hub.relay_engines(router.url)
        return port

    threading.Thread(target=loop.run_forever, daemon=True).start()
    return asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)


def main() -> int:
    bundle, operator = BundleMetrics(), OperatorMetrics()
    set_gauges(bundle, operator)
    bundle_server, _ = start_http_server(0, addr="127.0.0.1", registry=bundle.registry)
    operator_server, _ = start_http_server(0, addr="127.0.0.1", registry=operator.registry)
    dcgm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DcgmPage)
    threading.Thread(target=dcgm.serve_forever, daemon=True).start()
    hub_port = start_engines(asyncio.new_event_loop())
    print(f"bundle={bundle_server.server_port} operator={operator_server.server_port} "
          f"hub={hub_port} dcgm={dcgm.server_port}", flush=True)  # fmt: skip
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    n = 0
    while not stop.wait(TICK_SECONDS):
        tick(bundle, operator, n)
        n += 1
    bundle_server.shutdown()
    dcgm.shutdown()
    operator_server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
