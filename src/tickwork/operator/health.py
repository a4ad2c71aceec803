"""``/healthz`` (the process is alive and its event loop answers) and ``/readyz`` (it is
watching ScheduledJobs and every shard of the store answers) on ``--health-port``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from tickwork.core.settings import OperatorSettings

logger = logging.getLogger("tickwork.operator.health")

DEFAULT_PORT: Final = OperatorSettings.model_fields["health_port"].default


class HealthServer:
    def __init__(
        self,
        watching: Callable[[], bool],
        store: Callable[[], Awaitable[str | None]],
        host: str = "0.0.0.0",  # noqa: S104 - probes come from the kubelet, not loopback
        port: int = DEFAULT_PORT,
    ) -> None:
        self.watching = watching
        self.store = store  # None when every shard answers, else what is wrong
        self.host = host
        self.port = port
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/healthz", self._alive)
        app.router.add_get("/readyz", self._ready)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        # asyncio's or uvloop's server: both list their sockets.
        sockets = getattr(site._server, "sockets", None)
        assert sockets
        port = sockets[0].getsockname()[1]
        self.url = f"http://{'127.0.0.1' if self.host in ('0.0.0.0', '') else self.host}:{port}"  # noqa: S104
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _alive(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _ready(self, _request: web.Request) -> web.Response:
        if not self.watching():
            return web.json_response(
                {"status": "starting", "detail": "not watching ScheduledJobs yet"}, status=503
            )
        try:
            async with asyncio.timeout(2):
                problem = await self.store()
        except TimeoutError:
            problem = "the store did not answer within 2 s"
        if problem is not None:
            return web.json_response({"status": "unavailable", "detail": problem}, status=503)
        return web.json_response({"status": "ready"})
