"""The health port of roles without the HTTP API (the scheduler): ``/healthz`` (the
process answers), ``/readyz`` (its loop is making passes) and ``/metrics``
(Prometheus text, unauthenticated: serve it on the pod network only)."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from tickwork.engine import metrics as metrics_module
from tickwork.engine.metrics import Metrics


class Progress:
    """Ready while ``count()`` keeps moving: unchanged for ``stale_seconds`` (a loop
    stuck on a hung database, or not started) is not ready."""

    def __init__(
        self,
        count: Callable[[], int],
        stale_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self.stale_seconds = stale_seconds
        self.clock = clock
        self._seen = count()
        self._moved_at: float | None = None

    def ready(self) -> bool:
        now = self.clock()
        current = self.count()
        if current != self._seen:
            self._seen, self._moved_at = current, now
        return self._moved_at is not None and now - self._moved_at <= self.stale_seconds


@asynccontextmanager
async def serving(
    listener: socket.socket, metrics: Metrics, progress: Progress
) -> AsyncIterator[web.AppRunner]:
    """Serve on ``listener``, a bound socket (``options.listen``: a taken port is one
    line and exit status 1 before the role starts anything)."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        if progress.ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="no scheduler pass lately\n")

    async def render(_request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.render(), headers={"Content-Type": metrics_module.CONTENT_TYPE}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", render)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.SockSite(runner, listener).start()
        yield runner
    finally:
        await runner.cleanup()
