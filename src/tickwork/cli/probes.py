"""``tickwork scheduler --health-port``: ``/healthz`` (alive), ``/readyz`` (its last
coordination round went through, with the shards it owns and those whose database is
failing) and ``/metrics`` (Prometheus), for the kubelet and for scraping."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from tickwork.coordination.coordinator import Coordinator
from tickwork.engine import metrics
from tickwork.engine.scheduler import Scheduler


class Probes:
    def __init__(self, scheduler: Scheduler, coordinator: Coordinator, host: str, port: int):
        self.scheduler = scheduler
        self.coordinator = coordinator
        self.host = host
        self.port = port
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/healthz", self._alive)
        app.router.add_get("/readyz", self._ready)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        assert sockets
        self.url = f"http://{self.host}:{sockets[0].getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _alive(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def state(self) -> dict[str, Any]:
        coordinator = self.coordinator
        return {
            "identity": coordinator.identity,
            "owned": sorted(coordinator.owned()),
            "members": len(coordinator.members),
            "aim": coordinator.aim,
            # Shards whose database is down or hanging: their passes fail, or their
            # lease cannot be read (nobody can own them until it answers again).
            "down": sorted({*self.scheduler.failing(), *coordinator.unreachable}),
        }

    async def _ready(self, _request: web.Request) -> web.Response:
        seen = self.coordinator.last_observed
        lease = self.coordinator.timing.lease_seconds
        if seen is None or time.monotonic() - seen > lease:
            body = {"status": "unavailable", "detail": "no coordination round went through"}
            return web.json_response({**body, **self.state()}, status=503)
        return web.json_response({"status": "ready", **self.state()})

    async def _metrics(self, _request: web.Request) -> web.Response:
        registry = self.scheduler.metrics
        body = registry.render() if registry is not None else b""
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})
