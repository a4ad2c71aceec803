"""Run the app with uvicorn inside an existing event loop (dev, dispatcher, tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from tickwork.api import edge


class _QuietServer(uvicorn.Server):
    """The caller owns signals: Ctrl-C stops every role, not just HTTP."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer:
    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = 8080,
        limits: edge.EdgeLimits | None = None,
    ) -> None:
        limits = limits or edge.EdgeLimits()
        self.limits = limits
        self._server = _QuietServer(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                lifespan="on",
                access_log=False,
                timeout_graceful_shutdown=10,
                # httptools, guarded: uvicorn alone bounds neither the time a request
                # may take to arrive nor the size of its headers (see api/edge.py).
                # The guard caps connections itself, at accept time, rather than with
                # limit_concurrency, which answers only once headers have arrived.
                http=edge.protocol(limits),
                ws="none",  # no WebSocket routes: refuse upgrades rather than hand off
                backlog=limits.backlog,
                timeout_keep_alive=limits.keep_alive_seconds,
            )
        )
        self._task: asyncio.Task[None] | None = None
        self.host = host

    @property
    def port(self) -> int:
        sockets = self._server.servers[0].sockets
        port: int = sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        """Serve in the background; return the URL once the socket is listening."""
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the start-up error (port in use, ...)
                raise RuntimeError("the HTTP server stopped during start-up")
            await asyncio.sleep(0.01)
        return self.url

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
