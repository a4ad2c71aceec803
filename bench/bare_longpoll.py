"""``python -m bench.bare_longpoll DATABASE_URL PORT``: the bare wake-up path that
tickwork's idle wake-up is measured against (``bench.wakeup``).

The least a long-polling queue can do on the same machinery: uvicorn with httptools
(as the dispatcher runs) serving a raw ASGI app, one asyncpg connection that LISTENs,
and ``GET /poll`` answered with the payload of the next notification. No framework, no
authentication, no claim: what is left of a wake-up once everything tickwork adds is
taken out, on the same PostgreSQL server, so its p99 is the floor tickwork's is set
against. ``GET /ping`` is answered at once: an HTTP round trip with no work in it, the
hop a wake-up through an HTTP enqueue takes on top of the bare path.
"""

from __future__ import annotations

import asyncio
import collections
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import asyncpg
import uvicorn

CHANNEL: Final = "bench_bare"
WAIT_SECONDS: Final = 20.0

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class BareLongPoll:
    """A raw ASGI app: notifications of ``CHANNEL`` queue up; each ``GET /poll``
    takes the oldest, waiting up to ``WAIT_SECONDS`` for one (204 when none came);
    ``GET /ping`` answers 200 at once."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.pending: collections.deque[str] = collections.deque()
        self.arrived = asyncio.Event()
        self.conn: asyncpg.Connection | None = None

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.pending.append(payload)
        self.arrived.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["path"] == "/ping":
            await _answer(send, 200, b"pong")
            return
        status, body = 204, b""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not self.pending and loop.time() < deadline:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), deadline - loop.time())
            except TimeoutError:
                break
        if self.pending:
            status, body = 200, self.pending.popleft().encode()
        await _answer(send, status, body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.conn = await asyncpg.connect(self.database_url)
                await self.conn.add_listener(CHANNEL, self._notified)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.conn is not None:
                    await self.conn.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str]) -> int:
    database_url, port = argv
    uvicorn.run(
        BareLongPoll(database_url),
        host="127.0.0.1",
        port=int(port),
        http="httptools",
        loop="uvloop" if _has_uvloop() else "asyncio",
        # The long-poll still waiting when the bench is done is cancelled at the
        # shutdown, which uvicorn reports as an error: nobody's error here.
        log_level="critical",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    return 0


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
