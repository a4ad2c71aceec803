"""A TCP proxy on 127.0.0.1 that can break the link to a database on command.

``hang()`` stops moving bytes both ways on every connection, open and new: the peers
see a link that says nothing, as in a network partition (nothing is dropped; the
kernel buffers hold it, and ``heal()`` lets it flow again, as TCP retransmission
would). ``reset()`` aborts every open connection with a TCP RST. ``blackhole()``
silently drops every open connection, as a firewall that forgot it does: the client
side stays open and hears nothing, ever; new connections work. ``starting_up()``
answers every new connection the way PostgreSQL does during start-up or crash
recovery (``57P03``, "the database system is starting up").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Final

_SSL_REQUEST: Final = 80877103
_GSS_REQUEST: Final = 80877104


def _starting_up_error() -> bytes:
    fields = b"".join(
        code + text + b"\0"
        for code, text in (
            (b"S", b"FATAL"),
            (b"V", b"FATAL"),
            (b"C", b"57P03"),
            (b"M", b"the database system is starting up"),
        )
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!i", len(body) + 4) + body


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it receives goes to the other end."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.backlog: list[bytes] = []  # received before the other end was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.link.proxy.hanging:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.backlog.append(data)
            return
        peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()


class _Link:
    """A client connection and its upstream connection."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.client = _Side(self)
        self.upstream = _Side(self)
        self.closed = False

    def sides(self) -> list[asyncio.Transport]:
        return [s.transport for s in (self.client, self.upstream) if s.transport is not None]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.links.discard(self)
        for transport in self.sides():
            transport.close()

    def abort(self) -> None:
        """Close both ends with a TCP RST, as a reset link does."""
        if self.closed:
            return
        self.closed = True
        self.proxy.links.discard(self)
        for transport in self.sides():
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()

    def pause(self) -> None:
        for transport in self.sides():
            transport.pause_reading()

    def resume(self) -> None:
        for transport in self.sides():
            if not transport.is_closing():
                transport.resume_reading()


class _StartingUp(asyncio.Protocol):
    """Answers the first start-up packet of a client with ``57P03`` and closes."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while len(self.buffer) >= 8:
            length, code = struct.unpack("!ii", self.buffer[:8])
            if len(self.buffer) < length:
                return
            self.buffer = self.buffer[length:]
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                self.transport.write(b"N")  # no TLS: go on in plain text
                continue
            self.transport.write(_starting_up_error())
            self.transport.close()
            return


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream_host``:``upstream_port``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.links: set[_Link] = set()
        self._dropped: list[_Link] = []  # blackholed: kept open, silent, until close()
        self.hanging = False
        self.refusing_as_starting = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self.accepted = 0

    async def start(self) -> TcpProxy:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def dsn(self, database_url: str) -> str:
        """``database_url`` (a URL to the upstream) pointed at this proxy instead."""
        return database_url.replace(
            f"@{self.upstream_host}:{self.upstream_port}/", f"@127.0.0.1:{self.port}/"
        )

    def _accept(self) -> asyncio.Protocol:
        self.accepted += 1
        if self.refusing_as_starting:
            return _StartingUp()
        link = _Link(self)
        self.links.add(link)
        asyncio.get_running_loop().create_task(self._connect(link))
        return link.client

    async def _connect(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(
                lambda: link.upstream, self.upstream_host, self.upstream_port
            )
        except OSError:
            link.abort()
            return
        link.client.peer, link.upstream.peer = link.upstream, link.client
        for side in (link.client, link.upstream):
            peer = side.peer
            assert peer is not None and peer.transport is not None
            for data in side.backlog:
                peer.transport.write(data)
            side.backlog.clear()
        if self.hanging:
            link.pause()

    def hang(self) -> None:
        """Stop moving bytes, on open connections and on new ones, until ``heal()``."""
        self.hanging = True
        for link in list(self.links):
            link.pause()

    def heal(self) -> None:
        self.hanging = False
        self.refusing_as_starting = False
        for link in list(self.links):
            link.resume()

    def reset(self) -> None:
        """Abort every open connection (new ones are proxied as usual)."""
        for link in list(self.links):
            link.abort()

    def blackhole(self) -> None:
        """Drop every open connection without telling its client."""
        for link in list(self.links):
            self.links.discard(link)
            link.closed = True  # so the upstream's end does not close the client's side
            link.pause()
            if link.upstream.transport is not None:
                link.upstream.transport.abort()
            self._dropped.append(link)

    def starting_up(self) -> None:
        """Answer new connections as a PostgreSQL in start-up does; open ones go on."""
        self.refusing_as_starting = True

    async def close(self) -> None:
        self.reset()
        for link in self._dropped:
            if link.client.transport is not None:
                link.client.transport.abort()
        self._dropped.clear()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
