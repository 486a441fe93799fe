"""`python -m agentrl.controller`: the operator, standalone (no peering CRD needed).

Watches every namespace, or the ones in AGENTRL_NAMESPACES; serves the liveness probe
(AGENTRL_LIVENESS_ENDPOINT) and Prometheus /metrics (AGENTRL_METRICS_PORT).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

# kopf imports any Kubernetes client library it finds, only to recognise its model classes in
# kopf.adopt(); agentrl passes plain dicts and talks to the API through aiohttp (kube.py).
# kubernetes_asyncio alone adds ~45 MB of models to every operator pod, so keep them out.
for _unused in ("kubernetes_asyncio", "kubernetes", "pykube"):
    sys.modules.setdefault(_unused, None)  # type: ignore[arg-type]

import kopf  # noqa: E402

from agentrl.controller import config as config_mod  # noqa: E402
from agentrl.controller import handlers  # noqa: E402  (registers the handlers)
from agentrl.controller.metrics import OperatorMetrics  # noqa: E402

__all__ = ["handlers", "main"]


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
        return 2
    metrics = OperatorMetrics()
    if cfg.metrics_port:
        metrics.serve(cfg.metrics_port)
    memo = kopf.Memo(config=cfg, metrics=metrics)
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not cfg.namespaces,
            namespaces=list(cfg.namespaces),
            liveness_endpoint=cfg.liveness_endpoint or None,
            memo=memo,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
