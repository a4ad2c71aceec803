"""One installation's shards as a process sees them, and the engine over them.

The adapters (the HTTP API, the dashboard, the CLI's server roles) reach the store
only through the engine: they open an ``Installation`` and call its services, passing
the caller's scope in. ``database`` is the handle those services share; adapters pass
it to engine functions and never query it themselves.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from tickwork.core import fairness
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.queue_limits import QueueRateLimit
from tickwork.core.settings import PoolSettings
from tickwork.core.shards import ShardMap
from tickwork.engine import readiness
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.queue_windows import HeldBack
from tickwork.store import migrate as migrations
from tickwork.store.database import Database


@dataclass(frozen=True)
class Installation:
    database: Database
    jobs: Jobs
    dispatcher: Dispatcher
    clock: Clock

    @classmethod
    def over(
        cls,
        database: Database,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        priority_weights: Sequence[float] = fairness.DEFAULT_WEIGHTS,
        queue_rates: Mapping[str, QueueRateLimit] | None = None,
        queue_held_back: HeldBack | None = None,
    ) -> Installation:
        """The engine over pools already open (the caller closes them). Claims split
        the priorities by ``priority_weights`` (critical, default, bulk) and keep the
        queues of ``queue_rates`` within their limits (``queue_held_back`` is told of
        each claim a queue's limit cut short)."""
        clock = clock or DatabaseClock()
        shares = fairness.PriorityShares(priority_weights)
        return cls(
            database=database,
            jobs=Jobs(database, clock),
            dispatcher=Dispatcher(
                database,
                clock,
                rng,
                shares=shares,
                queue_rates=queue_rates,
                queue_held_back=queue_held_back,
            ),
            clock=clock,
        )

    @property
    def shard_map(self) -> ShardMap:
        return self.database.shard_map

    async def readiness(self, within: float) -> readiness.Readiness:
        """Whether every shard is reachable, migrated and the shard it should be."""
        return await readiness.check(self.database, within)


@asynccontextmanager
async def opened(
    shard_map: ShardMap,
    pool: PoolSettings | None = None,
    *,
    clock: Clock | None = None,
    priority_weights: Sequence[float] = fairness.DEFAULT_WEIGHTS,
    queue_rates: Mapping[str, QueueRateLimit] | None = None,
    queue_held_back: HeldBack | None = None,
) -> AsyncIterator[Installation]:
    """Pools to every shard of ``shard_map`` (no connection made yet) and the engine
    over them; the pools close on exit."""
    async with Database(shard_map, pool) as database:
        yield Installation.over(
            database,
            clock=clock,
            priority_weights=priority_weights,
            queue_rates=queue_rates,
            queue_held_back=queue_held_back,
        )


async def migrate(shard_map: ShardMap) -> dict[int, list[int]]:
    """Bring every shard to this release's schema; the versions applied per shard."""
    return await migrations.migrate_all(shard_map.shards)


def schema_version() -> int:
    """The schema version this release expects of every shard."""
    return migrations.latest_version()
