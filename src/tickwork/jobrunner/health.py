"""The job-runner's health port: ``/healthz`` (the event loop answers), ``/readyz``
(its caches are synced and its last lease call went through) and ``/metrics``."""

from __future__ import annotations

from aiohttp import web

from tickwork.jobrunner import metrics
from tickwork.jobrunner.runner import JobRunner


class HealthServer:
    def __init__(self, runner: JobRunner, host: str, port: int) -> None:
        self.runner = runner
        self.host = host
        self.port = port
        self.url = ""
        self._app_runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen (``port`` 0: any free port); the URL to reach it from this host."""
        app = web.Application()
        app.router.add_get("/healthz", self._alive)
        app.router.add_get("/readyz", self._ready)
        app.router.add_get("/metrics", self._metrics)
        self._app_runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._app_runner.setup()
        site = web.TCPSite(self._app_runner, self.host, self.port)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        sockets = getattr(site._server, "sockets", None)
        assert sockets
        port = sockets[0].getsockname()[1]
        reach = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        self.url = f"http://{reach}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._app_runner is not None:
            await self._app_runner.cleanup()
            self._app_runner = None

    async def _alive(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _ready(self, _request: web.Request) -> web.Response:
        runner = self.runner
        body = {
            "status": "ready" if runner.ready() else "unavailable",
            "jobsSynced": runner.jobs.synced.is_set(),
            "scheduledJobsSynced": runner.scheduled_jobs.synced.is_set(),
            "leasing": runner.leasing,
            "held": len(runner.held),
        }
        return web.json_response(body, status=200 if runner.ready() else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        runner = self.runner
        return web.Response(
            body=runner.metrics.render(),
            headers={"Content-Type": metrics.CONTENT_TYPE},
        )
