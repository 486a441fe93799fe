"""The operator's one read that is not the Kubernetes API: an experiment's `/metrics`.

The progress columns of `kubectl get rlx` come from the bundle's Prometheus endpoint on the
head pod, read through the experiment's metrics Service. It is plain HTTP to an address in
the cluster, so it has its own short-lived session: none of the API server's credentials or
TLS settings travel with it.
"""

from __future__ import annotations

import aiohttp

from agentrl.controller.kube import USER_AGENT


async def read_metrics(url: str, limit: float) -> str | None:
    """GET a Prometheus endpoint within `limit` seconds; None when it cannot be read (never
    raises: a missing reading only leaves the progress columns as they were)."""
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=limit), headers={"User-Agent": USER_AGENT}
            ) as plain,
            plain.get(url) as resp,
        ):
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, TimeoutError, OSError, UnicodeDecodeError):
        return None
