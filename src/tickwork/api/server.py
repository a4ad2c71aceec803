"""Run the app with uvicorn inside an existing event loop (dev, dispatcher, tests)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator
from typing import Final

import uvicorn
from fastapi import FastAPI

from tickwork.api import edge
from tickwork.core.settings import EdgeSettings

_EDGE: Final = EdgeSettings()


class CannotListen(Exception):
    """The API's address cannot be bound; ``str()`` says why, in one line."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {reason}")
        self.host = host
        self.port = port


class PortInUse(CannotListen):
    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port, "the port is in use")


def listen(host: str, port: int, backlog: int = _EDGE.backlog) -> socket.socket:
    """Bind and listen on ``host:port`` now, so a role can say "port in use" before it
    starts anything else (uvicorn would log the error and exit the process)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from error
        raise CannotListen(host, port, error.strerror or str(error)) from error
    sock.setblocking(False)
    return sock


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
        sock: socket.socket | None = None,
        limits: EdgeSettings | None = None,
    ) -> None:
        limits = limits or _EDGE
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
        self._sock = sock
        self.host = host
        self._port = port

    @property
    def port(self) -> int:
        sockets = self._server.servers[0].sockets
        port: int = sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        """Serve in the background; return the URL once the socket is listening.
        ``PortInUse`` (a ``CannotListen``) when the address is taken."""
        sock = self._sock or listen(self.host, self._port, self.limits.backlog)
        self._sock = None  # the server closes it when it stops
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
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
