"""A stub of SGLang's router (sgl-model-gateway) in front of stub engines.

Like the Rust router it lists its workers at `GET /workers`, relays `/generate` (JSON or
SSE, unchanged) to one worker (by `X-SMG-Routing-Key` when given, as the consistent-hashing
policy slime uses, else round-robin), and answers 404 to `/abort_request`, which it
does not route: a client must abort on every worker itself.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


@dataclass
class StubRouter:
    """Round-robin router over stub engines: `GET /workers`, relays `/generate`, 404s aborts."""

    workers: list[str]
    drop_fields: frozenset[str] = frozenset()  # like routers that re-serialise a typed request
    url: str = ""
    _runner: web.AppRunner | None = None
    _http: aiohttp.ClientSession | None = None
    _next: int = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._http = aiohttp.ClientSession()
        app = web.Application(client_max_size=1 << 30)  # the Rust router relays any size
        app.router.add_get("/workers", self._list)
        app.router.add_post("/generate", self._relay)
        app.router.add_get("/health", lambda _: web.Response(text="OK"))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.url = f"http://{host}:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

    async def _list(self, _: web.Request) -> web.Response:
        items = [
            {
                "id": f"w{i}",
                "url": u,
                "model_id": "stub",
                "worker_type": "regular",
                "is_healthy": True,
                "load": 0,
            }
            for i, u in enumerate(self.workers)
        ]
        return _json(
            {"workers": items, "total": len(items), "stats": {"regular_count": len(items)}}
        )

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._http is not None
        key = request.headers.get("X-SMG-Routing-Key")
        if key is not None:  # consistent hashing, as slime configures the router
            worker = self.workers[zlib.crc32(key.encode()) % len(self.workers)]
        else:
            worker = self.workers[self._next % len(self.workers)]
            self._next += 1
        body = await request.read()
        if self.drop_fields:
            body = orjson.dumps(
                {k: v for k, v in orjson.loads(body).items() if k not in self.drop_fields}
            )
        async with self._http.post(
            worker + "/generate", data=body, headers={"Content-Type": "application/json"}
        ) as up:
            resp = web.StreamResponse(
                status=up.status,
                headers={"Content-Type": up.headers.get("Content-Type", "application/json")},
            )
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
