"""Wake long-polling lease requests when runs become ready, through PostgreSQL
LISTEN/NOTIFY: one listening connection per shard, no polling of the database by
waiting requests. Every transaction that makes runs ready (enqueue, due flip, replay)
notifies ``tickwork_ready`` with ``<shard schema> <queue>``; delivery happens at commit.
Shards that share a database (a schema each) share the channel and one listening
connection: the schema in the notification names the shard, so a waiter starts its
claim on the shard that has the run, not on every shard of the database. (A listener
per shard heard every notification of its database once each, and a wake-up waited
behind the ones that were not its shard's.)
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


class SQL(queries.Statements):
    listener_probe: str


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


def _by_database(shard_map: ShardMap) -> list[tuple[int, ...]]:
    """The shard numbers, grouped by the database they live in, in shard order."""
    groups: dict[str, list[int]] = {}
    for shard in shard_map.shards:
        groups.setdefault(shard.dsn, []).append(shard.number)
    return [tuple(group) for group in groups.values()]


class ReadySignal:
    """Listens on every shard's database and wakes the waiters of the notified queues.

    A listening connection that breaks (PostgreSQL restarting, the link reset) or stops
    answering its LISTEN or its keep-alive probe (a hung link) is replaced after a
    full-jitter backoff (``reconnect_delay`` doubling to ``max_reconnect_delay``); the
    waiters are woken each time it is back, since notifications sent meanwhile are lost.
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
        groups = _by_database(self.shard_map)
        ready = [asyncio.Event() for _ in groups]
        self._tasks = [
            asyncio.create_task(self._listen(group, event))
            for group, event in zip(groups, ready, strict=True)
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

    def _on_notification(
        self, schemas: dict[str, int], group: tuple[int, ...], payload: object
    ) -> None:
        schema, _, queue = str(payload).rpartition(" ")
        if not schema:
            # A bare queue name, as earlier versions sent: any shard of this database.
            for shard in group:
                self.notify(queue, shard)
            return
        number = schemas.get(schema)
        if number is not None:  # else a schema that is none of our shards
            self.notify(queue, number)

    async def _listen(self, group: tuple[int, ...], ready: asyncio.Event) -> None:
        """Listen for the shards of ``group``, which share one database."""
        schemas = {self.shard_map[number].schema: number for number in group}
        backoff = Backoff(self.reconnect_delay, self.max_reconnect_delay)
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await database.connect(self.shard_map[group[0]])
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                # LISTEN is a round trip too: a link that hangs right after connecting
                # must not hold up start-up or keep this shard group deaf for good.
                await asyncio.wait_for(
                    conn.add_listener(
                        CHANNEL,
                        lambda _c, _pid, _channel, payload: self._on_notification(
                            schemas, group, payload
                        ),
                    ),
                    self.probe_timeout,
                )
                self.connected.update(group)
                ready.set()
                for shard in group:
                    if backoff.failures:
                        logger.info(
                            "listening again for ready runs",
                            extra={"action": "listen-recovered", "shard": shard},
                        )
                    self.test_signals.listening.signal(shard)
                backoff.reset()
                # Whatever was notified while we were not listening: look again.
                self.wake_all()
                await self._until_lost(conn, lost)
                for shard in group:
                    logger.warning(
                        "lost the notification connection",
                        extra={"action": "listen-lost", "shard": shard},
                    )
            except Exception as error:
                for shard in group:
                    logger.log(
                        logging.WARNING if outages.is_outage(error) else logging.ERROR,
                        "cannot listen for ready runs: %s",
                        outages.describe(error),
                        extra={"action": "listen-error", "shard": shard},
                    )
                ready.set()  # do not hold up start-up; waiters still time out and retry
            finally:
                self.connected.difference_update(group)
                if conn is not None and not conn.is_closed():
                    # A hung link must not hang the listener too: give up on the close.
                    conn.terminate()
            for shard in group:
                self.test_signals.lost.signal(shard)
            await asyncio.sleep(backoff.next_delay())

    async def _until_lost(self, conn: asyncpg.Connection, lost: asyncio.Event) -> None:
        """Return when the connection ends, or when it stops answering a probe."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), self.probe_interval)
            if lost.is_set():
                return
            # A hung link sends no termination: only a round trip tells.
            await conn.execute(SQL.listener_probe, timeout=self.probe_timeout)
