"""Wake long-polling lease requests when runs become ready, through PostgreSQL
LISTEN/NOTIFY: one listening connection per shard, no polling of the database by
waiting requests. Every transaction that makes runs ready (enqueue, due flip, replay)
notifies ``tickwork_ready`` with ``<shard schema> <queue>``; delivery happens at commit.
Shards that share a database (a schema each) share the channel: each shard's listener
takes the notifications of its own schema only, so a waiter starts its claim on the
shard that has the run, not on every shard of the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Final

import asyncpg

from tickwork.core.backoff import Backoff
from tickwork.core.shards import ShardMap
from tickwork.core.testsignal import Signals, TestSignal
from tickwork.store import database, outages, queries

logger = logging.getLogger(__name__)

CHANNEL: Final = "tickwork_ready"
PROBE: Final = queries.get("listener_probe")


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


@dataclass
class ListenerSignals(Signals):
    """What a test can wait on (``signal.test_signals.init()`` before ``start()``)."""

    listening: TestSignal[int] = field(default_factory=lambda: TestSignal("listening"))
    """A shard's listening connection is up (again): the shard number."""

    lost: TestSignal[int] = field(default_factory=lambda: TestSignal("lost"))
    """A shard's listening connection broke, stopped answering, or could not be made."""


class ReadySignal:
    """Listens on every shard and wakes the waiters of the notified queues.

    A listening connection that breaks (PostgreSQL restarting, the link reset) or stops
    answering its keep-alive probe (a hung link) is replaced after a full-jitter
    backoff (``reconnect_delay`` doubling to ``max_reconnect_delay``); the waiters are
    woken each time it is back, since notifications sent meanwhile are lost.
    Long-polls look at the database every few seconds anyway, so an outage of the
    listener delays them at most that long.
    """

    def __init__(
        self,
        shard_map: ShardMap,
        reconnect_delay: float = 1.0,
        *,
        probe_interval: float = 5.0,
        probe_timeout: float = 2.0,
        max_reconnect_delay: float = 5.0,
    ) -> None:
        self.shard_map = shard_map
        self.reconnect_delay = reconnect_delay
        self.max_reconnect_delay = max(reconnect_delay, max_reconnect_delay)
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self._waiters: dict[str, set[Waiter]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # Shards whose listening connection is up now.
        self.connected: set[int] = set()
        self.test_signals = ListenerSignals()

    async def start(self) -> None:
        ready = [asyncio.Event() for _ in self.shard_map.shards]
        self._tasks = [
            asyncio.create_task(self._listen(shard_number, ready[shard_number]))
            for shard_number in range(self.shard_map.count)
        ]
        await asyncio.gather(*(event.wait() for event in ready))

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
        schema, _, queue = str(payload).rpartition(" ")
        if schema and schema != self.shard_map[shard].schema:
            return  # another shard of the same database: its own listener has it
        # No schema: a bare queue name, as earlier versions sent.
        self.notify(queue, shard)

    async def _listen(self, shard_number: int, ready: asyncio.Event) -> None:
        shard = self.shard_map[shard_number]
        backoff = Backoff(self.reconnect_delay, self.max_reconnect_delay)
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
                self.connected.add(shard_number)
                ready.set()
                if backoff.failures:
                    logger.info(
                        "listening again for ready runs",
                        extra={"action": "listen-recovered", "shard": shard_number},
                    )
                backoff.reset()
                self.test_signals.listening.signal(shard_number)
                # Whatever was notified while we were not listening: look again.
                self.wake_all()
                await self._until_lost(conn, lost)
                logger.warning(
                    "lost the notification connection",
                    extra={"action": "listen-lost", "shard": shard_number},
                )
            except Exception as error:
                logger.log(
                    logging.WARNING if outages.is_outage(error) else logging.ERROR,
                    "cannot listen for ready runs: %s",
                    outages.describe(error),
                    extra={"action": "listen-error", "shard": shard_number},
                )
                ready.set()  # do not hold up start-up; waiters still time out and retry
            finally:
                self.connected.discard(shard_number)
                if conn is not None and not conn.is_closed():
                    # A hung link must not hang the listener too: give up on the close.
                    conn.terminate()
            self.test_signals.lost.signal(shard_number)
            await asyncio.sleep(backoff.next_delay())

    async def _until_lost(self, conn: asyncpg.Connection, lost: asyncio.Event) -> None:
        """Return when the connection ends, or when it stops answering a probe."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), self.probe_interval)
            if lost.is_set():
                return
            # A hung link sends no termination: only a round trip tells.
            await conn.execute(PROBE, timeout=self.probe_timeout)
