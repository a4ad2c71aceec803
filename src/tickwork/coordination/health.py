"""The health port of a long-running role (the scheduler, the operator): ``/healthz``
(the process is alive and its event loop answers), ``/readyz`` (what the role says of
itself: 200 when it can do its part now, else 503 with why) and, when the role keeps
metrics, ``/metrics`` (Prometheus), for the kubelet and for scraping.

Every role replicates through leases, so readiness is the role's view of its lease
state and of the links it needs; this server only carries the answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeAlias

from aiohttp import web

# (ready, the JSON body): a role's answer to /readyz.
Readiness: TypeAlias = tuple[bool, dict[str, Any]]
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(eq=False)
class HealthServer:
    ready: Callable[[], Awaitable[Readiness]]
    host: str
    port: int
    _: KW_ONLY
    metrics: Callable[[], bytes] | None = None
    metrics_content_type: str = METRICS_CONTENT_TYPE
    url: str = field(default="", init=False)
    _runner: web.AppRunner | None = field(default=None, init=False, repr=False)

    async def start(self) -> str:
        """Listen (``port`` 0: any free port); the URL to reach it from this host."""
        app = web.Application()
        app.router.add_get("/healthz", self._alive)
        app.router.add_get("/readyz", self._ready)
        if self.metrics is not None:
            app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        # asyncio's or uvloop's server: both list their sockets.
        sockets = getattr(site._server, "sockets", None)
        assert sockets
        port = sockets[0].getsockname()[1]
        reach = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        self.url = f"http://{reach}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _alive(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _ready(self, _request: web.Request) -> web.Response:
        ready, body = await self.ready()
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        assert self.metrics is not None
        return web.Response(
            body=self.metrics(), headers={"Content-Type": self.metrics_content_type}
        )
