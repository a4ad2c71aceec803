"""The HTTP edge: how long a request may take to arrive, how large its headers may be,
and how many connections one process holds.

What uvicorn enforces by itself (measured with 0.54, both protocols, on raw sockets):
no read timeout at all. Its keep-alive timeout runs only between requests, so a
connection that never finishes its headers (or never sends a byte), or trickles its
body, stays open for good. With httptools, header size is unbounded (a 20 KiB header
is served; a 2 MiB one still arriving is read on and on). With h11, only a header
block still incomplete is bounded (``h11_max_incomplete_event_size``, answered 400,
not 431); a complete 20 KiB one is served. ``limit_concurrency`` answers 503 only once
a request's headers are complete, counting the slow connections it should shed. So:

- ``GuardedProtocol`` (httptools, chosen explicitly) closes a connection whose request
  headers are not complete ``header_timeout_seconds`` after it opened or after the
  request's first byte (408 when part of a request came, a plain close when nothing
  did), answers 431 when headers exceed ``max_header_bytes`` (counted as the bytes
  arrive, so an endless header costs at most one read past the limit), and answers 503
  ``server-busy`` and closes at once when ``max_connections`` are already open.
- ``BodyDeadline`` (ASGI) answers 408 when a body has not arrived whole
  ``body_timeout_seconds`` after its headers (a trickled body, chunks sent forever).
- An answer given before its request arrived whole (a 401 before the body is read,
  a 413 on Content-Length, those 408s and 431s) ends in a lingering close, as nginx
  does: what still arrives is read and thrown away for at most ``linger_seconds``,
  then the connection is closed. Closing at once would make the kernel answer the
  client's next bytes with a reset, which can destroy the answer before the client
  reads it; never closing would let an unread body hold the connection for good.
- ``ClientGone`` (ASGI, outermost) ends quietly a request whose client went away before
  its body was read: Starlette raises ``ClientDisconnect`` from the read, which the
  server-error handler and uvicorn each logged as an error with a traceback (a client
  that times out is not a server error), and no one is left to read a 500.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tickwork.api import problems, render
from tickwork.core.errors import HeadersTooLarge, RequestTimeout, ServerBusy, TickworkError
from tickwork.core.settings import EdgeSettings

logger = logging.getLogger(__name__)


def raw_response(error: TickworkError) -> bytes:
    """A whole HTTP/1.1 problem response that ends the connection, for answers given
    before (or instead of) the application."""
    body = render.dumps(render.problem(error))
    lines = [
        f"HTTP/1.1 {error.status} {http.HTTPStatus(error.status).phrase}",
        f"content-type: {problems.MEDIA_TYPE}",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name.lower()}: {value}" for name, value in problems.headers_of(error).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# The ASGI scope extension that tells whether the request's connection is closing.
CLIENT_GONE: Final = "tickwork.client_gone"


def client_gone(request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether the client of ``request`` went away: from the connection itself when
    ``GuardedProtocol`` serves it, else through Starlette's ``is_disconnected``."""
    closing = request.scope.get("extensions", {}).get(CLIENT_GONE)
    if closing is None:
        return request.is_disconnected

    async def gone() -> bool:
        return bool(closing())

    return gone


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header timeouts, a header size limit and a
    connection cap (see the module docstring). ``protocol(limits)`` makes one."""

    limits: ClassVar[EdgeSettings] = EdgeSettings()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._awaiting_headers = True  # the next bytes belong to a request's headers
        self._raw_header_bytes = 0  # bytes received while the headers were incomplete
        self._header_bytes = 0  # request line and headers, as parsed
        self._message_complete = True  # the current request arrived whole
        self._linger_timer: asyncio.TimerHandle | None = None
        self._refusal: TickworkError | None = None

    # Connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            # Shed it now: lingering would keep the process over its cap.
            self._refusal = ServerBusy(f"over {self.limits.max_connections} open connections")
            self.transport.write(raw_response(self._refusal))
            self.transport.close()
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self._stop_lingering()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # refused: what still arrives is not read
        before = self._awaiting_headers
        super().data_received(data)
        if self._refusal is None and before and self._awaiting_headers:
            self._raw_header_bytes += len(data)
            if self._raw_header_bytes > self.limits.max_header_bytes:
                self._refuse(self._too_large())

    # Parser callbacks: once a request is refused, the rest of what was read is ignored.

    def on_message_begin(self) -> None:
        if self._refusal is not None:
            return
        super().on_message_begin()
        self._awaiting_headers = True
        self._message_complete = False
        self._header_bytes = 0
        if self._header_timer is None:
            self._arm_header_timer()

    def on_url(self, url: bytes) -> None:
        if self._count(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._count(len(name) + len(value) + 4):  # ": " and CRLF
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refusal is not None:
            return
        self._awaiting_headers = False
        self._raw_header_bytes = 0
        self._disarm_header_timer()
        # Whether the client went away, answered without a turn of the event loop
        # (Starlette's is_disconnected waits for one): see ``client_gone``.
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[CLIENT_GONE] = self.transport.is_closing
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refusal is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refusal is not None:
            return
        super().on_message_complete()
        self._awaiting_headers = True
        self._message_complete = True
        self._raw_header_bytes = 0
        self._stop_lingering()  # read whole after all: the connection may go on

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._message_complete and not self.transport.is_closing():
            self._linger()

    # Limits

    def _count(self, size: int) -> bool:
        """Count header bytes; False once the request is refused."""
        if self._refusal is not None:
            return False
        self._header_bytes += size
        if self._header_bytes > self.limits.max_header_bytes:
            self._refuse(self._too_large())
            return False
        return True

    def _too_large(self) -> HeadersTooLarge:
        return HeadersTooLarge(f"request headers over {self.limits.max_header_bytes} bytes")

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(
            self.limits.header_timeout_seconds, self._headers_timed_out
        )

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._raw_header_bytes == 0 and self._header_bytes == 0:
            self.transport.close()  # nothing asked: nothing to answer
            return
        seconds = self.limits.header_timeout_seconds
        self._refuse(RequestTimeout(f"request headers not complete within {seconds:g}s"))

    def _refuse(self, error: TickworkError) -> None:
        self._refusal = error
        self._write_refusal(error)

    def _write_refusal(self, error: TickworkError) -> None:
        self._disarm_header_timer()
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # An answer to an earlier request is still being written: do not
            # interleave; end the connection after it instead.
            self.cycle.keep_alive = False
            self.flow.pause_reading()
            return
        self.transport.write(raw_response(error))
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the client reads the answer, then the end
        self._linger()

    def _linger(self) -> None:
        """Close in ``linger_seconds``, whatever arrives meanwhile."""
        if self._linger_timer is None:
            self._linger_timer = self.loop.call_later(
                self.limits.linger_seconds, self.transport.close
            )

    def _stop_lingering(self) -> None:
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None


def protocol(limits: EdgeSettings) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's ``http=`` setting, bound to ``limits``."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})


_NO_BODY: Final = frozenset({b"0"})


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value not in _NO_BODY):
            return True
    return False


class BodyDeadline:
    """408 for a request body not arrived whole ``seconds`` after its headers."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        whole = False

        async def timed_receive() -> Message:
            nonlocal whole
            if whole:  # after the body only a disconnect comes: no deadline
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):  # no task per call, unlike wait_for
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(
                    f"request body not complete within {self.seconds:g}s"
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                whole = True
            return message

        await self.app(scope, timed_receive, send)


class ClientGone:
    """A request whose client went away before its body was read ends here: logged at
    INFO (action ``client-gone``), without a traceback, and not answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            closing = scope.get("extensions", {}).get(CLIENT_GONE)
            if closing is not None and not closing():
                # Starlette says "disconnect" too for a body read after the answer:
                # a bug of the route, with its client still there.
                raise
            logger.info(
                "%s %s: the client went away before the request was read",
                scope.get("method", ""),
                scope.get("path", ""),
                extra={"action": "client-gone"},
            )
