"""Run the app with uvicorn inside an existing event loop (dev, dispatcher, tests)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import uvicorn
from fastapi import FastAPI

from tickwork.api import edge
from tickwork.core.settings import EdgeSettings

_EDGE: Final = EdgeSettings()

log = logging.getLogger(__name__)


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
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose protocol says
    # TCP, and without it a keep-alive request's answer waited out Nagle's delay.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


class BadCertificate(Exception):
    """The TLS certificate or key cannot be loaded; ``str()`` says why, in one line."""


def check_tls(limits: EdgeSettings) -> None:
    """Load the certificate and key now, so a role says what is wrong with them in one
    line before it starts anything else (uvicorn would fail inside its task)."""
    if limits.tls_cert_file is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(limits.tls_cert_file, limits.tls_key_file)
    except OSError as error:  # ssl.SSLError is one
        raise BadCertificate(
            f"cannot serve TLS with {limits.tls_cert_file} and {limits.tls_key_file}: "
            f"{error.strerror or error}"
        ) from error


def _stamp(*paths: Path) -> tuple[tuple[int, int, int], ...] | None:
    """What changes when a file is rewritten or its Secret volume swapped in anew."""
    try:
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in map(os.stat, paths))
    except OSError:
        return None


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
                # Given explicitly: uvicorn would otherwise take FORWARDED_ALLOW_IPS
                # from the environment, and its default has changed between versions.
                # Only these peers may say the scheme was HTTPS (the dashboard's
                # Secure cookies and Origin check believe it).
                proxy_headers=bool(limits.forwarded_allow_ips),
                forwarded_allow_ips=list(limits.forwarded_allow_ips),
                ssl_certfile=limits.tls_cert_file,
                ssl_keyfile=limits.tls_key_file,
            )
        )
        self._task: asyncio.Task[None] | None = None
        self._reloading: asyncio.Task[None] | None = None
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
        scheme = "https" if self.limits.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

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
        if self.limits.tls:
            self._reloading = asyncio.create_task(self._reload_certificate())
        return self.url

    async def _reload_certificate(self) -> None:
        """Load the certificate files again when they change, into the context uvicorn
        serves from: new connections get the new pair, open ones keep theirs. A pair
        that does not load (a half-written file) is logged and the old one kept."""
        context = self._server.config.ssl
        cert, key = self.limits.tls_cert_file, self.limits.tls_key_file
        assert context is not None and cert is not None and key is not None
        seen = _stamp(cert, key)
        while True:
            await asyncio.sleep(self.limits.tls_reload_seconds)
            stamp = _stamp(cert, key)
            if stamp == seen:
                continue
            seen = stamp
            try:
                # Into a scratch context first: a failed load can leave a context
                # holding the new certificate with the old key.
                check_tls(self.limits)
                context.load_cert_chain(cert, key)
            except (BadCertificate, OSError) as error:
                log.warning(
                    "kept the TLS certificate served so far: %s",
                    error,
                    extra={"action": "tls-reload-failed"},
                )
            else:
                log.info("serving the renewed TLS certificate", extra={"action": "tls-reloaded"})

    async def stop(self) -> None:
        if self._reloading is not None:
            self._reloading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloading
            self._reloading = None
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
