"""`python -m agentrl.controller`: the operator process, one replica or several.

Watches every namespace, or the ones in AGENTRL_NAMESPACES; serves its health endpoint
(AGENTRL_LIVENESS_ENDPOINT) and Prometheus /metrics (AGENTRL_METRICS_PORT).

With AGENTRL_LEADER_ELECTION=true (the chart's default, with two replicas) the process first
waits for the leader Lease (`agentrl.controller.leader`) and runs kopf only while it holds
it. A standby has no watches and no controller, so it cannot reconcile, write status or post
events; when it takes over, kopf starts as after a restart: it lists every experiment and
reconciles each one once, which is idempotent (docs/operator.md). Losing the Lease stops kopf
and exits with status 1, as controller-runtime's managers do, and the kubelet restarts the
container as a fresh standby. A clean stop (SIGTERM) stops kopf first and then releases the
Lease, so a standby takes over at its next try instead of after a lease duration.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import uuid
from typing import Any

# kopf imports any Kubernetes client library it finds, only to recognise its model classes in
# kopf.adopt(); agentrl passes plain dicts and talks to the API through aiohttp (kube.py).
# kubernetes_asyncio alone adds ~45 MB of models to every operator pod, so keep them out.
for _unused in ("kubernetes_asyncio", "kubernetes", "pykube"):
    sys.modules.setdefault(_unused, None)  # type: ignore[arg-type]

import kopf  # noqa: E402

from agentrl.controller import config as config_mod  # noqa: E402
from agentrl.controller import handlers  # noqa: E402  (registers the handlers)
from agentrl.controller.config import OperatorConfig  # noqa: E402
from agentrl.controller.health import Health  # noqa: E402
from agentrl.controller.kube import Kube  # noqa: E402
from agentrl.controller.leader import LeaderElector, LeaseLock  # noqa: E402
from agentrl.controller.metrics import OperatorMetrics  # noqa: E402

__all__ = ["handlers", "main"]
logger = logging.getLogger("agentrl.controller")
# Exit statuses: a bad setting; the Lease was lost (restart as a standby).
EXIT_CONFIG, EXIT_LOST = 2, 1


def identity() -> str:
    """This replica in the Lease: the pod name, and a fresh suffix per process (as
    controller-runtime does), so a restarted container never mistakes its predecessor's
    record for its own."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{uuid.uuid4()}"


async def operate(
    cfg: OperatorConfig, metrics: OperatorMetrics, health: Health, *,
    stop: asyncio.Event | None = None, fence: Any = None,
) -> None:  # fmt: skip
    """Run kopf with our handlers until it stops (a signal, or `stop`)."""
    memo = kopf.Memo(config=cfg, metrics=metrics, fence=fence)
    health.memo = memo
    await kopf.operator(
        standalone=True,  # no KopfPeering objects: the Lease decides who acts
        clusterwide=not cfg.namespaces,
        namespaces=list(cfg.namespaces),
        memo=memo,
        stop_flag=stop,
    )


async def elected(cfg: OperatorConfig, metrics: OperatorMetrics, health: Health) -> int:
    """Wait for the Lease, operate while holding it; the process's exit status."""
    info = handlers.connection()
    namespace = cfg.lease_namespace or info.default_namespace
    if not namespace:
        print("agentrl-operator: AGENTRL_LEASE_NAMESPACE is unset and the credentials name no "
              "namespace: set it to the leader Lease's namespace", file=sys.stderr)  # fmt: skip
        return EXIT_CONFIG
    # Its own client and connection pool: a burst of reconcile writes never delays a renewal.
    kube = Kube(request_timeout=cfg.lease_timing.renew_deadline)
    await kube.configure(handlers.credentials(info))

    async def relogin() -> None:  # a rotated ServiceAccount token
        await kube.configure(handlers.credentials(handlers.connection()))

    elector = LeaderElector(LeaseLock(kube, namespace, cfg.lease_name, identity(), relogin),
                            cfg.lease_timing)  # fmt: skip
    health.elector = elector
    stop = asyncio.Event()
    acquiring = asyncio.create_task(elector.acquire())

    def on_signal() -> None:  # kopf installs its own handlers once it runs
        acquiring.cancel()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        try:
            await acquiring
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            logger.info("stopped while standing by")
            return 0
        metrics.leader.set(1)
        renewing = asyncio.create_task(elector.renew())
        renewing.add_done_callback(lambda _: stop.set())
        try:
            await operate(cfg, metrics, health, stop=stop, fence=elector.leading)
        finally:
            metrics.leader.set(0)
            lost = renewing.done()
            renewing.cancel()
            (failed,) = await asyncio.gather(renewing, return_exceptions=True)
            if lost and isinstance(failed, Exception):  # a bug, not a lost Lease
                logger.error("renewing Lease %s failed", elector.lock.describe(),
                             exc_info=failed)  # fmt: skip
            if not lost:  # kopf has stopped: nothing guarded by the Lease runs any more
                await elector.release()
        if lost:
            logger.error("lost Lease %s: exiting; restarted, this replica stands by",
                         elector.lock.describe())  # fmt: skip
            return EXIT_LOST
        return 0
    finally:
        await kube.close()


async def run(cfg: OperatorConfig, metrics: OperatorMetrics) -> int:
    health = Health()
    if cfg.liveness_endpoint:
        await health.start(cfg.liveness_endpoint)
    try:
        if not cfg.leader_election:
            metrics.leader.set(1)
            await operate(cfg, metrics, health)
            return 0
        return await elected(cfg, metrics, health)
    finally:
        await health.close()


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("AGENTRL_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if logging.getLogger().level > logging.DEBUG:
        # kopf logs every handler call at INFO ("Handler 'pod_event' succeeded"): one line per
        # watch event. Failures are still logged, at WARNING and above.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        cfg = config_mod.load(os.environ)
    except config_mod.ConfigError as err:
        print(f"agentrl-operator: {err}", file=sys.stderr)
        return EXIT_CONFIG
    metrics = OperatorMetrics()
    if cfg.metrics_port:
        metrics.serve(cfg.metrics_port)
    return asyncio.run(run(cfg, metrics))


if __name__ == "__main__":
    sys.exit(main())
