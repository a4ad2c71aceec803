"""The ``postgres`` coordination backend: each shard keeps its own lease and the
scheduler members in its own schema (migration 0007), judged on its database clock.

For ``tickwork dev`` and installations without Kubernetes. A round reads every shard
in parallel, each bounded on its own: a shard whose database is down or hanging is
reported unreachable (nobody can take it, and nobody could write to it anyway) while
the others are coordinated as usual. Membership is written to every shard and read
from those that answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tickwork.coordination.backend import LeaseState, Observation
from tickwork.coordination.calls import Bounded
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.store import shard_leases
from tickwork.store.database import Connection, Database

T = TypeVar("T")


class PostgresLeases:
    name = "postgres"

    def __init__(
        self,
        database: Database,
        *,
        clock: Clock | None = None,
        shard_seconds: float = 2.0,
        observe_seconds: float | None = None,
    ) -> None:
        self.database = database
        self.clock = clock or DatabaseClock()
        self.shard_seconds = shard_seconds
        # A round's look at every shard waits this long for the slowest: a hung shard
        # must not hold up the renewal of the others' leases that follows.
        self.observe_seconds = shard_seconds if observe_seconds is None else observe_seconds
        self._calls = Bounded()

    async def _on(
        self, shard: int, work: Callable[[Connection], Awaitable[T]], seconds: float | None = None
    ) -> T:
        async def call() -> T:
            async with self.database.connection(shard) as conn:
                return await work(conn)

        return await self._calls.within(seconds or self.shard_seconds, call())

    async def observe(self, identity: str, lease_seconds: float) -> Observation:
        async def look(conn: Connection) -> tuple[frozenset[str], shard_leases.Record]:
            now = self.clock.now()
            members = await shard_leases.announce(conn, identity, lease_seconds, now)
            return members, await shard_leases.read(conn, now)

        shards = range(self.database.shard_count)
        answers = await asyncio.gather(
            *(self._on(shard, look, self.observe_seconds) for shard in shards),
            return_exceptions=True,
        )
        leases: dict[int, LeaseState] = {}
        members: set[str] = set()
        unreachable: set[int] = set()
        failures: list[BaseException] = []
        for shard, answer in zip(shards, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer
                unreachable.add(shard)
                failures.append(answer)
                continue
            seen, record = answer
            members |= seen
            leases[shard] = LeaseState(
                shard,
                record.holder,
                None if record.holder is None else record.remaining,
                record.transitions,
            )
        if not leases and failures:
            raise failures[0]
        return Observation(leases, frozenset(members), frozenset(unreachable))

    async def hold(self, shard: int, identity: str, lease_seconds: float) -> bool:
        return await self._on(
            shard, lambda conn: shard_leases.hold(conn, identity, lease_seconds, self.clock.now())
        )

    async def release(self, shard: int, identity: str) -> None:
        await self._on(shard, lambda conn: shard_leases.release(conn, identity, self.clock.now()))

    async def leave(self, identity: str) -> None:
        await asyncio.gather(
            *(
                self._on(shard, lambda conn: shard_leases.leave(conn, identity))
                for shard in range(self.database.shard_count)
            ),
            return_exceptions=True,
        )

    async def close(self) -> None:
        await self._calls.settle(self.shard_seconds)
