"""The operator's health endpoint (`AGENTRL_LIVENESS_ENDPOINT`), for the kubelet's probes.

The operator's own rather than kopf's, because a standby replica runs no kopf at all yet must
answer too: both replicas are ready, which is what a rollout and a drain wait for. It is
served in the operator's event loop, so it answers only while the loop runs.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from agentrl.controller.leader import LeaderElector


class Health:
    """`/healthz`: whether this replica leads, and who does.

    Like client-go's leader-election health check, a replica that still believes it holds
    the Lease a whole lease duration after its last renewal is reported unhealthy: it should
    have stopped and exited, so the kubelet restarts it."""

    def __init__(self) -> None:
        self.elector: LeaderElector | None = None
        self.memo: Any = None  # kopf's memo while kopf runs (its `controller`)
        self._runner: web.AppRunner | None = None

    async def start(self, endpoint: str) -> None:
        url = urlsplit(endpoint)
        app = web.Application()
        app.router.add_get(url.path or "/", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, url.hostname, url.port).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def report(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, what the endpoint says)."""
        controller = self.memo.get("controller") if self.memo is not None else None
        body: dict[str, Any] = {"experiments": len(controller.experiments) if controller else 0}
        elector = self.elector
        if elector is None:  # no leader election: this process always leads
            return True, {**body, "leading": True}
        renewed = elector.renewed_at
        stale = (elector.holds() and renewed is not None
                 and asyncio.get_running_loop().time() - renewed
                 > elector.timing.lease_duration)  # fmt: skip
        body |= {"leading": elector.leading(), "leader": elector.leader,
                 "identity": elector.identity, "lease": elector.lock.describe()}  # fmt: skip
        return not stale, body

    async def _get(self, _: web.Request) -> web.Response:
        healthy, body = self.report()
        return web.json_response(body, status=200 if healthy else 503)
