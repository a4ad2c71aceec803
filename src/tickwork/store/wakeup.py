"""Wake long-polling lease requests when runs become ready, through PostgreSQL
LISTEN/NOTIFY: one listening connection per shard, no polling of the database by
waiting requests. Every transaction that makes runs ready (enqueue, due flip, replay)
notifies ``tickwork_ready`` with the queue name; delivery happens at commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Final

import asyncpg

from tickwork.core.shards import ShardMap
from tickwork.store import database

logger = logging.getLogger(__name__)

CHANNEL: Final = "tickwork_ready"


class Waiter:
    """One long-poll's interest in some queues."""

    def __init__(self, queues: frozenset[str]) -> None:
        self.queues = queues
        self.event = asyncio.Event()
        # The shards that notified since the last look: a claim starts there.
        self.shards: set[int] = set()

    async def wait(self, seconds: float) -> bool:
        """True when woken, False after ``seconds``."""
        try:
            await asyncio.wait_for(self.event.wait(), seconds)
        except TimeoutError:
            return False
        self.event.clear()
        return True


class ReadySignal:
    """Listens on every shard and wakes the waiters of the notified queues."""

    def __init__(self, shard_map: ShardMap, reconnect_delay: float = 1.0) -> None:
        self.shard_map = shard_map
        self.reconnect_delay = reconnect_delay
        self._waiters: dict[str, set[Waiter]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: list[asyncpg.Connection] = []
        self.listening = asyncio.Event()

    async def start(self) -> None:
        ready = [asyncio.Event() for _ in self.shard_map.shards]
        self._tasks = [
            asyncio.create_task(self._listen(shard_number, ready[shard_number]))
            for shard_number in range(self.shard_map.count)
        ]
        await asyncio.gather(*(event.wait() for event in ready))
        self.listening.set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    @contextlib.asynccontextmanager
    async def waiter(self, queues: Iterable[str]) -> AsyncIterator[Waiter]:
        """Register interest before looking for work, so no notification is missed."""
        waiter = Waiter(frozenset(queues))
        for queue in waiter.queues:
            self._waiters.setdefault(queue, set()).add(waiter)
        try:
            yield waiter
        finally:
            for queue in waiter.queues:
                waiting = self._waiters.get(queue)
                if waiting is not None:
                    waiting.discard(waiter)
                    if not waiting:
                        del self._waiters[queue]

    def notify(self, queue: str, shard: int | None = None) -> None:
        for waiter in self._waiters.get(queue, ()):
            if shard is not None:
                waiter.shards.add(shard)
            waiter.event.set()

    def wake_all(self) -> None:
        for waiting in self._waiters.values():
            for waiter in waiting:
                waiter.event.set()

    def _on_notification(self, shard: int, payload: object) -> None:
        self.notify(str(payload), shard)

    async def _listen(self, shard_number: int, ready: asyncio.Event) -> None:
        shard = self.shard_map[shard_number]
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await database.connect(shard)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(
                    CHANNEL,
                    lambda _c, _pid, _channel, payload, shard=shard_number: self._on_notification(
                        shard, payload
                    ),
                )
                ready.set()
                # Whatever was notified while we were not listening: look again.
                self.wake_all()
                await lost.wait()
                logger.warning(
                    "lost the notification connection",
                    extra={"action": "listen-lost", "shard": shard_number},
                )
            except (OSError, asyncpg.PostgresError) as error:
                logger.warning(
                    "cannot listen for ready runs: %s",
                    error,
                    extra={"action": "listen-error", "shard": shard_number},
                )
                ready.set()  # do not hold up start-up; waiters still time out and retry
            finally:
                if conn is not None and not conn.is_closed():
                    await conn.close()
            await asyncio.sleep(self.reconnect_delay)
